"""`python -m bench.allreduce` (`make bench-comm`): the driver, or with --worker one rank of a launch;
what it measures: bench/allreduce/__init__.py."""
import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench.allreduce  # noqa: E402
from bench.allreduce.driver import driver  # noqa: E402
from bench.allreduce.worker import worker  # noqa: E402


def main():
  parser = argparse.ArgumentParser(prog="python -m bench.allreduce", description=bench.allreduce.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--worker", action="store_true", help="run as one rank of a launch")
  parser.add_argument("--ranks_per_node", type=int, default=0)
  parser.add_argument("--gloo", action="store_true", help="(worker) this launch runs on Gloo: no mpi4py floor")
  parser.add_argument("--modes", default="sweep,gradients", help="(worker, or driver with --only) sweep,gradients,overlap")
  parser.add_argument("--only", default="", help="(driver) rerun one launch NP,RANKS_PER_NODE,GLOO "
                      "(e.g. 4,2,0) for --modes and replace those records in results/bench_comm.json")
  parser.add_argument("--budget_s", type=float, default=0, help="(driver, with --only) its time limit")
  parser.add_argument("--out", default="", help="(worker) the file rank 0 writes its records to")
  parser.add_argument("--out_dir", default=os.path.join(REPO, "results"),
                      help="(driver) where bench_comm.json and bench_comm.png go; with --only, the records "
                      "kept are read from there")
  args = parser.parse_args()
  worker(args) if args.worker else driver(args)


if __name__ == "__main__":
  main()
