"""checks.py reducescatter STEPS [raw], under horovodrun --gloo: hier stays exact while Horovod's
Gloo reduce-scatter misbehaves.

Each step reduces 8 tensors of odd sizes (whole numbers, so sums are exact) at
once while two busy loops load the cores, which is when Horovod 0.28.1 fuses
pending reduce-scatters and its Gloo path can return wrong values
(comm/hierarchical.py, serial_reducescatter).
  default: through our hier exchange (1 node, one bucket per tensor): every
           step must equal the mean exactly.
  raw:     the same tensors as 8 concurrent hvd.reducescatter calls, which
           is the upstream bug; prints how many steps came back wrong.
"""
import subprocess
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from comm.exchange import make_gradient_exchange
from flags.config import CommConfig

SIZES = [1179648, 512, 512, 1048576, 1000, 4096002, 30000, 2469134]
# A busy loop that ends by itself once the rank that started it is gone: a rank SIGKILLed by a
# timeout never reaches the `finally` that kills the loops, and orphans spinning on 2 cores would
# slow every later test. The parent is looked at every million iterations (some 30 ms).
BUSY = """
import os
parent = os.getppid()
while os.getppid() == parent:
  for _ in range(1000000):
    pass
"""


def run(world, args):
  """Raises AssertionError when a hier step is not exactly the mean; args: STEPS [raw]."""
  steps, raw = int(args[0]), args[1:] == ["raw"]
  rank, size = world.rank, world.size
  base = [((np.arange(n) * 7919 + i) % 17 - 8).astype(np.float32) for i, n in enumerate(SIZES)]
  mine = [tf.constant(b + rank) for b in base]
  if raw:
    run_step = tf.function(lambda xs: [hvd.reducescatter(x, op=hvd.Sum, name=f"rs{i}") for i, x in enumerate(xs)])
    want = [(size * b + size * (size - 1) / 2)[rank * (b.size // size):(rank + 1) * (b.size // size)] for b in base]
  else:
    # Below the smallest tensor: one bucket per tensor, all in flight at once.
    run_step = tf.function(make_gradient_exchange(hvd, CommConfig("hier", fusion_threshold_mb=0.001), world))
    want = [b + np.float32((size - 1) / 2) for b in base]
  busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)] if rank == 0 else []
  try:
    wrong = 0
    for step in range(steps):
      got = run_step(mine)
      bad = [i for i, (g, w) in enumerate(zip(got, want)) if not np.array_equal(g.numpy(), w)]
      if bad:
        wrong += 1
        print(f"rank {rank} step {step}: tensors {bad} wrong", flush=True)
  finally:
    for p in busy:
      p.kill()
      p.wait()
  if raw:
    print(f"rank {rank}: {wrong} of {steps} steps wrong", flush=True)
  else:
    assert wrong == 0, f"rank {rank}: {wrong} of {steps} steps wrong"
