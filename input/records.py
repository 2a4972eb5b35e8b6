"""The TFRecord layout shared by every file-based data set.

ImageNet's widely used layout (tensorflow/models' build_imagenet_data.py):
shards named `train-00000-of-01024` / `validation-00000-of-00128`, each record
a tf.train.Example with `image/encoded` (JPEG or PNG bytes) and
`image/class/label` (int64, 1-based: 1..num_classes). The reader maps labels
to 0-based.
"""
import os

import tensorflow as tf

SPLITS = {"train": "train", "eval": "validation"}
ENCODED = "image/encoded"
LABEL = "image/class/label"
LABEL_OFFSET = 1  # files hold 1-based labels, the model sees 0-based ones


def shard_name(split: str, index: int, count: int) -> str:
  return f"{SPLITS[split]}-{index:05d}-of-{count:05d}"


def shard_paths(data_dir: str, split: str) -> list[str]:
  """Sorted shard files of a split; [] if none."""
  return sorted(tf.io.gfile.glob(os.path.join(data_dir, f"{SPLITS[split]}-*-of-*")))


def make_example(encoded: bytes, label: int) -> bytes:
  """A serialised tf.train.Example; label is 0-based and stored 1-based."""
  feature = {
      ENCODED: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
      LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[label + LABEL_OFFSET])),
  }
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_example(serialized):
  """(encoded bytes, 0-based int32 label) of one serialised record."""
  parsed = tf.io.parse_single_example(serialized, {
      ENCODED: tf.io.FixedLenFeature([], tf.string),
      LABEL: tf.io.FixedLenFeature([], tf.int64),
  })
  return parsed[ENCODED], tf.cast(parsed[LABEL] - LABEL_OFFSET, tf.int32)


def write_shards(examples, data_dir: str, split: str, num_shards: int) -> list[str]:
  """Write (encoded, label) pairs round-robin into num_shards files, atomically.

  Each shard is written under a temporary name and renamed into place, so a
  reader never sees a half-written file and an interrupted run leaves no shard
  that looks complete.
  """
  examples = list(examples)
  paths = []
  for i in range(num_shards):
    path = os.path.join(data_dir, shard_name(split, i, num_shards))
    tmp = f"{path}.tmp-{os.getpid()}"
    with tf.io.TFRecordWriter(tmp) as writer:
      for encoded, label in examples[i::num_shards]:
        writer.write(make_example(encoded, label))
    os.replace(tmp, path)
    paths.append(path)
  return paths
