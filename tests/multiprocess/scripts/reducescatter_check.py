"""Run under horovodrun --gloo: hier stays exact while Horovod's Gloo reduce-scatter misbehaves.

Usage: reducescatter_check.py STEPS [raw]. Each step reduces 8 tensors of
odd sizes (whole numbers, so sums are exact) at once while two busy loops
load the cores, which is when Horovod 0.28.1 fuses pending reduce-scatters
and its Gloo path can return wrong values (comm/hierarchical.py,
serial_reducescatter).
  default: through our hier exchange (1 node, one bucket per tensor): every
           step must equal the mean exactly; prints 'OK rank N'.
  raw:     the same tensors as 8 concurrent hvd.reducescatter calls, which
           is the upstream bug; prints how many steps came back wrong.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import comm  # noqa: E402
from comm.exchange import make_gradient_exchange  # noqa: E402
from flags.config import CommConfig  # noqa: E402

SIZES = [1179648, 512, 512, 1048576, 1000, 4096002, 30000, 2469134]


def main():
  steps, raw = int(sys.argv[1]), sys.argv[2:] == ["raw"]
  world = comm.init(hvd, 0)
  rank, size = world.rank, world.size
  base = [((np.arange(n) * 7919 + i) % 17 - 8).astype(np.float32) for i, n in enumerate(SIZES)]
  mine = [tf.constant(b + rank) for b in base]
  if raw:
    run = tf.function(lambda xs: [hvd.reducescatter(x, op=hvd.Sum, name=f"rs{i}") for i, x in enumerate(xs)])
    want = [(size * b + size * (size - 1) / 2)[rank * (b.size // size):(rank + 1) * (b.size // size)] for b in base]
  else:
    # Below the smallest tensor: one bucket per tensor, all in flight at once.
    run = tf.function(make_gradient_exchange(hvd, CommConfig("hier", fusion_threshold_mb=0.001), world))
    want = [b + np.float32((size - 1) / 2) for b in base]
  busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)] if rank == 0 else []
  try:
    wrong = 0
    for step in range(steps):
      got = run(mine)
      bad = [i for i, (g, w) in enumerate(zip(got, want)) if not np.array_equal(g.numpy(), w)]
      if bad:
        wrong += 1
        print(f"rank {rank} step {step}: tensors {bad} wrong", flush=True)
  finally:
    for p in busy:
      p.kill()
  if raw:
    print(f"rank {rank}: {wrong} of {steps} steps wrong", flush=True)
  else:
    assert wrong == 0, f"rank {rank}: {wrong} of {steps} steps wrong"
    print(f"OK rank {rank}", flush=True)


if __name__ == "__main__":
  main()
