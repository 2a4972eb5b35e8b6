"""Fashion-MNIST (Xiao et al. 2017) as sharded TFRecords: a real 10-class set that installs.

Debian's dataset-fashion-mnist (make setup) ships Zalando's original IDX files:
60,000 training and 10,000 test images, 28x28 grey levels, 10 classes. They
are written once into the digits layout (PNG bytes in `image/encoded`, 1-based
`image/class/label`, input/records.py), so the run goes through the same
file-based input path as ImageNet; the official test split is the held-out set.
Images go to the model as they are, like digits (no flip or pad-and-crop: whether
either helps was not measured here, so neither is on by default).

Reading the records rather than the arrays in memory costs nothing that shows:
on 1 rank with 2 threads the TFRecord pipeline (PNG decode) gave 5,900-7,300
images/s at batch 32-256 and the in-memory arrays 13,800-18,900, both far above
the ~100 images/s ResNet-20 trains at (1 rank, batch 32, 2 shared cores).
Writing the records once: 18-19 s.
"""
import gzip
import os

import numpy as np
import tensorflow as tf

from flags.config import ConfigError
from input import records
from input.datasets import FASHION_MNIST

SOURCE_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "eval": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
# 3,750 training images a shard: the per-epoch file order (input/sharding.py)
# then mixes 16 files, and 2 ranks each start on 8 of them.
TRAIN_SHARDS = 16
EVAL_SHARDS = 4
IDX_UBYTE = 0x08  # the IDX type code of unsigned bytes, the only one these files use


def parse_idx(data: bytes) -> np.ndarray:
  """The uint8 array of an IDX file's bytes (LeCun's MNIST format).

  Header: two zero bytes, the type code (0x08: unsigned byte), the number of
  dimensions, then each dimension as a big-endian uint32; the values follow.
  Raises ValueError on another magic number or a size that disagrees.
  """
  if len(data) < 4 or data[0] or data[1] or data[2] != IDX_UBYTE:
    raise ValueError(f"not an unsigned-byte IDX file (magic {data[:4].hex() or 'missing'}, "
                     f"want 0000{IDX_UBYTE:02x}nn)")
  ndim = data[3]
  header = 4 + 4 * ndim
  if len(data) < header:
    raise ValueError(f"IDX header of {ndim} dimensions needs {header} bytes, the file has {len(data)}")
  shape = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
  if len(data) - header != int(np.prod(shape)):
    raise ValueError(f"IDX dimensions {shape} need {int(np.prod(shape))} bytes of values, "
                     f"the file has {len(data) - header}")
  return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def read_idx(path: str) -> np.ndarray:
  """parse_idx of a gzipped IDX file."""
  with gzip.open(path, "rb") as fh:
    return parse_idx(fh.read())


def missing(source_dir: str = SOURCE_DIR) -> str | None:
  """The one-line fix when a file of the set is not in source_dir, or None."""
  if all(os.path.isfile(os.path.join(source_dir, f)) for pair in FILES.values() for f in pair):
    return None
  return (f"Fashion-MNIST's files are not in {source_dir}; run make setup "
          "(it installs Debian's dataset-fashion-mnist).")


def load_arrays(source_dir: str = SOURCE_DIR) -> dict:
  """{'train'|'eval': (uint8 images (N, 28, 28, 1), int64 labels (N,))} in the files' order."""
  problem = missing(source_dir)
  if problem:
    raise ConfigError(problem)
  arrays = {}
  for split, (images_file, labels_file) in FILES.items():
    images = read_idx(os.path.join(source_dir, images_file))
    labels = read_idx(os.path.join(source_dir, labels_file)).astype(np.int64)
    if images.ndim != 3 or labels.shape != images.shape[:1]:
      raise ValueError(f"{source_dir}/{images_file} {images.shape} and {labels_file} {labels.shape} "
                       "do not hold one label per 2-D image")
    arrays[split] = images[..., None], labels
  return arrays


def is_written(data_dir: str) -> bool:
  return (len(records.shard_paths(data_dir, "train")) == TRAIN_SHARDS
          and len(records.shard_paths(data_dir, "eval")) == EVAL_SHARDS)


def write(data_dir: str, source_dir: str = SOURCE_DIR) -> None:
  """Write the TFRecords into data_dir unless they are already there."""
  if is_written(data_dir):
    return
  arrays = load_arrays(source_dir)
  os.makedirs(data_dir, exist_ok=True)
  for split, shards in (("train", TRAIN_SHARDS), ("eval", EVAL_SHARDS)):
    images, labels = arrays[split]
    encoded = (tf.io.encode_png(image).numpy() for image in images)
    records.write_shards(zip(encoded, labels.tolist()), data_dir, split, shards)


def constants_problem(source_dir: str = SOURCE_DIR, tolerance: float = 0.0005) -> str | None:
  """Whether the training split's grey-level mean and std are input/datasets.py's FASHION_MNIST
  normalisation constants (make setup checks the installed package): the sentence when not."""
  images = load_arrays(source_dir)["train"][0] / 255.0
  mean, std = float(images.mean()), float(images.std())
  if abs(mean - FASHION_MNIST.mean[0]) < tolerance and abs(std - FASHION_MNIST.std[0]) < tolerance:
    return None
  return (f"Fashion-MNIST's training images in {source_dir} have mean {mean:.4f} and std {std:.4f}, not "
          f"input/datasets.py's {FASHION_MNIST.mean[0]} and {FASHION_MNIST.std[0]}; reinstall "
          "dataset-fashion-mnist (make setup) or correct the constants.")


def check(data_dir: str, source_dir: str = SOURCE_DIR) -> str | None:
  """Before training: the fix when the records are not written yet and cannot be."""
  return None if is_written(data_dir) else missing(source_dir)
