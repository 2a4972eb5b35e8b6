"""One example's image, as the ImageNet references prepare it (pure TF functions).

Training (Szegedy et al.'s Inception crop, as in tensorflow/models'
imagenet_preprocessing.py and NVIDIA's DALI pipeline): sample a window covering
8-100% of the area with aspect ratio 3/4-4/3 (inside the record's boxes when it
has any), decode only that window (`decode_and_crop_jpeg`: the fused op skips
the IDCT of the rest), resize to size x size, flip left-right with p = 0.5.
Evaluation: the central crop that resizing the shorter side to 256 and cutting
224 would keep, decoded fused and then resized (the same pixels, one resize).
Both normalise with the data set's per-channel mean and std and return the
requested dtype; resize, flip and normalise are one pass of the project's
kernel (image_ops). Randomness is stateless, so (seed, example position) fixes the
crop and flip: a resumed run sees the same augmented images.
"""
import numpy as np
import tensorflow as tf

from input import image_ops

# Evaluation crop: shorter side resized to 256 for a 224 crop (ResNet, AlexNet papers).
EVAL_RESIZE_RATIO = 256 / 224
AREA_RANGE = (0.08, 1.0)
ASPECT_RANGE = (3 / 4, 4 / 3)
MIN_OBJECT_COVERED = 0.1  # tensorflow/models' value: the window must touch a box
WHOLE_IMAGE = ((0.0, 0.0, 1.0, 1.0),)


def image_shape(encoded):
  """(height, width, channels) int32 of JPEG bytes (header only) or any image (decoded)."""
  return tf.cond(tf.io.is_jpeg(encoded),
                 lambda: tf.image.extract_jpeg_shape(encoded),
                 lambda: tf.shape(_decode_any(encoded), out_type=tf.int32))


def _decode_any(encoded):
  image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
  image.set_shape([None, None, 3])
  return image


def _decode_window(encoded, window):
  """uint8 (h, w, 3) of the window [y, x, h, w]; fused for JPEG."""
  return tf.cond(
      tf.io.is_jpeg(encoded),
      lambda: tf.image.decode_and_crop_jpeg(encoded, window, channels=3),
      lambda: tf.image.crop_to_bounding_box(_decode_any(encoded), window[0], window[1], window[2], window[3]))


def affine(mean, std):
  """(scale, offset), float32 per channel: (x / 255 - mean) / std = x * scale - offset."""
  std = np.asarray(std, np.float32)
  return 1.0 / (255.0 * std), np.asarray(mean, np.float32) / std


def normalise(image, mean, std, dtype=tf.float32):
  """Pixels in 0..255 -> (x / 255 - mean) / std, cast to dtype."""
  # One multiply-add per pixel (affine). With the image's shape known, scale
  # and offset are constants of that full shape: Eigen broadcasts a 3-vector
  # over (224, 224, 3) element by element, and that broadcast alone took a
  # fifth of the training pipeline (bench-input: 845 -> 1,033 images/s on 2
  # cores; without normalising 1,100).
  scale, offset = affine(mean, std)
  if image.shape.is_fully_defined():
    scale, offset = (np.broadcast_to(v, image.shape).copy() for v in (scale, offset))
  return tf.cast(tf.cast(image, tf.float32) * tf.constant(scale) - tf.constant(offset), dtype)


def crop_window(shape, boxes, seed):
  """[y, x, h, w] int32 of a random Inception-style crop of an image of `shape`.

  boxes: float (N, 4) of [ymin, xmin, ymax, xmax] in [0, 1]; N = 0 means the
  whole image. seed: int32/int64 (2,), the stateless seed of this example.
  """
  # The record's boxes, or the whole image when it has none, without a tf.cond
  # (a function call per example in tf.data).
  boxes = tf.concat([boxes, tf.constant(WHOLE_IMAGE, boxes.dtype)], 0)[:tf.maximum(tf.shape(boxes)[0], 1)]
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      shape, boxes[None], seed=seed, min_object_covered=MIN_OBJECT_COVERED,
      aspect_ratio_range=ASPECT_RANGE, area_range=AREA_RANGE, max_attempts=10,
      use_image_if_no_bounding_boxes=True)
  return tf.stack([begin[0], begin[1], size[0], size[1]])


def train_image(encoded, boxes, seed, size, mean, std, dtype=tf.float32):
  """Encoded image -> (size, size, 3) augmented, normalised training image."""
  crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  window = crop_window(image_shape(encoded), boxes, crop_seed)
  flip = tf.random.stateless_uniform([], flip_seed) < 0.5
  return image_ops.resize_flip_normalise(_decode_window(encoded, window), flip, size, *affine(mean, std), dtype)


def center_window(shape, size):
  """[y, x, h, w] int32: the square central crop of fraction size / (size * 256/224)
  of the shorter side, i.e. what a resize to 256 then a 224 crop keeps."""
  height, width = shape[0], shape[1]
  side = tf.cast(tf.cast(tf.minimum(height, width), tf.float32)
                 * (size / round(size * EVAL_RESIZE_RATIO)), tf.int32)
  return tf.stack([(height - side + 1) // 2, (width - side + 1) // 2, side, side])


def eval_image(encoded, size, mean, std, dtype=tf.float32, portable=False):
  """Encoded image -> (size, size, 3) centrally cropped, normalised evaluation image.

  portable: resize and normalise with TensorFlow's own ops instead of the project's kernel,
  so a SavedModel holding it loads wherever TensorFlow does (TF Serving, a process that never
  loaded input/kernels); the same pixels up to float rounding.
  """
  window = center_window(image_shape(encoded), size)
  crop = _decode_window(encoded, window)
  if portable:
    return normalise(tf.image.resize(crop, [size, size]), mean, std, dtype)
  return image_ops.resize_flip_normalise(crop, False, size, *affine(mean, std), dtype)


def held_out_image(encoded, info, dtype=tf.float32, portable=False):
  """The evaluation image of an example of data set `info` (flags.config.DatasetInfo): the
  central crop of ImageNet-like sources, the image as it is for small sets (digits: as in
  training). portable: as eval_image's."""
  if info.inception_crop:
    return eval_image(encoded, info.image_shape[0], info.mean, info.std, dtype, portable)
  return plain_image(encoded, info.image_shape, info.mean, info.std, dtype)


def plain_image(encoded, image_shape_hwc, mean, std, dtype=tf.float32):
  """Small data sets (digits): decode, resize only if the size differs, normalise."""
  height, width, channels = image_shape_hwc
  image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
  image.set_shape([None, None, channels])
  image = tf.cast(image, tf.float32)
  if image.shape[0] != height or image.shape[1] != width:
    image = tf.image.resize(image, [height, width])
  return normalise(image, mean, std, dtype)


def _holds(tail, marker):
  """bool: the int32 byte vector `tail` contains the byte sequence `marker`."""
  k = len(marker)
  hits = tf.ones([tf.maximum(tf.size(tail) - k + 1, 0)], tf.bool)
  for i, byte in enumerate(marker):
    hits &= tail[i:tf.size(tail) - k + 1 + i] == byte
  return tf.reduce_any(hits)


def looks_complete(encoded):
  """bool: the bytes start like a JPEG/PNG and still hold its end marker.

  Catches the common damage (a truncated download, a file that is not an
  image) with a few byte compares, before the decoder fails with a message
  that does not say which file; other formats pass unchecked.
  """
  n = tf.strings.length(encoded)
  tail_len = tf.minimum(n, 64)
  tail = tf.cast(tf.io.decode_raw(tf.strings.substr(encoded, n - tail_len, tail_len), tf.uint8), tf.int32)
  jpeg = tf.io.is_jpeg(encoded)
  png = tf.equal(tf.strings.substr(encoded, 0, 8), b"\x89PNG\r\n\x1a\n")
  return tf.where(jpeg, _holds(tail, (0xFF, 0xD9)),
                  tf.where(png, _holds(tail, tuple(b"IEND")), n > 0))
