"""python -m bench.overhead [--only=train,fashion,resnet50] [--launches=3] [--quick] [--reuse] [--out_dir=results]

Each configuration's launches in turn (train.py from scratch under horovodrun on this host), their
time blocks (summary.json's `time`, training/ledger.py) read into results/overhead.{json,md,png}: the
productive share, the share after start-up, the epoch ends' cost against the steps' time, each the
median of the launches with its range. The emulated hosts' runs (issue 44's (c)) are not part of it.
"""
import argparse
import json
import os
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a file: the repository on the path
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.overhead import ledgers, report  # noqa: E402
from bench.harness.train_runs import REPO, cpu_model, launch, record, reused  # noqa: E402

# name: (what it is, ranks, train.py's flags, --quick's flags instead)
CONFIGS = {
    "train": ("make train: ResNet-20 on digits, 12 epochs", 2, [], ["--epochs=3"]),
    "fashion": ("Fashion-MNIST, ResNet-8, 4 epochs", 2,
                ["--dataset=fashion_mnist", "--model=resnet8", "--epochs=4", "--export=false"],
                ["--dataset=fashion_mnist", "--model=resnet8", "--epochs=1", "--max_steps=200", "--export=false"]),
    "resnet50": ("ResNet-50 at 224x224, synthetic batches of 8 a rank, 30 steps", 2,
                 ["--model=resnet50", "--dataset=synthetic", "--batch_size=8", "--max_steps=30", "--export=false"],
                 ["--model=resnet50", "--dataset=synthetic", "--batch_size=8", "--max_steps=4", "--export=false"]),
}


def parse_args(argv=None):
  p = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.split("\n\n")[0])
  p.add_argument("--only", default=",".join(CONFIGS), help=f"configurations, of {', '.join(CONFIGS)}")
  p.add_argument("--launches", type=int, default=3, help="launches of each configuration (the median is reported)")
  p.add_argument("--quick", action="store_true", help="a smoke run: shorter runs (not comparable with full ones)")
  p.add_argument("--reuse", action="store_true", help="read back launches already made with the same flags")
  p.add_argument("--out_dir", default=os.path.join(REPO, "results"))
  p.add_argument("--runs_dir", default=os.path.join(REPO, "runs", "overhead"))
  args = p.parse_args(argv)
  args.only = [c for c in args.only.split(",") if c]
  unknown = [c for c in args.only if c not in CONFIGS]
  if unknown:
    p.error(f"--only={','.join(unknown)}: not a configuration; pass some of {','.join(CONFIGS)}")
  if args.launches < 1:
    p.error(f"--launches={args.launches} must be at least 1")
  return args


def commit() -> str:
  git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
  return git.stdout.strip()


def main(argv=None) -> int:
  args = parse_args(argv)
  head = commit()
  out = {"setup": {"commit": head, "cpu": cpu_model(), "cores": os.cpu_count(), "launches": args.launches,
                   "quick": args.quick, "date": time.strftime("%Y-%m-%d")}, "configs": {}}
  for name in args.only:
    what, ranks, flags, quick = CONFIGS[name]
    flags = quick if args.quick else flags
    launches = []
    for i in range(args.launches):
      model_dir = os.path.join(args.runs_dir, f"{name}-{i}")
      key = {"flags": flags, "ranks": ranks, "launch": i, "commit": head}  # --reuse: this commit's launches only
      run = reused(model_dir, key) if args.reuse else None
      if run is None:
        summary, _, seconds = launch(ranks, [*flags, f"--model_dir={model_dir}"], model_dir, timeout=3600)
        run = {**key, "summary": summary, "launch_seconds": seconds}
        record(model_dir, run)
      figures = ledgers.figures(run["summary"])
      launches.append(figures)
      print(f"{name} launch {i}: {figures['wall_seconds']:.1f} s wall, productive share "
            f"{figures['productive_share']:.2f} ({figures['productive_share_after_startup']:.2f} after start-up), "
            f"epoch ends {figures['epoch_end_share_of_steps']:.1%} of step time", flush=True)
    medians = ledgers.median_of(launches)
    out["configs"][name] = {"what": what, "ranks": ranks, "flags": flags, "launches": launches, "median": medians,
                            "verdicts": {k: list(v) for k, v in ledgers.verdicts(name, medians).items()}}
  os.makedirs(args.out_dir, exist_ok=True)
  path = os.path.join(args.out_dir, "overhead.json")
  if os.path.exists(path):  # configurations --only left out, measured at this commit before, stay
    with open(path) as fh:
      before = json.load(fh)
    if before["setup"]["commit"] == head:
      out["configs"] = {**{k: v for k, v in before["configs"].items() if k not in out["configs"]}, **out["configs"]}
      out["setup"]["launches"] = {k: len(v["launches"]) for k, v in out["configs"].items()}
  with open(path, "w") as fh:
    json.dump(out, fh, indent=1)
  with open(os.path.join(args.out_dir, "overhead.md"), "w") as fh:
    fh.write(report.markdown(out))
  report.figure(out, os.path.join(args.out_dir, "overhead.png"))
  print(report.markdown(out))
  return 0


if __name__ == "__main__":
  sys.exit(main())
