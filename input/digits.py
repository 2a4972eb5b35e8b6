"""scikit-learn's handwritten digits as sharded TFRecords: the embedded real default.

1,797 real 8x8 images (16 grey levels) ship inside scikit-learn, so the default
run needs no download yet goes through the same file-based input path as
ImageNet: PNG bytes in `image/encoded`, 1-based `image/class/label`.
The held-out split is fixed: a seeded permutation, its last 300 examples.
"""
import os

import numpy as np
import tensorflow as tf

from input import records
from input.datasets import DIGITS

SPLIT_SEED = 20180730  # fixed forever: changing it changes the held-out set
TRAIN_SHARDS = 4
EVAL_SHARDS = 2


def load_arrays():
  """{'train'|'eval': (uint8 images (N, 8, 8, 1), int64 labels (N,))} in split order."""
  from sklearn.datasets import load_digits
  digits = load_digits()
  # 16 grey levels -> 0..255 so the PNGs look like ordinary images.
  images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
  order = np.random.default_rng(SPLIT_SEED).permutation(len(images))
  train, held_out = order[:DIGITS.num_train], order[DIGITS.num_train:]
  return {"train": (images[train], digits.target[train]),
          "eval": (images[held_out], digits.target[held_out])}


def is_written(data_dir: str) -> bool:
  return (len(records.shard_paths(data_dir, "train")) == TRAIN_SHARDS
          and len(records.shard_paths(data_dir, "eval")) == EVAL_SHARDS)


def write(data_dir: str) -> None:
  """Write the digits TFRecords into data_dir unless they are already there."""
  if is_written(data_dir):
    return
  os.makedirs(data_dir, exist_ok=True)
  for split, shards in (("train", TRAIN_SHARDS), ("eval", EVAL_SHARDS)):
    images, labels = load_arrays()[split]
    encoded = (tf.io.encode_png(image).numpy() for image in images)
    records.write_shards(zip(encoded, labels.tolist()), data_dir, split, shards)
