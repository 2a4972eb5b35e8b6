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
  train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"),
                                        num_classes=8, agree=peer_nan)
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


@pytest.mark.parametrize("k", [2, 4])
def test_k_micro_batches_make_the_update_of_one_batch_k_times_larger(k):
  # Without BatchNorm the mean loss over K * B images is the mean of the K micro-batches' means.
  rng = np.random.default_rng(1)
  images = tf.constant(rng.standard_normal((4 * k, 4), np.float32))
  labels = tf.constant(rng.integers(0, 8, 4 * k))
  results = {}
  for steps in (1, k):
    model, optimizer = tiny()
    train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"),
                                          num_classes=8, accumulation_steps=steps)
    loss, correct, finite, *_ = train_step(images, tf.cast(labels, tf.int32), tf.constant(0.5))
    results[steps] = (float(loss), float(correct), bool(finite), weights(model))
  (loss1, correct1, finite1, w1), (lossk, correctk, finitek, wk) = results[1], results[k]
  assert finite1 and finitek and correct1 == correctk and loss1 == pytest.approx(lossk, rel=1e-6)
  assert any(not np.array_equal(a, b) for a, b in zip(w1, weights(tiny()[0])))  # the update moved them
  for a, b in zip(w1, wk):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_one_step_for_any_k_is_traced_once_and_updates_as_the_step_of_that_k():
  # --batch_policy=adaptive changes K mid-run: the step takes any number of micro-batches of the
  # traced shape (any_k), and its update, loss and micro-batch norms are the fixed-K step's.
  rng = np.random.default_rng(2)
  model, optimizer = tiny()
  spec = tf.TensorSpec([4, 4], tf.float32)
  any_k = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"), num_classes=8,
                                   noise=step_lib.MICRO, any_k=spec)
  for k in (2, 3, 1, 4):
    images = rng.standard_normal((4 * k, 4)).astype(np.float32)
    labels = rng.integers(0, 8, 4 * k).astype(np.int32)
    start = weights(model)
    got = any_k(tf.constant(images), tf.constant(labels), tf.constant(0.5), tf.constant(0))
    after = weights(model)
    ref_model, ref_optimizer = tiny()
    for v, w in zip(ref_model.trainable_variables, start):
      v.assign(w)
    fixed = step_lib.make_train_step(ref_model, ref_optimizer, lambda g: g, precision.for_precision("fp32"),
                                     num_classes=8, accumulation_steps=k, noise=step_lib.MICRO if k > 1 else None)
    want = fixed(tf.constant(images), tf.constant(labels), tf.constant(0.5))
    assert float(got.loss) == pytest.approx(float(want.loss), rel=1e-6) and float(got.correct) == float(want.correct)
    if k > 1:
      assert float(got.sq_small) == pytest.approx(float(want.sq_small), rel=1e-5)
    for a, b in zip(after, weights(ref_model)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert any_k.experimental_get_tracing_count() == 1


def test_batchnorm_normalises_each_micro_batch():
  # Goyal et al.'s per-worker n: with K=2 the BatchNorm batch is half the step's images, so
  # two micro-batches of different means give another update than one batch of both.
  def run(steps):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization(), keras.layers.Dense(8)])
    optimizer = keras.optimizers.SGD(0.0)
    optimizer.build(model.trainable_variables)
    train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"),
                                          num_classes=8, accumulation_steps=steps)
    images = tf.concat([tf.zeros([4, 4]), tf.reshape(tf.range(16, dtype=tf.float32), [4, 4]) + 10], 0)
    finite = train_step(images, tf.constant([0, 1, 2, 3, 4, 5, 6, 7]), tf.constant(0.5)).finite
    assert bool(finite)
    return weights(model)
  assert any(not np.allclose(a, b) for a, b in zip(run(1), run(2)))


def test_a_non_finite_micro_batch_skips_the_whole_update():
  model, optimizer = tiny()
  train_step = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"),
                                        num_classes=8, accumulation_steps=3)
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
                                        num_classes=8, accumulation_steps=4, noise=step_lib.MICRO)
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
                                  noise=step_lib.RANKS, average=lambda x: halves.append(1) or (x + x / 2) / 2)
  out = step(tf.constant(images), tf.constant(labels), tf.constant(0.0))
  assert halves and float(out.sq_small) == pytest.approx(0.75 * np.sum(own ** 2), rel=1e-5)
  assert float(out.sq_big) == pytest.approx(np.sum(own ** 2), rel=1e-5)
  plain = step_lib.make_train_step(*tiny(), lambda g: g, precision.for_precision("fp32"), num_classes=8)
  out = plain(tf.constant(images), tf.constant(labels), tf.constant(0.0))
  assert (float(out.sq_small), float(out.sq_big)) == (0.0, 0.0)
  # AdaScale's identical_norms: the exchanged mean's norm goes through the same averaging.
  model, optimizer = tiny()
  agreed = step_lib.make_train_step(model, optimizer, lambda g: g, precision.for_precision("fp32"), num_classes=8,
                                    noise=step_lib.RANKS, average=lambda x: (x + x / 2) / 2, identical_norms=True)
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
