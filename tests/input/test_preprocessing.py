"""Per-example preprocessing (input/preprocessing.py) on real photographs
(the JPEGs of bench/harness/samples.py)."""
import numpy as np
import pytest
import tensorflow as tf

from bench.harness import samples
from input import preprocessing as P

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
NO_BOXES = tf.zeros([0, 4])


@pytest.fixture(scope="module")
def jpegs():
  return [open(p, "rb").read() for p in samples.sample_files()[::10]]


@pytest.mark.parametrize("shape, size, window", [
    ((500, 375), 224, (86, 24, 328, 328)),   # portrait: the shorter side is the width
    ((375, 500), 224, (24, 86, 328, 328)),
    ((256, 256), 224, (16, 16, 224, 224)),   # 256 -> crop 224, as the papers
    ((64, 48), 32, (12, 4, 41, 41)),         # 32 / round(32 * 256/224) = 32/37 of 48
])
def test_center_window(shape, size, window):
  assert tuple(P.center_window(tf.constant([*shape, 3]), size).numpy()) == window


def test_eval_image_equals_resize_256_then_central_crop_224(jpegs):
  for encoded in jpegs:
    image = tf.io.decode_jpeg(encoded, channels=3)
    h, w = image.shape[:2]
    scale = 256 / min(h, w)
    resized = tf.image.resize(tf.cast(image, tf.float32), [round(h * scale), round(w * scale)])
    top, left = (resized.shape[0] - 224) // 2, (resized.shape[1] - 224) // 2
    want = P.normalise(resized[top:top + 224, left:left + 224], MEAN, STD)
    got = P.eval_image(tf.constant(encoded), 224, MEAN, STD).numpy()
    assert got.shape == (224, 224, 3)
    # One resize of the decoded crop vs a crop of the resized image: the same
    # pixels up to where bilinear samples fall (measured: correlation 0.99-1.00
    # on these photographs, 0.91-0.99 on ten real ImageNet ones; the whole image
    # squashed to 224 gives 0.31-0.83 and 0.15-0.80).
    assert np.corrcoef(got.ravel(), want.numpy().ravel())[0, 1] > 0.9
    assert np.abs(got - want).mean() < 0.3


def test_crop_windows_follow_the_inception_ranges(jpegs):
  shape = tf.constant([375, 500, 3])
  areas, ratios = [], []
  for i in range(200):
    y, x, h, w = P.crop_window(shape, NO_BOXES, tf.constant([i, 7])).numpy()
    assert 0 <= y and 0 <= x and y + h <= 375 and x + w <= 500
    areas.append(h * w / (375 * 500))
    ratios.append(w / h)
  assert min(areas) >= 0.08 - 0.01 and max(areas) <= 1.0
  assert min(ratios) >= 3 / 4 - 0.02 and max(ratios) <= 4 / 3 + 0.02
  assert np.std(areas) > 0.1  # random, not one fixed window


def test_crop_windows_touch_the_records_box():
  box = tf.constant([[0.0, 0.0, 0.2, 0.2]])  # a small object in the top-left corner
  for i in range(50):
    y, x, h, w = P.crop_window(tf.constant([400, 400, 3]), box, tf.constant([i, 1])).numpy()
    covered = max(0, min(80, y + h) - y) * max(0, min(80, x + w) - x) / (80 * 80)
    assert covered >= 0.1 - 1e-6


def test_train_image_is_a_pure_function_of_the_seed(jpegs):
  encoded = tf.constant(jpegs[0])
  a = P.train_image(encoded, NO_BOXES, tf.constant([3, 4]), 224, MEAN, STD)
  b = P.train_image(encoded, NO_BOXES, tf.constant([3, 4]), 224, MEAN, STD)
  c = P.train_image(encoded, NO_BOXES, tf.constant([5, 4]), 224, MEAN, STD)
  assert a.shape == (224, 224, 3) and a.dtype == tf.float32
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  assert -2.5 < float(tf.reduce_mean(a)) < 2.5


def test_train_image_reads_png_too():
  png = tf.io.encode_png(tf.fill([40, 30, 3], tf.constant(255, tf.uint8)))
  image = P.train_image(png, NO_BOXES, tf.constant([1, 1]), 16, MEAN, STD, tf.bfloat16)
  assert image.shape == (16, 16, 3) and image.dtype == tf.bfloat16
  np.testing.assert_allclose(tf.cast(image[0, 0], tf.float32), (1 - np.array(MEAN)) / STD, rtol=1e-2)


def test_looks_complete(jpegs):
  png = tf.io.encode_png(tf.zeros([10, 10, 3], tf.uint8)).numpy()
  for data, want in [(jpegs[0], True), (jpegs[0][:len(jpegs[0]) // 2], False), (png, True),
                     (png[:-20], False), (b"", False), (b"GIF89a....", True)]:
    assert bool(P.looks_complete(tf.constant(data))) is want, data[:12]


@pytest.mark.parametrize("height, width", [(300, 400), (257, 256), (64, 48)])
def test_portable_eval_image_equals_the_kernels_up_to_rounding(height, width):
  # The SavedModel's preprocessing (training/persist/export.py) is TensorFlow's own resize + normalise.
  rng = np.random.default_rng(height)
  pixels = np.cumsum(rng.integers(0, 9, (height, width, 3)), axis=1).astype(np.uint8)  # smooth ramps
  encoded = tf.io.encode_jpeg(pixels)
  kernel = P.eval_image(encoded, 32, MEAN, STD).numpy()
  portable = P.eval_image(encoded, 32, MEAN, STD, portable=True).numpy()
  assert portable.shape == kernel.shape == (32, 32, 3)
  np.testing.assert_allclose(portable, kernel, atol=1e-4)
