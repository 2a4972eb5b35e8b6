"""Run under horovodrun: the multi-process checks named on the command line, in order, in one
process per rank. Starting a rank costs 20-30 s of TensorFlow and Horovod start-up on 2 cores,
more than most checks take, so one launch serves several (tests/multiprocess/test_checks.py).

Usage: checks.py [--ranks_per_node=N] CHECK [ARG ...] [CHECK [ARG ...] ...]
  exchange [ALGORITHM]   the exchange is the mean, broadcast makes replicas identical, the step's
                         noise-scale norms, PowerSGD's step keeps replicas identical
                         (exchange_check.py; ALGORITHM default horovod)
  data                   ranks holding different data stop with one sentence naming them (2 ranks)
  evaluation             held-out top-1/top-5/loss are counts over every rank (2 ranks)
  overflow               an fp16 overflow on one rank is skipped on every rank (2 ranks or more)
  accumulation FLAGS     train.py's flags and --out=FILE.npz; also runs as one plain process
  reducescatter STEPS [raw]  hier exact on Gloo with the cores loaded (raw: Horovod's own bug)
  comm [MODELS]          every exchange algorithm is the mean and trains like horovod
--ranks_per_node lays the ranks out as nodes of N (comm.init), for every check. The tests' runs
(accumulation's flags abridged):
  horovodrun -np 4 python tests/multiprocess/scripts/checks.py --ranks_per_node=2 \\
      accumulation --data_dir=DIGITS --batch_size=8 --out=ranks.npz comm resnet20
  horovodrun -np 2 --gloo python tests/multiprocess/scripts/checks.py \\
      data exchange evaluation overflow reducescatter 30 comm resnet50,alexnet
  python tests/multiprocess/scripts/checks.py accumulation --data_dir=DIGITS --batch_size=8 \\
      --accumulation_steps=4 --out=one.npz

After each check every rank prints 'OK <check> rank N (S s)'. The first check to raise prints
'FAIL <check> rank N: <error>' and ends the launch with its traceback: the other ranks may be
waiting in that check's collectives, so going on to the next check would hang or mismatch them.
"""
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

import horovod.tensorflow as hvd  # noqa: E402

import comm  # noqa: E402
import accumulation_check  # noqa: E402  (this script's folder is on sys.path)
import comm_check  # noqa: E402
import data_check  # noqa: E402
import evaluation_check  # noqa: E402
import exchange_check  # noqa: E402
import overflow_check  # noqa: E402
import reducescatter_check  # noqa: E402

# name -> run(world, args): each raises (AssertionError mostly) when its property does not hold.
CHECKS = {
    "data": data_check.run,
    "exchange": exchange_check.run,
    "evaluation": evaluation_check.run,
    "overflow": overflow_check.run,
    "accumulation": accumulation_check.run,
    "reducescatter": reducescatter_check.run,
    "comm": comm_check.run,
}


def parse(argv: list[str]) -> tuple[int, list[tuple[str, list[str]]]]:
  """(ranks_per_node, [(check, its arguments)]): a word naming a check starts the next one."""
  argv = list(argv)
  ranks_per_node = 0
  if argv and argv[0].startswith("--ranks_per_node="):
    ranks_per_node = int(argv.pop(0).split("=", 1)[1])
  if not argv or argv[0] not in CHECKS:
    sys.exit(f"checks.py: name a check first, one of {', '.join(CHECKS)} (got {argv})")
  plan = []
  for word in argv:
    if word in CHECKS:
      plan.append((word, []))
    else:
      plan[-1][1].append(word)
  return ranks_per_node, plan


def main():
  # Parsed before Horovod starts: a mistyped command stops here, on every rank alike.
  ranks_per_node, plan = parse(sys.argv[1:])
  world = comm.init(hvd, ranks_per_node)
  for name, args in plan:
    start = time.time()
    try:
      CHECKS[name](world, args)
    except Exception as e:
      one_line = " | ".join(f"{type(e).__name__}: {e}".splitlines())
      print(f"FAIL {name} rank {world.rank}: {one_line[:2000]}", flush=True)
      raise
    print(f"OK {name} rank {world.rank} ({time.time() - start:.1f} s)", flush=True)


if __name__ == "__main__":
  main()
