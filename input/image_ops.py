"""The project's compiled image kernel (input/kernels/*.cc, built by make setup)."""
import functools
import os

import tensorflow as tf

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels", "image_ops.so")


@functools.cache
def _library():
  if not os.path.exists(LIBRARY):
    raise RuntimeError(f"{LIBRARY} is not built: run `make setup` (or `make ops`), which compiles it in about 10 s")
  return tf.load_op_library(LIBRARY)


def resize_flip_normalise(image, flip, size, scale, offset, dtype=tf.float32):
  """uint8 (h, w, 3) -> dtype (size, size, 3): tf.image.resize's bilinear (half-pixel
  centres), mirrored left-right where `flip` (a bool scalar tensor), then
  x * scale[c] - offset[c] per channel (preprocessing.affine), in one pass
  (kernels/resize_flip_normalise.cc). Equal to those three TF ops up to float
  rounding (bilinear blended rows first)."""
  return _library().resize_flip_normalise(image, flip, height=size, width=size, scale=[float(v) for v in scale],
                                          offset=[float(v) for v in offset], T=dtype)
