"""checks.py exchange [ALGORITHM]: the gradient exchange (default horovod) equals the numpy mean
of all ranks' inputs, broadcast_state leaves every rank with rank 0's weights, the train step's
noise-scale norms are the mean of the ranks' own squared gradient norms and the squared norm of
their mean (computed here from every rank's gradient, gathered), the step under
--compression=powersgd keeps the replicas identical across its start step, and
--compression=auto makes the same choice on every rank from encode times each rank measured."""
import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from comm import sync
from comm.exchange import make_compression, make_gradient_exchange, make_powersgd
from flags.config import CommConfig
from models import build_model
from optimizers import precision
from training import step as step_lib

SHAPES = [(), (1,), (7,), (3, 5), (3, 3, 16, 32), (1001,), (0,), (64, 10)]


def rank_inputs(rank):
  rng = np.random.default_rng(100 + rank)
  return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def run(world, args):
  """Raises AssertionError when a property does not hold; args: [ALGORITHM]."""
  rank, size = world.rank, world.size
  config = CommConfig(allreduce=args[0] if args else "horovod", fusion_threshold_mb=0.001)
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
  check_noise_norms(rank, size, exchange)
  check_powersgd(world, config)
  check_sketched_norm(world)
  check_auto(world)


def check_noise_norms(rank, size, exchange):
  """The step's sq_small and sq_big against numpy on the ranks' gathered gradients."""
  tf.keras.utils.set_random_seed(0)  # the same weights on every rank
  model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(5)])
  optimizer = tf.keras.optimizers.SGD(0.0)
  optimizer.build(model.trainable_variables)
  rng = np.random.default_rng(7 + rank)  # each rank its own batch of 8
  images = tf.constant(rng.standard_normal((8, 6)).astype(np.float32))
  labels = tf.constant(rng.integers(0, 5, 8).astype(np.int32))
  with tf.GradientTape() as tape:
    loss = tf.keras.losses.CategoricalCrossentropy(from_logits=True)(tf.one_hot(labels, 5), model(images))
  own = np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, model.trainable_variables)])
  every = hvd.allgather(tf.constant(own[None])).numpy()
  train_step = step_lib.make_train_step(model, optimizer, exchange, precision.for_precision("fp32"), 5,
                                        options=step_lib.StepOptions(noise=step_lib.RANKS,
                                        average=lambda x: hvd.allreduce(x, op=hvd.Average, name="noise_sq")))
  out = train_step(images, labels, tf.constant(0.0))
  np.testing.assert_allclose(float(out.sq_small), np.mean(np.sum(every ** 2, axis=1)), rtol=1e-5)
  np.testing.assert_allclose(float(out.sq_big), np.sum(np.mean(every, axis=0) ** 2), rtol=1e-5)
  assert float(out.sq_small) > float(out.sq_big) > 0  # different batches: a smaller mean


def check_powersgd(world, config):
  """Each rank its own batches, PowerSGD at rank 1 from the second step (a tf.cond on a step
  variable, as train.py's): after each step the weights and Qs are identical on every rank, the
  residuals are each rank's own until average_residuals makes them one. Through the check's
  algorithm if horovod or flat (hier's process sets are registered once, above), else flat."""
  rank, size = world.rank, world.size
  allreduce = config.allreduce if config.allreduce in ("horovod", "flat") else "flat"
  config = CommConfig(allreduce, config.fusion_threshold_mb, compression="powersgd", powersgd_rank=1,
                      compression_start=1)
  tf.keras.utils.set_random_seed(0)  # the same weights on every rank
  model = tf.keras.Sequential([tf.keras.Input((12,)), tf.keras.layers.Dense(10)])
  optimizer = tf.keras.optimizers.SGD(0.0)
  optimizer.build(model.trainable_variables)
  compressor = make_powersgd(config, model.trainable_variables, seed=3)
  assert compressor.views == ((12, 10), None), compressor.views
  steps = tf.Variable(0, dtype=tf.int64)
  train_step = step_lib.make_train_step(model, optimizer, make_gradient_exchange(hvd, config, world),
                                        precision.for_precision("fp32"), 10,
                                        options=step_lib.StepOptions(powersgd=compressor,
                                        compressing=lambda: steps >= config.compression_start))
  rng = np.random.default_rng(11 + rank)
  start = compressor.qs[0].numpy().copy()
  for step in range(3):
    images = tf.constant(rng.standard_normal((8, 12)).astype(np.float32))
    labels = tf.constant(rng.integers(0, 10, 8).astype(np.int32))
    assert bool(train_step(images, labels, tf.constant(0.5)).finite)
    steps.assign_add(1)
    assert sync.replicas_identical(hvd, model.trainable_variables + compressor.qs), step
    assert np.array_equal(compressor.qs[0].numpy(), start) == (step == 0), step  # kept from the start step on
  mine = compressor.residuals[0].numpy()
  assert np.abs(mine).max() > 1e-3
  assert size == 1 or not sync.replicas_identical(hvd, compressor.residuals)
  compressor.average_residuals(lambda tensors: hvd.grouped_allreduce(tensors, op=hvd.Average, name="psgd_avg"))
  assert sync.replicas_identical(hvd, compressor.residuals)
  mean = hvd.allreduce(tf.constant(mine), op=hvd.Average, name="psgd_mean").numpy()
  np.testing.assert_allclose(compressor.residuals[0].numpy(), mean, rtol=1e-6, atol=1e-7)


def check_sketched_norm(world):
  """AdaScale under PowerSGD: a compressed step's noise-scale norm of the mean gradient comes from a
  count sketch of each rank's own gradient, averaged over the ranks (comm/sketch.py); on the same
  gradients it is the exact one's within the sketch's error (130 coordinates in 4,096 buckets: few
  collide), and every rank reads the same value (AdaScale's LR is computed from it on each)."""
  tf.keras.utils.set_random_seed(0)
  model = tf.keras.Sequential([tf.keras.Input((12,)), tf.keras.layers.Dense(10)])
  optimizer = tf.keras.optimizers.SGD(0.0)
  optimizer.build(model.trainable_variables)
  config = CommConfig("flat", compression="powersgd", powersgd_rank=1, compression_start=0)
  compressor = make_powersgd(config, model.trainable_variables, seed=3)
  rng = np.random.default_rng(21 + world.rank)
  images = tf.constant(rng.standard_normal((8, 12)).astype(np.float32))
  labels = tf.constant(rng.integers(0, 10, 8).astype(np.int32))
  with tf.GradientTape() as tape:
    loss = tf.keras.losses.CategoricalCrossentropy(from_logits=True)(tf.one_hot(labels, 10), model(images))
  own = np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, model.trainable_variables)])
  exact = float(np.sum(np.mean(hvd.allgather(tf.constant(own[None])).numpy(), axis=0) ** 2))
  train_step = step_lib.make_train_step(model, optimizer, make_gradient_exchange(hvd, config, world),
                                        precision.for_precision("fp32"), 10,
                                        options=step_lib.StepOptions(noise=step_lib.RANKS,
                                        average=lambda x: hvd.allreduce(x, op=hvd.Average, name="noise_sketch"),
                                        identical_norms=True, powersgd=compressor,
                                        compressing=lambda: tf.constant(True), step=lambda: tf.constant(0, tf.int64),
                                        seed=5))
  sketched = float(train_step(images, labels, tf.constant(0.0)).sq_big)
  assert abs(sketched / exact - 1) < 0.05, (sketched, exact)
  assert len(set(hvd.allgather_object(sketched, name="sketched_norms"))) == 1


def check_auto(world):
  """--compression=auto on a link slow enough (10 MB/s) that the 2 MB matrix is worth compressing:
  every rank timed its own encoding, yet every rank holds the same choice (mask, bytes, predicted
  ms and encode ms, gathered), so all enter the same collectives."""
  config = CommConfig("flat", compression="auto", powersgd_rank=2, hybrid_cost="300,0.01,300,0.01")
  variables = [tf.Variable(tf.zeros(s)) for s in [(3, 3, 16, 32), (32,), (1024, 512), (512,)]]
  compression = make_compression(hvd, config, world, variables, seed=0)
  assert compression.powersgd is not None, compression.summary
  mine = (compression.powersgd.views, compression.summary)
  every = hvd.allgather_object(mine, name="auto_choice")
  assert all(other == mine for other in every), every
