"""The squared norm of the mean gradient over ranks, from one small allreduce: a count sketch.

The gradient noise scale (training/adaptive/noise_scale.py) needs, each step, the squared norm of each
rank's own gradient (B_small) and of their mean over ranks (B_big); AdaScale's gain is computed
from them. Without compression the mean is what the exchange returns. With PowerSGD the exchange
returns a rank-r approximation of (mean gradient + mean residual), whose norm is neither, so the
mean's norm is taken from a sketch instead (Charikar, Chen, Farach-Colton 2002; the AMS estimator
of a squared norm, Alon, Matias, Szegedy 1996):

  S(x)_b = sum over coordinates i with h(i) = b of s(i) x_i,   b in 0..d-1

h a hash into d buckets and s a hash into {-1, +1}. S is linear, so the mean over ranks of each
rank's S(g_rank) is S(mean g): one allreduce of d floats. And for signs that are pairwise
independent and independent of x, E|S(x)|^2 = |x|^2 + sum over i != j in one bucket of
E[s(i) s(j)] x_i x_j = |x|^2: unbiased, whatever h. Its variance is at most 2 |x|^4 / d
(every pair colliding with probability 1/d): a relative standard error of sqrt(2 / d), 2.2% at
d = 4,096. |G|^2's estimate, B_big |g_big|^2 - B_small |g_small|^2 over B_big - B_small, takes it
times about (1 + B_simple / B_big); the noise scale's average over ~100 steps shrinks that about
tenfold (tests/comm/test_sketch.py: B_simple within 5% of the exact one's at B_simple ~4 B_big).

The hashes are drawn afresh each step, from (seed, step), the same on every rank (the sketches
must be comparable to be averaged): with one hash for the whole run, the collisions' terms
s(i) s(j) G_i G_j of the true gradient G would be a fixed bias of the run, not noise that
averages out. h and s are multiply-add hashes modulo the Mersenne prime 2^31 - 1 of each
coordinate's place in the flattened gradient (2-universal, so pairwise independent), computed
per step from the coordinates' indices (int64: a < 2^31 times an index < 2^32 stays below 2^63),
not stored: ResNet-50's 25.6 M coordinates would take 100 MB of indices.
"""
import tensorflow as tf

DIMENSION = 4096  # buckets: 16 KB a step on the wire, a relative standard error of 2.2% a step
_PRIME = 2 ** 31 - 1


def _coefficients(seed: int, step) -> tf.Tensor:
  """int64 (4,): a, b of h and c, e of s, in [1, P) and [0, P), drawn from (seed, step)."""
  draw = tf.random.stateless_uniform([4], seed=tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)]),
                                     minval=0, maxval=_PRIME - 1, dtype=tf.int64)
  return draw + tf.constant([1, 0, 1, 0], tf.int64)  # multipliers non-zero


def sketch(tensors, seed: int, step, dimension: int = DIMENSION) -> tf.Tensor:
  """float32 (dimension,): the count sketch of the tensors as one flattened vector (in the order
  given), with the hashes of (seed, step). Linear in the tensors; graph-friendly (static shapes)."""
  a, b, c, e = tf.unstack(_coefficients(seed, step))
  total = tf.zeros([dimension], tf.float32)
  offset = 0
  for t in tensors:
    flat = tf.reshape(tf.cast(t, tf.float32), [-1])
    size = int(flat.shape[0])
    index = tf.range(offset, offset + size, dtype=tf.int64)
    bucket = tf.math.floormod(tf.math.floormod(a * index + b, _PRIME), dimension)
    sign = 1.0 - 2.0 * tf.cast(tf.math.floormod(tf.math.floormod(c * index + e, _PRIME), 2), tf.float32)
    total += tf.math.unsorted_segment_sum(flat * sign, bucket, dimension)
    offset += size
  return total


def mean_squared_norm(tensors, seed: int, step, average, dimension: int = DIMENSION) -> tf.Tensor:
  """float32 scalar: an unbiased estimate of |mean over ranks of tensors|^2 (the module docstring).
  average(x) -> x's mean over ranks: one allreduce of `dimension` floats (Horovod, train.py)."""
  mean = average(sketch(tensors, seed, step, dimension))
  return tf.reduce_sum(tf.square(mean))
