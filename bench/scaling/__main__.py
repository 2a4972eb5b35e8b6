"""`python -m bench.scaling`: the command line of the driver, the worker and the report (see __init__)."""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench.scaling  # noqa: E402
from bench.scaling.settings import IFACE, RESULTS, Settings  # noqa: E402
from flags.config import ConfigError  # noqa: E402


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=bench.scaling.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rate", default="1gbit", help="link rate between emulated hosts (tc tbf), each way")
  # A multiple of the 4 algorithms, so each takes every place in the rotating order equally
  # often (at 2 the 1x4 32 MB hybrid, the same plan as flat, came out 1.28 x flat); 12
  # since the launches yield (mpi_yield_when_idle): a whole run took 3.5 minutes at 7,
  # and the 3-4 ms rows moved by a millisecond, 30%, between runs.
  parser.add_argument("--repeats", type=int, default=12,
                      help="timed repeats per algorithm and size, and per calibration size (median)")
  parser.add_argument("--train_steps", type=int, default=3, help="timed training steps per variant (median)")
  parser.add_argument("--full", action="store_true",
                      help="also 64 MB buffers, AlexNet's gradients, 4 hosts x 1 and every algorithm in training")
  parser.add_argument("--quick", action="store_true",
                      help="smoke run proving the program end to end, numbers meaningless: 1 MB buffers only, "
                      "calibration at 1 and 4 MB, one plan repeat, ResNet-20 only (with --only=2x2 --repeats=1 "
                      "--train_steps=1 a few minutes)")
  parser.add_argument("--only", default="", help="launches to run, e.g. 2x2,1x4 (default: all); "
                      "the others are kept from OUT_DIR/bench_scaling.json")
  parser.add_argument("--out_dir", default=RESULTS,
                      help="where bench_scaling.json, scaling.md and the plots go (default: results/)")
  parser.add_argument("--report", action="store_true",
                      help="rewrite the report (and the simulation) from OUT_DIR/bench_scaling.json; no launches")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--launch", default="", help=argparse.SUPPRESS)
  parser.add_argument("--out", default="", help=argparse.SUPPRESS)
  parser.add_argument("--iface", default=IFACE, help=argparse.SUPPRESS)
  parser.add_argument("--comm", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--training", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--hybrid_cost", default="", help=argparse.SUPPRESS)
  return parser.parse_args(argv)


def rewrite_report(settings) -> None:
  """The simulation recomputed and the report rewritten from settings.out_dir's JSON."""
  from bench.scaling import plots, report, simulate
  with open(settings.json_path) as fh:
    result = json.load(fh)
  result["simulation"] = simulate.simulation()
  with open(settings.json_path, "w") as fh:
    json.dump(result, fh, indent=1)
  report.write(result, settings.out_dir)
  plots.write(result, settings.out_dir)


def main(argv=None) -> None:
  args = parse_args(argv)
  try:
    settings = Settings.from_args(args)
  except ConfigError as e:  # before the cluster comes up
    sys.exit(f"bench-scaling: {e}")
  if args.worker:
    from bench.scaling import worker  # TensorFlow and Horovod: in the ranks only
    worker.run(args, settings)
  elif args.report:
    rewrite_report(settings)
  else:
    from bench.scaling import driver
    driver.run(settings)


if __name__ == "__main__":
  sys.exit(main())
