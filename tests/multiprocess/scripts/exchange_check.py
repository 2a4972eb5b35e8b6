"""Run under horovodrun: the gradient exchange equals the numpy mean of all ranks' inputs,
and broadcast_state leaves every rank with rank 0's weights. Prints 'OK rank N'."""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import comm  # noqa: E402
from comm import sync  # noqa: E402
from comm.exchange import make_gradient_exchange  # noqa: E402
from flags.config import CommConfig  # noqa: E402
from models import build_model  # noqa: E402

SHAPES = [(), (1,), (7,), (3, 5), (3, 3, 16, 32), (1001,), (0,), (64, 10)]


def rank_inputs(rank):
  rng = np.random.default_rng(100 + rank)
  return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def main():
  world = comm.init(hvd, int(os.environ.get("RANKS_PER_NODE", "0")))
  rank, size = world.rank, world.size

  config = CommConfig(allreduce=os.environ.get("ALLREDUCE", "horovod"), fusion_threshold_mb=0.001)
  exchange = tf.function(make_gradient_exchange(hvd, config, world))
  got = exchange([tf.constant(x) for x in rank_inputs(rank)])
  want = [np.mean([rank_inputs(r)[i] for r in range(size)], axis=0) for i in range(len(SHAPES))]
  for shape, g, w in zip(SHAPES, got, want):
    assert g.shape == shape, (g.shape, shape)
    np.testing.assert_allclose(g.numpy(), w, rtol=1e-6, atol=1e-6)

  # Different seeds per rank: weights differ until the broadcast.
  tf.keras.utils.set_random_seed(rank)
  model = build_model("resnet20", 10, (8, 8, 1))
  before = sync.replicas_identical(hvd, model.trainable_variables)
  sync.broadcast_state(hvd, model.variables)
  after = sync.replicas_identical(hvd, model.variables)
  assert not before and after, (before, after)
  gathered = hvd.allgather(tf.concat([tf.reshape(v, [-1]) for v in model.variables], 0)[None]).numpy()
  assert (gathered == gathered[0]).all()
  print(f"OK rank {rank}", flush=True)


if __name__ == "__main__":
  main()
