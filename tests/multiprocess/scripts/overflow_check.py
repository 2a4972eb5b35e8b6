"""checks.py overflow, on 2 ranks or more: an fp16 step whose gradient overflows on rank 1 only is
skipped on every rank (weights and LARS slots unchanged, loss scale halved), and the next
clean step updates every rank identically; a stop request made on one rank is returned
by the step on every rank.

The step is train.py's own (training/step.py): scaled loss -> scaled grads -> exchange
-> unscale -> one finite verdict -> LARS update or skip."""
import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

from comm import sync
from comm.exchange import make_gradient_exchange
from flags.config import CommConfig
from models import build_model
from optimizers import precision
from optimizers.lars import LARS
from training.step import StepOptions, make_train_step


def run(world, args):
  """Raises AssertionError when a rank applies the overflowing step or the ranks differ; no args.

  The fp16 policy is Keras' global one, which every model built later in this
  process would take: the one before is restored however the check ends.
  """
  assert world.size >= 2 and not args, f"overflow takes no arguments and 2 ranks or more, not {world.size}"
  before = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy(precision.POLICIES["fp16"])
  try:
    _overflow_is_skipped_everywhere(world)
  finally:
    keras.mixed_precision.set_global_policy(before)


def _overflow_is_skipped_everywhere(world):
  rank = world.rank
  keras.utils.set_random_seed(0)
  model = build_model("resnet8", 10, (8, 8, 1))  # BatchNorm, residual blocks, LARS slots: the smallest such
  optimizer = LARS(learning_rate=1.0, momentum=0.9, weight_decay=1e-4, eta=0.01)
  optimizer.build(model.trainable_variables)
  sync.broadcast_state(hvd, model.variables + optimizer.variables)
  loss_scale = precision.DynamicLossScale(enabled=True, initial_scale=2.0 ** 10, growth_interval=2)
  exchange = make_gradient_exchange(hvd, CommConfig(), world)
  variables = model.trainable_variables
  train_step = make_train_step(model, optimizer, exchange, loss_scale, num_classes=10,
                               options=StepOptions(agree=sync.agree_max(hvd)))

  def step(images, labels, poison):
    # The forced overflow: inf images on one rank only make its gradients
    # non-finite, and so the exchanged mean on every rank.
    return train_step(images * poison, labels, tf.constant(1.0))[2]

  rng = np.random.default_rng(rank)
  images = tf.constant(rng.standard_normal((8, 8, 8, 1)), tf.float32)
  labels = tf.constant(rng.integers(0, 10, 8), tf.int32)
  weights = lambda: [v.numpy().copy() for v in variables + optimizer.variables]

  before = weights()
  finite = step(images, labels, tf.constant(np.inf if rank == 1 else 1.0, tf.float32))
  assert not bool(finite), "rank %d applied an overflowing step" % rank
  for a, b in zip(before, weights()):
    np.testing.assert_array_equal(a, b)  # weights, velocities and iterations untouched
  assert float(loss_scale.scale) == 2.0 ** 9 and int(loss_scale.good_steps) == 0

  finite = step(images, labels, tf.constant(1.0, tf.float32))
  assert bool(finite)
  assert int(optimizer.iterations) == 1 and int(loss_scale.good_steps) == 1
  moved = [not np.array_equal(a, b) for a, b in zip(before, weights())]
  assert sum(moved) > len(variables) // 2, "the clean step moved too few variables"
  assert sync.replicas_identical(hvd, variables), "ranks differ after the clean step"
  assert all(np.isfinite(v.numpy()).all() for v in variables)

  step(images, labels, tf.constant(1.0, tf.float32))  # second good step in a row: scale doubles
  assert float(loss_scale.scale) == 2.0 ** 10 and int(loss_scale.good_steps) == 0

  # A stop request on one rank comes back from the step on every rank.
  stop = train_step(images, labels, tf.constant(1.0), tf.constant(10 if rank == 1 else 0)).stop
  assert int(stop) == 10, int(stop)
