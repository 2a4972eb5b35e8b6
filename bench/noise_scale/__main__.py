"""python -m bench.noise_scale [--reuse] [--cost] [--quick] [--only=64,4096] [--out_dir=results]."""
import argparse
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: the repository on the path
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.noise_scale import cost, report, study  # noqa: E402
from bench.harness.train_runs import REPO  # noqa: E402


def pairs(p, flag: str, text: str, kind) -> dict:
  """'2048:1,4096:2' as {2048: 1, 4096: 2}; the parser's error naming the flag otherwise."""
  try:
    out = {int(b): kind(v) for b, v in (item.split(":") for item in filter(None, text.split(",")))}
  except ValueError:
    p.error(f"{flag}={text}: pass BATCH:VALUE pairs separated by commas, e.g. {flag}=4096:2")
  if any(v <= 0 for v in out.values()):
    p.error(f"{flag}={text}: values must be positive")
  return out


def parse_args(argv=None):
  p = argparse.ArgumentParser(prog="python -m bench.noise_scale", description=__doc__)
  p.add_argument("--reuse", action="store_true", help="read back runs whose flags match instead of training again")
  p.add_argument("--cost", action="store_true", help="measure --noise_scale's cost per step instead of the study")
  p.add_argument("--quick", action="store_true", help="a smoke run: batches 64 and 128, target 0.3, half an epoch")
  p.add_argument("--only", default="", help="global batches to run, e.g. 64,4096 (default: 64 to 4,096)")
  p.add_argument("--tries", default="", help="runs the LR search may take at some batches, e.g. 2048:1,4096:2 "
                 f"(default {study.MAX_TRIES} at each): a time budget, stated in the report")
  p.add_argument("--lr", default="", help="the first peak LR at some batches, e.g. 4096:1.34, instead of the "
                 "previous batch's best carried along the curve; stated in the report")
  p.add_argument("--target", type=float, default=None, help=f"held-out top-1 target (default {study.TARGET})")
  p.add_argument("--out_dir", default=os.path.join(REPO, "results"))
  p.add_argument("--runs_dir", default=os.path.join(REPO, "runs", "noise_scale"))
  args = p.parse_args(argv)
  args.tries = pairs(p, "--tries", args.tries, int)
  args.lr = pairs(p, "--lr", args.lr, float)
  budget = study.Budget(**study.QUICK) if args.quick else study.Budget()
  if args.target:
    budget = study.Budget(target=args.target, max_epochs=budget.max_epochs, accumulations=budget.accumulations)
  if args.only:
    wanted = {int(b) for b in args.only.split(",")}
    known = {study.global_batch(k): k for k in study.ACCUMULATIONS}
    unknown = wanted - set(known)
    if unknown:
      p.error(f"--only={args.only}: {sorted(unknown)} not among the study's batches {sorted(known)}")
    budget = study.Budget(target=budget.target, max_epochs=budget.max_epochs,
                          accumulations=tuple(known[b] for b in sorted(wanted)))
  return args, budget


def main(argv=None) -> None:
  args, budget = parse_args(argv)
  os.makedirs(args.runs_dir, exist_ok=True)
  if args.cost:
    print("noise scale: cost per step, alternating runs with and without it", flush=True)
    result = cost.measure(args.runs_dir)
    cost.write(result, args.out_dir)
    print(result["text"])
    return
  start = time.time()
  by_batch, previous = {}, None
  for k in budget.accumulations:
    batch = study.global_batch(k)
    lr0 = args.lr.get(batch) or study.start_lr(batch, previous)
    print(f"batch {batch:,} ({study.RANKS} ranks x {study.BN_BATCH} x {k} accumulation): LR search from "
          f"{lr0:.3g}", flush=True)
    by_batch[batch] = study.search(batch, lambda lr, cap: study.run(batch, lr, budget, args.runs_dir, args.reuse, cap),
                                   lr0, args.tries.get(batch, study.MAX_TRIES))
    best = study.best_of(by_batch[batch])
    previous = (batch, best["peak_lr"]) if best else previous
  text = report.write(by_batch, budget, args.out_dir, time.time() - start, cost.read(args.out_dir),
                      args.tries, args.lr)
  print(text)


if __name__ == "__main__":
  main()
