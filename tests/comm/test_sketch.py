"""comm/sketch.py: the count sketch's estimate of the mean gradient's squared norm, against the
exact one on the same gradients (what the noise scale reads when PowerSGD carries the exchange)."""
import numpy as np
import pytest
import tensorflow as tf

from comm import sketch
from training.adaptive.noise_scale import NoiseScale


def ranks_gradients(ranks=4, seed=0, noise=1.0):
  """Each rank's gradient of two layers: a shared signal G plus noise of its own."""
  rng = np.random.default_rng(seed)
  signal = [np.random.default_rng(99).standard_normal(shape).astype(np.float32) * 0.05 for shape in ((64, 32), (40,))]
  return [[s + noise * rng.standard_normal(s.shape).astype(np.float32) for s in signal] for _ in range(ranks)]


def exact(grads):
  return float(sum(np.sum(np.square(np.mean([g[i] for g in grads], axis=0))) for i in range(len(grads[0]))))


def estimate(grads, step, dimension=512):
  per_rank = [sketch.sketch([tf.constant(t) for t in g], seed=7, step=step, dimension=dimension) for g in grads]
  return float(sketch.mean_squared_norm([tf.zeros(1)], 7, step, lambda _: tf.add_n(per_rank) / len(per_rank),
                                        dimension))


def test_the_sketch_is_linear_so_the_mean_of_the_ranks_sketches_is_the_sketch_of_the_mean():
  grads = ranks_gradients()
  mean = [np.mean([g[i] for g in grads], axis=0) for i in range(2)]
  per_rank = [sketch.sketch(g, 3, 11, 256).numpy() for g in grads]
  np.testing.assert_allclose(np.mean(per_rank, axis=0), sketch.sketch(mean, 3, 11, 256).numpy(), rtol=1e-4, atol=1e-5)
  assert not np.allclose(sketch.sketch(mean, 3, 12, 256).numpy(), sketch.sketch(mean, 3, 11, 256).numpy())


def test_the_estimate_is_unbiased_over_steps_with_the_spread_the_dimension_gives():
  grads = ranks_gradients()
  truth = exact(grads)
  values = np.array([estimate(grads, step) for step in range(300)])
  # Unbiased: the mean of 300 draws within 4 standard errors; the relative spread about sqrt(2 / d).
  assert abs(values.mean() - truth) < 4 * values.std() / np.sqrt(len(values)), (values.mean(), truth)
  assert 0.5 * np.sqrt(2 / 512) < values.std() / truth < 1.5 * np.sqrt(2 / 512)


def test_the_noise_scale_from_the_sketch_matches_the_exact_one_on_the_same_gradients():
  # What AdaScale's gain reads under PowerSGD: B_small each rank's own norm (exact), B_big the mean's (sketched).
  # Rank gradients of 16 examples, 4 ranks: B_simple ~260 against B_big 64, where a sketch's 2.2% a
  # step becomes ~(1 + B_simple / B_big) x 2.2% in |G|^2's estimate, which the average shrinks.
  exact_scale, sketched_scale = NoiseScale(), NoiseScale()
  for step in range(200):
    grads = ranks_gradients(seed=step, noise=0.2)
    sq_small = float(np.mean([sum(np.sum(np.square(t)) for t in g) for g in grads]))
    exact_scale.update(sq_small, exact(grads), 16, 64)
    sketched_scale.update(sq_small, estimate(grads, step, dimension=sketch.DIMENSION), 16, 64)
  assert sketched_scale.b_simple == pytest.approx(exact_scale.b_simple, rel=0.05)
