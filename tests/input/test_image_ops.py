"""input/kernels/resize_flip_normalise.cc against the TF ops it replaces, on real photographs
(the JPEGs of bench/harness/samples.py)."""
import numpy as np
import pytest
import tensorflow as tf

from bench.harness import samples
from input import image_ops
from input import preprocessing as P

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
AFFINE = P.affine(MEAN, STD)


def reference(image, flip, size):
  """tf.image.resize (bilinear, half-pixel centres) -> flip -> normalise, three TF ops."""
  resized = tf.image.resize(image, [size, size])
  return P.normalise(tf.image.flip_left_right(resized) if flip else resized, MEAN, STD)


@pytest.fixture(scope="module")
def photo():
  return tf.io.decode_jpeg(open(samples.sample_files()[3], "rb").read(), channels=3)


@pytest.mark.parametrize("crop, size", [
    ((0, 0, None, None), 224),    # the whole photograph: shrink
    ((40, 60, 120, 90), 224),     # a small crop: enlarge, unequal scales
    ((10, 20, 300, 7), 224),      # a sliver: 7 columns stretched to 224
    ((5, 5, 1, 1), 8),            # one pixel: every output pixel equals it
    ((0, 0, 224, 224), 224),      # same size: a copy
    ((17, 3, 100, 333), 31),      # odd output size
])
@pytest.mark.parametrize("flip", [False, True])
def test_equals_resize_flip_normalise(photo, crop, size, flip):
  y, x, h, w = crop
  image = photo[y:y + h if h else None, x:x + w if w else None]
  got = image_ops.resize_flip_normalise(image, tf.constant(flip), size, *AFFINE)
  assert got.shape == (size, size, 3) and got.dtype == tf.float32
  # Rows are blended before columns (TF: columns first), so float rounding differs.
  np.testing.assert_allclose(got, reference(image, flip, size), atol=2e-5)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_writes_the_compute_dtype(photo, dtype):
  got = image_ops.resize_flip_normalise(photo, tf.constant(True), 64, *AFFINE, dtype)
  assert got.dtype == dtype
  np.testing.assert_allclose(tf.cast(got, tf.float32), reference(photo, True, 64), atol=0.02)


def test_shape_is_known_inside_a_graph():
  fn = tf.function(lambda image, flip: image_ops.resize_flip_normalise(image, flip, 224, *AFFINE))
  traced = fn.get_concrete_function(tf.TensorSpec([None, None, 3], tf.uint8), tf.TensorSpec([], tf.bool))
  assert traced.output_shapes == (224, 224, 3)


@pytest.mark.parametrize("shape", [(10, 10, 1), (0, 10, 3), (10, 10)])
def test_refuses_images_it_cannot_resize(shape):
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
    image_ops.resize_flip_normalise(tf.zeros(shape, tf.uint8), tf.constant(False), 8, *AFFINE)
