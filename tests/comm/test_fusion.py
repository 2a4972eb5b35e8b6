"""Tensor fusion: the bucket planner on literal tables; pack/unpack round-trips exactly."""
import numpy as np
import pytest
import tensorflow as tf

from comm import fusion

F32, F16, BF16 = "float32", "float16", "bfloat16"


@pytest.mark.parametrize("tensors, threshold, want", [
    # backprop order: the last variable first; 4-byte floats
    ([(1, F32), (1, F32), (1, F32)], 100, [(2, 1, 0)]),
    ([(10, F32), (10, F32), (10, F32)], 80, [(2, 1), (0,)]),           # 40+40 fits, +40 would not
    ([(10, F32), (10, F32), (10, F32)], 79, [(2,), (1,), (0,)]),       # no two fit
    ([(5, F32), (100, F32), (5, F32)], 64, [(1,), (2, 0)]),            # at/above: alone, on its way
    ([(16, F32)], 64, [(0,)]),                                          # exactly the threshold: alone
    ([(3, F32), (3, F16), (3, F32), (3, F16)], 1000, [(3, 1), (2, 0)]),  # dtypes never mix
    ([(3, BF16), (3, F32)], 1000, [(1,), (0,)]),
    ([(0, F32), (4, F32), (0, F16)], 1000, [(1,)]),                     # empties travel nowhere
    ([], 1000, []),
    ([(2, F32), (2, F32)], 0, [(1,), (0,)]),                            # 0: no fusion
])
def test_plan(tensors, threshold, want):
  assert fusion.plan(tensors, threshold) == want


def test_plan_covers_every_nonempty_tensor_once_and_bounds_buckets():
  rng = np.random.default_rng(0)
  tensors = [(int(n), str(d)) for n, d in zip(rng.integers(0, 5000, 300), rng.choice([F32, F16], 300))]
  threshold = 8000
  buckets = fusion.plan(tensors, threshold)
  flat = sorted(i for b in buckets for i in b)
  assert flat == [i for i, (n, _) in enumerate(tensors) if n]
  for b in buckets:
    assert len({tensors[i][1] for i in b}) == 1
    nbytes = sum(tensors[i][0] * tf.as_dtype(tensors[i][1]).size for i in b)
    assert len(b) == 1 or nbytes <= threshold


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_pack_unpack_round_trips_exactly(dtype):
  shapes = [(), (1,), (7,), (3, 5), (0,), (2, 3, 4)]
  rng = np.random.default_rng(1)
  tensors = [tf.cast(rng.standard_normal(s), dtype) for s in shapes]
  buffer = fusion.pack(tensors)
  assert buffer.shape == (sum(int(np.prod(s)) for s in shapes),) and buffer.dtype == dtype
  back = fusion.unpack(buffer, [t.shape for t in tensors])
  for t, b in zip(tensors, back):
    assert b.shape == t.shape and b.dtype == dtype
    np.testing.assert_array_equal(tf.cast(b, tf.float32).numpy(), tf.cast(t, tf.float32).numpy())


def test_pack_keeps_order():
  buffer = fusion.pack([tf.constant([[1., 2.], [3., 4.]]), tf.constant(5.), tf.constant([6.])])
  np.testing.assert_array_equal(buffer.numpy(), [1, 2, 3, 4, 5, 6])
