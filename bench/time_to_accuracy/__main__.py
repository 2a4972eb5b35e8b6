"""`python -m bench.time_to_accuracy` (`make time-to-accuracy`): the command line; what it measures and
writes: bench/time_to_accuracy/__init__.py."""
import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # this program reads the events and builds ResNet-50

import bench.time_to_accuracy  # noqa: E402
from bench.harness.train_runs import prepare_fashion_mnist  # noqa: E402
from bench.time_to_accuracy.recipe import (  # noqa: E402
    MAX_EPOCHS, QUICK_IMAGES, QUICK_TARGET, SEEDS, SETTINGS, TARGET_TOP1, Budget)
from bench.time_to_accuracy.report import write  # noqa: E402
from bench.time_to_accuracy.runs import run  # noqa: E402
from bench.time_to_accuracy.scale import exchange_per_update  # noqa: E402

RESULTS = os.path.join(REPO, "results")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python -m bench.time_to_accuracy", description=bench.time_to_accuracy.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--only", default=",".join(SETTINGS),
                      help=f"configurations to run, e.g. a,b (default: all of {','.join(SETTINGS)})")
  parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="seeds, e.g. 0,1")
  parser.add_argument("--target", type=float, default=None,
                      help=f"held-out top-1 that ends a run (default {TARGET_TOP1:g}; --quick: {QUICK_TARGET:g})")
  parser.add_argument("--max_epochs", type=float, default=MAX_EPOCHS,
                      help="epochs after which a run that has not reached the target ends; the LR schedule's span")
  parser.add_argument("--reuse", action="store_true",
                      help="read back finished runs with the same train.py flags instead of running them again")
  parser.add_argument("--out_dir", default=RESULTS, help="where time_to_accuracy.{json,md,png} go (default: results/)")
  parser.add_argument("--quick", action="store_true",
                      help=f"smoke run of the program, numbers meaningless: ~{QUICK_IMAGES:,} images a run "
                      f"(at least 2 steps), two evaluations, target {QUICK_TARGET:g}")
  args = parser.parse_args(argv)
  keys = [k for k in args.only.split(",") if k]
  unknown = [k for k in keys if k not in SETTINGS]
  if unknown or not keys:
    parser.error(f"--only={args.only}: name configurations among {','.join(SETTINGS)}, e.g. --only=a,c")
  try:
    seeds = [int(x) for x in args.seeds.split(",") if x]
  except ValueError:
    seeds = []
  if not seeds:
    parser.error(f"--seeds={args.seeds}: pass integers separated by commas, e.g. --seeds=0,1")
  target = args.target if args.target is not None else (QUICK_TARGET if args.quick else TARGET_TOP1)
  if not 0 < target <= 1:
    parser.error(f"--target={target} lies outside (0, 1]; pass a fraction, e.g. --target=0.9")
  if args.max_epochs <= 0:
    parser.error(f"--max_epochs={args.max_epochs} must be positive, e.g. --max_epochs={MAX_EPOCHS:g}")
  return args, keys, seeds, Budget(target=target, max_epochs=args.max_epochs, quick=args.quick)


def slow_precisions(keys, flags=None) -> dict:
  """{key: why} for the configurations of keys whose precision is not faster than fp32 on this CPU
  (optimizers/precision.cpu_lacks: no AMX): they run their first seed only. On an AVX2-only CPU (bf16
  converted element by element) (d) trains at ~1/7 of (c)'s images/s, ~65 minutes a seed."""
  from optimizers import precision
  flags = precision.cpu_flags() if flags is None else flags
  lacks = {k: precision.cpu_lacks(SETTINGS[k].precision, flags) for k in keys}
  return {k: why for k, why in lacks.items() if why}


def main(argv=None) -> None:
  args, keys, seeds, budget = parse_args(argv)
  # Quick runs in a directory of their own: a smoke run never replaces a measured run's model_dir.
  runs_dir = os.path.join(REPO, "runs", "time_to_accuracy" + ("-quick" if budget.quick else ""))
  prepare_fashion_mnist("time-to-accuracy")
  exchange, params = exchange_per_update()
  scale = {"params": params, "exchange": exchange}
  slow = slow_precisions(keys)
  for key, why in slow.items():
    print(f"  {SETTINGS[key].name}: seed {seeds[0]} only: {why}", flush=True)
  runs = []
  for seed in seeds:  # every configuration once before any twice: a stopped benchmark still compares
    for key in keys:
      if key in slow and seed != seeds[0]:
        continue
      runs.append(run(key, seed, budget, runs_dir, args.reuse))
      text = write(runs, budget, scale, args.out_dir, slow)  # after every run: an interrupted benchmark keeps its runs
  print(text)


if __name__ == "__main__":
  main()
