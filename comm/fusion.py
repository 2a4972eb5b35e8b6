"""Tensor fusion: gradients packed into buckets, one collective per bucket (Jia et al. 2018, sec. 4.1).

The planner is pure (sizes and dtypes in, buckets out); pack and unpack are
its TensorFlow halves and round-trip exactly.
"""
import tensorflow as tf

MB = 1 << 20


def plan(tensors: list[tuple[int, str]], threshold_bytes: int) -> list[tuple[int, ...]]:
  """Buckets of indices into `tensors`, given each tensor's (element count, dtype name).

  Tensors are taken in the order backprop produces them: the list is the
  model's variable order, and backprop yields the last layer first, so the
  planner walks it from the end and a bucket can leave as soon as its
  gradients exist. Each dtype fills its own open bucket (mixed dtypes never
  share one); a bucket leaves when the next tensor would take it past the
  threshold; a tensor at or above the threshold travels alone, so buffers
  neither fragment nor grow without bound (Jia et al.). Empty tensors are in
  no bucket: their mean is themselves. Buckets are listed in departure order.
  """
  buckets: list[tuple[int, ...]] = []
  open_: dict[str, tuple[list[int], int]] = {}
  for i in reversed(range(len(tensors))):
    count, dtype = tensors[i]
    nbytes = count * tf.as_dtype(dtype).size
    if count == 0:
      continue
    if nbytes >= threshold_bytes:
      buckets.append((i,))
      continue
    members, filled = open_.get(dtype, ([], 0))
    if members and filled + nbytes > threshold_bytes:
      buckets.append(tuple(members))
      members, filled = [], 0
    open_[dtype] = (members + [i], filled + nbytes)
  # What is still open leaves at the end of backprop, in the order it opened.
  rest = sorted((m for m, _ in open_.values() if m), key=lambda m: -m[0])
  return buckets + [tuple(m) for m in rest]


def pack(tensors: list[tf.Tensor]) -> tf.Tensor:
  """One 1-D buffer: the tensors flattened and concatenated (all of one dtype)."""
  return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)


def unpack(buffer: tf.Tensor, shapes: list[tf.TensorShape]) -> list[tf.Tensor]:
  """The inverse of pack: the 1-D buffer split and reshaped back to `shapes` (static)."""
  sizes = [s.num_elements() for s in shapes]
  return [tf.reshape(part, s) for part, s in zip(tf.split(buffer, sizes), shapes)]
