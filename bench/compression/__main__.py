"""`python -m bench.compression`: the command line of both parts, the worker and the report (see __init__)."""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench.compression  # noqa: E402
from bench.compression import report, variants as V  # noqa: E402
from flags.config import ConfigError  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = ("speed", "accuracy", "trust")
STEPS = 5  # timed steps per variant (medians): a step of ResNet-50 is 1-3 s on the slowest link


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python -m bench.compression", description=bench.compression.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--only", default=",".join(PARTS),
                      help="parts to run, among speed, accuracy and trust (LARS's trust ratios at the accuracy "
                      "part's rank-4 checkpoints: runs after it, or alone on runs it left)")
  parser.add_argument("--reuse", action="store_true",
                      help="keep launches and runs of the same settings already in OUT_DIR/compression.json "
                      "or beside their model_dir instead of measuring them again")
  parser.add_argument("--rates", default=",".join(V.RATES), help="speed: link rates (tc), e.g. 500mbit,2gbit")
  parser.add_argument("--hosts", default=",".join(map(str, V.HOSTS)), help="speed: emulated hosts, e.g. 2,4")
  parser.add_argument("--variants", default=",".join(V.SPEED_VARIANTS),
                      help=f"speed: compressions to time, among {','.join(V.SPEED_VARIANTS)}")
  parser.add_argument("--steps", type=int, default=STEPS, help="speed: timed steps per variant (medians)")
  parser.add_argument("--configs", default=",".join(V.ACCURACY_CONFIGS),
                      help=f"accuracy: configurations among {','.join(V.ACCURACY_CONFIGS)}")
  parser.add_argument("--seeds", default="0,1", help="accuracy: seeds, e.g. 0,1")
  parser.add_argument("--quick", action="store_true",
                      help="accuracy: smoke run, numbers meaningless (a few steps, PowerSGD from step 2)")
  parser.add_argument("--out_dir", default=report.RESULTS,
                      help="where compression.{json,md,png} go (default: results/)")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--launch", default="", help=argparse.SUPPRESS)
  parser.add_argument("--out", default="", help=argparse.SUPPRESS)
  parser.add_argument("--iface", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    return args
  try:
    args.parts = V.parse_list(args.only, PARTS, "only")
    args.rates_list = V.parse_list(args.rates, args.rates.split(","), "rates")
    for rate in args.rates_list:
      V.rate_gbps(rate)
    args.hosts_list = [int(h) for h in args.hosts.split(",") if h]
    if not args.hosts_list or not all(2 <= h <= 16 for h in args.hosts_list):
      raise ConfigError(f"--hosts={args.hosts}: give emulated hosts from 2 to 16 (cluster.sh's limit), "
                        "e.g. --hosts=2,4.")
    args.variants_list = V.parse_list(args.variants, V.SPEED_VARIANTS, "variants")
    args.configs_list = V.parse_list(args.configs, V.ACCURACY_CONFIGS, "configs")
    args.seeds_list = [int(s) for s in V.parse_list(args.seeds, args.seeds.split(","), "seeds")]
  except ConfigError as e:  # a ValueError too: first
    parser.error(str(e))
  except ValueError:
    parser.error(f"--hosts={args.hosts} --seeds={args.seeds}: pass integers separated by commas, e.g. --seeds=0,1")
  if args.steps < 1:
    parser.error(f"--steps={args.steps} must be at least 1, e.g. --steps={STEPS}")
  return args


def load(out_dir: str) -> dict:
  """OUT_DIR/compression.json so far ({} when there is none)."""
  path = os.path.join(out_dir, "compression.json")
  if not os.path.exists(path):
    return {}
  with open(path) as fh:
    return json.load(fh)


def speed_part(args, result: dict) -> None:
  from bench.compression import speed
  from bench.scaling.settings import TRAIN_BATCH
  if os.geteuid() != 0:
    sys.exit("bench-compression: the speed part needs root (network namespaces and tc); run it as root, "
             "or pass --only=accuracy.")
  setup = {"rates": args.rates_list, "hosts": args.hosts_list, "variants": args.variants_list,
           "steps": args.steps, "batch_per_rank": TRAIN_BATCH, "cores": os.cpu_count(),
           "smoke": args.steps < STEPS,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
  done = result.get("speed", {}).get("launches", {})

  def save(launches):
    result["speed"] = {"setup": setup, "launches": launches}
    report.write(result, args.out_dir)
  save(speed.run(args.rates_list, args.hosts_list, args.variants_list, args.steps, done, args.reuse, save))


def accuracy_runs_dir(args) -> str:
  """Where the accuracy part keeps its runs (the trust part reads their checkpoints)."""
  return os.path.join(REPO, "runs", "compression" + ("-quick" if args.quick else ""))


def accuracy_part(args, result: dict) -> None:
  from bench.compression import accuracy
  from bench.harness.train_runs import prepare_fashion_mnist
  prepare_fashion_mnist("bench-compression")  # Fashion-MNIST's records, before any run's clock
  runs_dir = accuracy_runs_dir(args)
  result["accuracy"] = {"setup": accuracy.setup(args.quick), "runs": []}
  for seed in args.seeds_list:  # every configuration once before any twice: a stopped run still compares
    for key in args.configs_list:
      result["accuracy"]["runs"].append(accuracy.run(key, seed, runs_dir, args.reuse, args.quick))
      report.write(result, args.out_dir)  # after every run: an interrupted benchmark keeps its runs


def trust_part(args, result: dict) -> None:
  from bench.compression import trust
  result["trust"] = trust.run(accuracy_runs_dir(args), trust.CONFIGS, args.seeds_list)
  report.write(result, args.out_dir)


def main(argv=None) -> None:
  args = parse_args(argv)
  if args.worker:
    from bench.compression import worker  # TensorFlow and Horovod: in the ranks only
    worker.run(args)
    return
  result = load(args.out_dir)
  if "speed" in args.parts:
    speed_part(args, result)
  if "accuracy" in args.parts:
    accuracy_part(args, result)
  if "trust" in args.parts:
    trust_part(args, result)
  print(report.write(result, args.out_dir))


if __name__ == "__main__":
  main()
