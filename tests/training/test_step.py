"""training/step.py on one process: the update applies when finite, is skipped everywhere when
not (fp32 too), the stop code comes back, and the eval step counts top-1 and top-5 hits."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from optimizers import precision
from training import step as step_lib


def tiny():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)])
  optimizer = keras.optimizers.SGD(0.0)
  optimizer.build(model.trainable_variables)
  return model, optimizer


def weights(model):
  return [v.numpy().copy() for v in model.trainable_variables]


@pytest.mark.parametrize("precision_name", ["fp32", "fp16"])
def test_a_finite_step_applies_and_a_non_finite_one_is_skipped(precision_name):
  model, optimizer = tiny()
  train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision(precision_name),
                                        num_classes=8)
  images, labels = tf.ones([2, 4]), tf.constant([1, 2])
  before = weights(model)
  loss, correct, finite, stop, *_ = train_step(images, labels, tf.constant(0.1))
  assert bool(finite) and int(stop) == 0 and np.isfinite(float(loss)) and 0 <= float(correct) <= 2
  after = weights(model)
  assert any(not np.array_equal(a, b) for a, b in zip(before, after))
  _, _, finite, stop, *_ = train_step(images * np.nan, labels, tf.constant(0.1), tf.constant(10))
  assert not bool(finite) and int(stop) == 10
  for a, b in zip(after, weights(model)):
    np.testing.assert_array_equal(a, b)  # no NaN reached the weights


def test_agree_decides_for_every_rank():
  # agree is the max over ranks: here a stand-in for a peer whose loss was NaN.
  model, optimizer = tiny()
  peer_nan = lambda codes: tf.maximum(codes, tf.constant([0, 1]))
  train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"), num_classes=8,
                                        options=step_lib.StepOptions(agree=peer_nan))
  before = weights(model)
  finite = train_step(tf.ones([2, 4]), tf.constant([1, 2]), tf.constant(0.1)).finite
  assert not bool(finite)
  for a, b in zip(before, weights(model)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("labels, top1, top5", [([0, 7], 2, 2), ([3, 1], 0, 1), ([6, 6], 0, 1)])
def test_eval_step_counts_top1_and_top5_hits(labels, top1, top5):
  # Row 1 ranks class 0 first, then 1, 2, 3, 4 (its top-5), 5, 6, 7; row 2 the other way round.
  logits = tf.constant([[8., 7., 6., 5., 4., 3., 2., 1.], [1., 2., 3., 4., 5., 6., 7., 8.]])
  model = lambda images, training: logits
  loss_sum, hits1, hits5, count = step_lib.make_eval_step(model)(tf.zeros([2, 1]), tf.constant(labels)).numpy()
  assert (hits1, hits5, count) == (top1, top5, 2) and loss_sum > 0


def test_the_eval_step_is_traced_once_for_a_splits_short_last_batch():
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
  step = step_lib.make_eval_step(model)
  rng = np.random.default_rng(0)
  batches = [(tf.constant(rng.standard_normal((n, 3), np.float32)), tf.constant(rng.integers(0, 4, n, np.int32)))
             for n in (5, 5, 3)]
  got = [step(*b).numpy() for b in batches]
  assert step.fn.experimental_get_tracing_count() == 1
  for (images, labels), sums in zip(batches, got):  # what a step traced for that batch alone gives
    np.testing.assert_allclose(sums, step_lib.make_eval_step(model)(images, labels).numpy(), rtol=1e-6)
  assert [s[3] for s in got] == [5, 5, 3]


@pytest.mark.parametrize("k", [2, 4])
def test_k_micro_batches_make_the_update_of_one_batch_k_times_larger(k):
  # Without BatchNorm the mean loss over K * B images is the mean of the K micro-batches' means.
  rng = np.random.default_rng(1)
  images = tf.constant(rng.standard_normal((4 * k, 4), np.float32))
  labels = tf.constant(rng.integers(0, 8, 4 * k))
  results = {}
  for steps in (1, k):
    model, optimizer = tiny()
    train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"), num_classes=8,
                                          options=step_lib.StepOptions(accumulation_steps=steps))
    loss, correct, finite, *_ = train_step(images, tf.cast(labels, tf.int32), tf.constant(0.5))
    results[steps] = (float(loss), float(correct), bool(finite), weights(model))
  (loss1, correct1, finite1, w1), (lossk, correctk, finitek, wk) = results[1], results[k]
  assert finite1 and finitek and correct1 == correctk and loss1 == pytest.approx(lossk, rel=1e-6)
  assert any(not np.array_equal(a, b) for a, b in zip(w1, weights(tiny()[0])))  # the update moved them
  for a, b in zip(w1, wk):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_batchnorm_normalises_each_micro_batch():
  # Goyal et al.'s per-worker n: with K=2 the BatchNorm batch is half the step's images, so
  # two micro-batches of different means give another update than one batch of both.
  def run(steps):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization(), keras.layers.Dense(8)])
    optimizer = keras.optimizers.SGD(0.0)
    optimizer.build(model.trainable_variables)
    train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"), num_classes=8,
                                          options=step_lib.StepOptions(accumulation_steps=steps))
    images = tf.concat([tf.zeros([4, 4]), tf.reshape(tf.range(16, dtype=tf.float32), [4, 4]) + 10], 0)
    finite = train_step(images, tf.constant([0, 1, 2, 3, 4, 5, 6, 7]), tf.constant(0.5)).finite
    assert bool(finite)
    return weights(model)
  assert any(not np.allclose(a, b) for a, b in zip(run(1), run(2)))


def test_a_non_finite_micro_batch_skips_the_whole_update():
  model, optimizer = tiny()
  train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"), num_classes=8,
                                        options=step_lib.StepOptions(accumulation_steps=3))
  before = weights(model)
  images = tf.concat([tf.ones([4, 4]), tf.ones([2, 4]) * np.nan], 0)  # only the third micro-batch
  finite = train_step(images, tf.zeros([6], tf.int32), tf.constant(0.1)).finite
  assert not bool(finite)
  for a, b in zip(before, weights(model)):
    np.testing.assert_array_equal(a, b)


def per_batch_gradients(model, images, labels, parts):
  """Each of `parts` equal batches' gradient of its mean loss, flattened (numpy)."""
  loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)
  out = []
  for x, y in zip(np.split(images, parts), np.split(labels, parts)):
    with tf.GradientTape() as tape:
      loss = loss_fn(tf.one_hot(y, 8), model(tf.constant(x)))
    out.append(np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, model.trainable_variables)]))
  return np.stack(out)


@pytest.mark.parametrize("precision_name", ["fp32", "fp16"])
def test_micro_batches_give_the_noise_scale_its_two_gradients(precision_name):
  # One rank, K=4: sq_small the micro-batches' mean squared gradient norm, sq_big the squared norm of
  # their mean (the accumulated gradient), both of the true loss: fp16's loss scale divided out.
  rng = np.random.default_rng(3)
  images, labels = rng.standard_normal((16, 4)).astype(np.float32), rng.integers(0, 8, 16).astype(np.int32)
  model, optimizer = tiny()
  micro = per_batch_gradients(model, images, labels, 4)
  train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision(precision_name),
                                        num_classes=8, options=step_lib.StepOptions(accumulation_steps=4,
                                        noise=step_lib.MICRO))
  out = train_step(tf.constant(images), tf.constant(labels), tf.constant(0.0))
  rtol = 1e-5 if precision_name == "fp32" else 1e-3
  np.testing.assert_allclose(float(out.sq_small), np.mean(np.sum(micro ** 2, axis=1)), rtol=rtol)
  np.testing.assert_allclose(float(out.sq_big), np.sum(micro.mean(axis=0) ** 2), rtol=rtol)


def test_without_noise_the_norms_are_zero_and_with_ranks_the_own_gradient_is_averaged():
  rng = np.random.default_rng(4)
  images, labels = rng.standard_normal((8, 4)).astype(np.float32), rng.integers(0, 8, 8).astype(np.int32)
  model, optimizer = tiny()
  own = per_batch_gradients(model, images, labels, 1)[0]
  halves = []  # average(x): a stand-in for the mean over ranks, here of this rank and a peer with half its norm
  step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"), num_classes=8,
                                  options=step_lib.StepOptions(noise=step_lib.RANKS,
                                  average=lambda x: halves.append(1) or (x + x / 2) / 2))
  out = step(tf.constant(images), tf.constant(labels), tf.constant(0.0))
  assert halves and float(out.sq_small) == pytest.approx(0.75 * np.sum(own ** 2), rel=1e-5)
  assert float(out.sq_big) == pytest.approx(np.sum(own ** 2), rel=1e-5)
  plain = step_lib.make_train_step(*tiny(), lambda g: g, precision.for_precision("fp32"), num_classes=8)
  out = plain(tf.constant(images), tf.constant(labels), tf.constant(0.0))
  assert (float(out.sq_small), float(out.sq_big)) == (0.0, 0.0)
  # AdaScale's identical_norms: the exchanged mean's norm goes through the same averaging.
  model, optimizer = tiny()
  agreed = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"), num_classes=8,
                                    options=step_lib.StepOptions(noise=step_lib.RANKS,
                                    average=lambda x: (x + x / 2) / 2, identical_norms=True))
  out = agreed(tf.constant(images), tf.constant(labels), tf.constant(0.0))
  assert float(out.sq_big) == pytest.approx(0.75 * np.sum(own ** 2), rel=1e-5)


@pytest.mark.parametrize("ranks, batch, k, want", [
    (1, 32, 1, None),                        # one gradient a step: not measurable
    (1, 32, 4, ("micro", 32, 128)),          # a micro-batch against their sum
    (2, 32, 1, ("ranks", 32, 64)),           # a rank's against the exchanged mean
    (8, 256, 4, ("ranks", 1024, 8192)),      # with ranks, a rank's whole step batch is its gradient
])
def test_noise_sizes(ranks, batch, k, want):
  assert step_lib.noise_sizes(ranks, batch, k) == want


class OneRank:
  """Horovod on one rank for comm's GradientExchange: each mean is its input; counts, per call
  ('' the plain exchange, 'powersgd_p', 'powersgd_q'), the collectives that ran (not traced)."""
  Average = "average"

  def __init__(self):
    self.ran = {call: tf.Variable(0) for call in ("", "powersgd_p", "powersgd_q")}

  def grouped_allreduce(self, tensors, op, name):
    counted = self.ran[name.split("bucket_")[0].rstrip("_")].assign_add(1)
    with tf.control_dependencies([counted]):
      return [tf.identity(t) for t in tensors]

  def counts(self):
    return {call: int(v) for call, v in self.ran.items()}


def compressible(seed=0):
  """Dense 32 -> 16: its kernel (32, 16) is compressed at rank 2, its bias travels whole."""
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(16)])
  optimizer = keras.optimizers.SGD(0.0)
  optimizer.build(model.trainable_variables)
  return model, optimizer


def powersgd_step(model, optimizer, precision_name="fp32", rank=2, compressing=None, hvd=None, **kwargs):
  """(train_step with --compression=powersgd through a flat exchange on one rank, its PowerSGD)."""
  from comm.exchange import GradientExchange, make_powersgd
  from flags.config import CommConfig
  config = CommConfig("flat", compression="powersgd", powersgd_rank=rank)
  compressor = make_powersgd(config, model.trainable_variables, seed=5)
  exchange = GradientExchange(hvd or OneRank(), config, world=None)
  step = step_lib.make_train_step(model, optimizer, exchange, precision.for_precision(precision_name), num_classes=16,
                                  options=step_lib.StepOptions(powersgd=compressor, compressing=compressing, **kwargs))
  return step, compressor


def batch(rng, size):
  return (tf.constant(rng.standard_normal((size, 32)), tf.float32),
          tf.constant(rng.integers(0, 16, size), tf.int32))


def test_powersgd_on_a_model_with_nothing_to_compress_is_the_plain_step():
  # Dense 4 -> 8 at rank 4: (4, 8) would not shrink by half (32 against 2 * 4 * 12), so all travels whole.
  rng = np.random.default_rng(5)
  images, labels = tf.constant(rng.standard_normal((4, 4)), tf.float32), tf.constant([1, 2, 3, 4])
  plain_model, plain_optimizer = tiny()
  plain = step_lib.make_train_step(plain_model, plain_optimizer, lambda g: g, precision.for_precision("fp32"),
                                   num_classes=8)
  model, optimizer = tiny()
  from comm.exchange import GradientExchange, make_powersgd
  from flags.config import CommConfig
  config = CommConfig("flat", compression="powersgd")
  compressor = make_powersgd(config, model.trainable_variables, seed=0)
  assert compressor.views == (None, None) and not compressor.variables
  step = step_lib.make_train_step(model, optimizer, GradientExchange(OneRank(), config, None),
                                  precision.for_precision("fp32"), num_classes=8,
                                  options=step_lib.StepOptions(powersgd=compressor))
  for _ in range(2):
    assert bool(plain(images, labels, tf.constant(0.5)).finite) and bool(step(images, labels, tf.constant(0.5)).finite)
  for a, b in zip(weights(plain_model), weights(model)):
    np.testing.assert_array_equal(a, b)


def test_an_exactly_low_rank_gradient_steps_as_the_plain_exchange_and_a_full_rank_one_does_not():
  # A batch of one makes the kernel's gradient (32, 16) the rank-1 x d^T: PowerSGD at rank 1 sends it
  # exactly (the residual stays at rounding). A batch of 8 is of rank 8: the update differs and the
  # residual keeps the rest. The same batch each step, so the warm-started Q stays aligned with the
  # gradient's rows (a new example each step can meet it at a poor angle, and rounding then grows).
  for size, exact in ((1, True), (8, False)):
    images, labels = batch(np.random.default_rng(6), size)
    plain_model, plain_optimizer = compressible()
    plain = step_lib.make_train_step(plain_model, plain_optimizer, lambda g: g, precision.for_precision("fp32"),
                                     num_classes=16)
    model, optimizer = compressible()
    step, compressor = powersgd_step(model, optimizer, rank=1)
    for _ in range(3):
      plain(images, labels, tf.constant(0.5))
      assert bool(step(images, labels, tf.constant(0.5)).finite)
    residual = np.abs(compressor.residuals[0].numpy()).max()
    apart = max(np.abs(a - b).max() for a, b in zip(weights(plain_model), weights(model)))
    assert (residual < 1e-5 and apart < 1e-5) if exact else (residual > 0.1 and apart > 0.1), (size, residual, apart)


def test_a_skipped_fp16_step_leaves_residuals_and_qs_untouched_and_they_hold_true_gradients():
  rng = np.random.default_rng(7)
  images, labels = batch(rng, 8)
  kept = {}
  for name in ("fp32", "fp16"):
    model, optimizer = compressible()
    step, compressor = powersgd_step(model, optimizer, name)
    before = [v.numpy().copy() for v in compressor.variables]
    assert bool(step(images, labels, tf.constant(0.5)).finite)
    kept[name] = [v.numpy().copy() for v in compressor.variables]
    assert all(not np.array_equal(a, b) for a, b in zip(before, kept[name]))  # a taken step keeps Q and residual
  # The residual of the fp16 run is the fp32 run's, not 2^15 times it: compressed after unscaling.
  for a, b in zip(kept["fp32"], kept["fp16"]):
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
  after = weights(model)
  out = step(images * np.inf, labels, tf.constant(0.5))  # an overflow: skipped, the scale halves
  assert not bool(out.finite)
  for a, b in zip(kept["fp16"], [v.numpy() for v in compressor.variables]):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(after, weights(model)):
    np.testing.assert_array_equal(a, b)


def test_compression_starts_at_its_step_in_the_one_traced_step():
  # Before --compression_start the plain exchange's collectives run (and PowerSGD's state stays as
  # it started), from it on PowerSGD's two calls alone; the branch is taken by a tf.cond.
  rng = np.random.default_rng(8)
  batches = [batch(rng, 8) for _ in range(4)]
  plain_model, plain_optimizer = compressible()
  plain = step_lib.make_train_step(plain_model, plain_optimizer, lambda g: g, precision.for_precision("fp32"),
                                   num_classes=16)
  model, optimizer = compressible()
  hvd, taken = OneRank(), tf.Variable(0, dtype=tf.int64)  # taken: the checkpointed step of train.py
  step, compressor = powersgd_step(model, optimizer, compressing=lambda: taken >= 2, hvd=hvd)
  start = [v.numpy().copy() for v in compressor.variables]
  for images, labels in batches[:2]:
    plain(images, labels, tf.constant(0.5))
    step(images, labels, tf.constant(0.5))
    taken.assign_add(1)
  assert hvd.counts() == {"": 2, "powersgd_p": 0, "powersgd_q": 0}  # one bucket a step
  for a, b in zip(start, [v.numpy() for v in compressor.variables]):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(weights(plain_model), weights(model)):
    np.testing.assert_array_equal(a, b)
  step(*batches[2], tf.constant(0.5))
  assert hvd.counts() == {"": 2, "powersgd_p": 1, "powersgd_q": 1}  # P with the bias in one bucket, then Q
  assert all(not np.array_equal(a, b.numpy()) for a, b in zip(start, compressor.variables))
  assert step.experimental_get_tracing_count() == 1


def test_a_compressed_steps_noise_scale_norm_is_sketched_every_few_steps_and_close_to_the_exact_one():
  # AdaScale under PowerSGD: the exchanged gradients are a low-rank approximation, so the mean gradient's
  # squared norm comes from comm/sketch.py (one rank here: the mean is this rank's gradient).
  images, labels = batch(np.random.default_rng(9), 8)
  taken, compress = tf.Variable(0, dtype=tf.int64), tf.Variable(False)
  model, optimizer = compressible()
  step, _ = powersgd_step(model, optimizer, compressing=lambda: compress, noise=step_lib.RANKS,
                          average=lambda x: x, step=lambda: taken, seed=3)
  exact = float(step(images, labels, tf.constant(0.0)).sq_big)  # LR 0: the weights stay, the gradient too
  compress.assign(True)
  sketched = []
  for now in range(2 * step_lib.SKETCH_EVERY):
    taken.assign(now)
    sketched.append(float(step(images, labels, tf.constant(0.0)).sq_big))
  measured = [v for v in sketched if np.isfinite(v)]
  assert [np.isfinite(v) for v in sketched] == [now % step_lib.SKETCH_EVERY == 0 for now in range(len(sketched))]
  assert all(abs(v / exact - 1) < 0.1 for v in measured) and measured[0] != measured[1], (exact, measured)
  assert step.experimental_get_tracing_count() == 1
