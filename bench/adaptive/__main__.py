"""`python -m bench.adaptive` (`make adaptive`): the command line; what the study runs and reports:
bench/adaptive/__init__.py."""
import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: the repository on the path
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import bench.adaptive  # noqa: E402
from bench.adaptive import runs  # noqa: E402
from bench.adaptive.settings import (  # noqa: E402
    ALONE, B0, BASE_LR, BUDGET_EPOCHS, CHANGE, LOSE_AT, MICRO, PARTS, QUICK, RANKS, SCALES, TARGET)
from bench.harness.train_runs import REPO, cpu_model  # noqa: E402


def parse_args(argv=None):
  p = argparse.ArgumentParser(prog="python -m bench.adaptive", description=bench.adaptive.__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--only", default=",".join(PARTS), help=f"parts to run, of {', '.join(PARTS)}")
  p.add_argument("--seeds", default="0,1", help="seeds of every comparison, e.g. 0,1")
  p.add_argument("--reuse", action="store_true", help="read back runs whose flags match instead of training again")
  p.add_argument("--quick", action="store_true", help="a smoke run: 0.1 epochs, target 0.5, S = 8 only")
  p.add_argument("--scales", default=",".join(map(str, SCALES)), help="the budget part's S = global batch / B0, "
                 "e.g. 8 (a time budget: S = 32 under AdaScale trains ~10 epochs of data for one base-batch epoch)")
  p.add_argument("--out_dir", default=os.path.join(REPO, "results"))
  p.add_argument("--runs_dir", default=os.path.join(REPO, "runs", "adaptive"))
  args = p.parse_args(argv)
  args.only = [x for x in args.only.split(",") if x]
  unknown = set(args.only) - set(PARTS)
  if unknown:
    p.error(f"--only={','.join(args.only)}: {sorted(unknown)} not among the parts {', '.join(PARTS)}")
  try:
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
  except ValueError:
    p.error(f"--seeds={args.seeds}: pass integers separated by commas, e.g. --seeds=0,1")
  quick = QUICK if args.quick else {}
  args.budget_epochs = quick.get("budget_epochs", BUDGET_EPOCHS)
  args.target = quick.get("target", TARGET)
  try:
    args.scales = quick.get("scales") or tuple(int(x) for x in args.scales.split(",") if x)
  except ValueError:
    p.error(f"--scales={args.scales}: pass integers separated by commas, e.g. --scales=8,32")
  if any(x < 2 or x * B0 % (RANKS * MICRO) for x in args.scales):
    p.error(f"--scales={args.scales}: each S must be 2 or more (S = 1 is the base run)")
  return args


def main(argv=None) -> None:
  args = parse_args(argv)
  os.makedirs(args.runs_dir, exist_ok=True)
  os.makedirs(args.out_dir, exist_ok=True)
  start = time.time()
  out = {"setup": {"ranks": RANKS, "micro_batch": MICRO, "base_batch": B0, "base_lr_per_256": BASE_LR,
                   "budget_epochs": args.budget_epochs, "target": args.target, "seeds": args.seeds,
                   "change": CHANGE, "lose_at": LOSE_AT, "alone": ALONE,
                   "cpu": cpu_model()}, "parts": {}}
  path = os.path.join(args.out_dir, "adaptive.json")
  if os.path.exists(path):  # parts run before (another --only) stay in the report
    with open(path) as fh:
      out["parts"] = json.load(fh).get("parts", {})
  for part in args.only:
    print(f"adaptive: {part}", flush=True)
    rows = {"budget": runs.part_budget, "steps": runs.part_steps, "change": runs.part_change,
            "elastic": runs.part_elastic, "target": runs.part_target}[part](args, args.runs_dir)
    out["parts"][part] = {**out["parts"].get(part, {}), **rows}  # rows of another --scales stay
  out["wall_seconds"] = round(time.time() - start, 1)
  from bench.adaptive import report  # matplotlib only here
  report.write(out, args.out_dir)
  print(f"adaptive: wrote {args.out_dir}/adaptive.{{md,json,png}} in {out['wall_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
  main()
