"""python -m bench.overhead [--only=NAME,...] [--launches=3] [--quick] [--reuse] [--out_dir=results]

Each configuration's launches in turn (train.py from scratch under horovodrun, on this host or on
emulated hosts), their time blocks (summary.json's `time`, training/ledger.py) and evaluation clocks
read into results/overhead.{json,md,png}: the productive share, the share after start-up, the epoch
ends' cost against the steps' time and the largest gap between evaluations against the run's median
gap, each the median of the launches with its range. The emulated hosts' configurations (fashion-*)
run one rank a host on a cluster of this program's own (scripts/cluster/cluster.sh, imcov on
198.18.43.0/24), brought up for each and down after it, also on failure.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as a file: the repository on the path
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.overhead import ledgers, report  # noqa: E402
from bench.harness.hosts import Hosts  # noqa: E402
from bench.harness.launches import Job  # noqa: E402
from bench.harness.train_runs import REPO, cpu_model, launch, read_events, record, reused  # noqa: E402

FASHION = ["--dataset=fashion_mnist", "--model=resnet8", "--epochs=4", "--export=false"]
FASHION_QUICK = ["--dataset=fashion_mnist", "--model=resnet8", "--epochs=1", "--max_steps=200", "--export=false"]
# name: (what it is, ranks, train.py's flags, --quick's flags instead, emulated hosts (count, link rate) or None)
CONFIGS = {
    "train": ("make train: ResNet-20 on digits, 12 epochs", 2, [], ["--epochs=3"], None),
    "fashion": ("Fashion-MNIST, ResNet-8, 4 epochs", 2, FASHION, FASHION_QUICK, None),
    "resnet50": ("ResNet-50 at 224x224, synthetic batches of 8 a rank, 30 steps", 2,
                 ["--model=resnet50", "--dataset=synthetic", "--batch_size=8", "--max_steps=30", "--export=false"],
                 ["--model=resnet50", "--dataset=synthetic", "--batch_size=8", "--max_steps=4", "--export=false"],
                 None),
    **{f"fashion-{n}hosts{'' if rate == 'none' else '-' + rate}":
       (f"the same on {n} emulated hosts x 1 rank, links {'unshaped' if rate == 'none' else 'at ' + rate}", n,
        FASHION, FASHION_QUICK, (n, rate))
       for rate in ("none", "20mbit") for n in (2, 4)},
}
CLUSTER, SUBNET = "imcov", "198.18.43"  # a cluster of this program's own (others: 198.18.7-41)
TIMEOUT_S = 3600  # a launch's bound: 4 epochs on 2 hosts at 20 Mbit/s took 13.5 minutes, 4 hosts take longer


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


def launch_on(hosts: Hosts, flags: list[str], model_dir: str, timeout: float) -> tuple[dict, float]:
  """train.py from scratch on the emulated hosts, one rank each (Job: every process it had is ended
  after, by pid): (its summary.json, the launch's wall seconds). Its output is kept in model_dir."""
  shutil.rmtree(model_dir, ignore_errors=True)  # never resume an older run
  os.makedirs(model_dir)
  start = time.time()
  with Job(model_dir, *flags, launcher=hosts.static_launcher(), extra_env=hosts.env) as job:
    _, left = job.wait_gone(timeout)
    job.save_logs(model_dir)
    if left or job.proc.returncode != 0:
      raise RuntimeError(f"{' '.join(job.cmd)} exited {job.proc.returncode} ({len(left)} processes left "
                         f"after {timeout:.0f} s):\n{job.tail()}")
  with open(os.path.join(model_dir, "summary.json")) as fh:
    return json.load(fh), round(time.time() - start, 1)


def run_config(name: str, args, head: str) -> list[dict]:
  """The configuration's launches' figures (ledgers.figures), each launch recorded beside its model_dir;
  an emulated cluster is brought up first and down after, also on failure."""
  _, ranks, flags, quick, on = CONFIGS[name]
  flags = quick if args.quick else flags
  hosts = Hosts(CLUSTER, SUBNET, on[0], os.path.join(args.runs_dir, "hosts.txt"), rate=on[1]) if on else None
  up = False
  try:
    launches = []
    for i in range(args.launches):
      model_dir = os.path.join(args.runs_dir, f"{name}-{i}")
      key = {"flags": flags, "ranks": ranks, "launch": i, "commit": head}  # --reuse: this commit's launches only
      run = reused(model_dir, key) if args.reuse else None
      if run is None:
        if hosts and not up:
          why = hosts.up()
          if why:
            raise RuntimeError(f"{name}: the emulated hosts did not come up ({why}); make setup installs what "
                               "scripts/cluster/cluster.sh needs, and it runs as root")
          up = True
        if hosts:
          summary, seconds = launch_on(hosts, flags, model_dir, TIMEOUT_S)
        else:
          summary, _, seconds = launch(ranks, [*flags, f"--model_dir={model_dir}"], model_dir, timeout=TIMEOUT_S)
        evals = [wall for wall, _, tag, _ in read_events(model_dir) if tag == "eval/top1"]
        run = {**key, "summary": summary, "launch_seconds": seconds, "eval_walls": evals}
        record(model_dir, run)
      figures = ledgers.figures(run["summary"], run.get("eval_walls", ()))
      launches.append(figures)
      gap = f", largest gap between evaluations {figures['eval_gap_ratio']:.2f}x the median" \
          if figures["eval_gap_ratio"] else ""
      print(f"{name} launch {i}: {figures['wall_seconds']:.1f} s wall, productive share "
            f"{figures['productive_share']:.2f} ({figures['productive_share_after_startup']:.2f} after start-up), "
            f"epoch ends {figures['epoch_end_share_of_steps']:.1%} of step time{gap}", flush=True)
    return launches
  finally:
    if up:
      hosts.down()


def commit() -> str:
  git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
  return git.stdout.strip()


def main(argv=None) -> int:
  args = parse_args(argv)
  head = commit()
  out = {"setup": {"commit": head, "cpu": cpu_model(), "cores": os.cpu_count(), "launches": args.launches,
                   "quick": args.quick, "date": time.strftime("%Y-%m-%d")}, "configs": {}}
  for name in args.only:
    what, ranks, flags, quick, on = CONFIGS[name]
    launches = run_config(name, args, head)
    medians = ledgers.median_of(launches)
    out["configs"][name] = {"what": what, "ranks": ranks, "flags": quick if args.quick else flags,
                            "hosts": list(on) if on else None, "launches": launches, "median": medians,
                            "verdicts": {k: list(v) for k, v in ledgers.verdicts(name, medians, bool(on)).items()}}
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
    fh.write(report.markdown(out, tuple(CONFIGS)))
  report.figure(out, os.path.join(args.out_dir, "overhead.png"))
  print(report.markdown(out, tuple(CONFIGS)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
