"""tf.data pipelines: every rank reads its own shard, the next batch is prepared
while the current step runs (prefetch), and a given (seed, epoch) always yields
the same batches so a resumed run continues exactly where it stopped.
"""
import dataclasses

import numpy as np
import tensorflow as tf

from comm.topology import World
from flags.data import DataConfig
from input import digits, records


def decode(encoded, info):
  """Encoded JPEG/PNG bytes -> normalised float32 image (H, W, C) of the data set's shape."""
  height, width, channels = info.image_shape
  image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
  image.set_shape([None, None, channels])
  image = tf.image.convert_image_dtype(image, tf.float32)  # [0, 1]
  if image.shape[0] != height or image.shape[1] != width:
    image = tf.image.resize(image, [height, width])
  return (image - info.mean) / info.std


@dataclasses.dataclass(frozen=True)
class Input:
  """What the training loop needs from the input.

  train_epoch(epoch) -> dataset of exactly steps_per_epoch (images, labels)
  batches for this rank; eval() -> this rank's share of the held-out split,
  every example exactly once across ranks, or None when there is none.
  """
  steps_per_epoch: int
  train_epoch: callable
  eval: callable


def prepare(config: DataConfig, world: World) -> None:
  """Make the data set's files exist (digits: write them once, on one rank per node)."""
  if config.dataset.name == "digits" and world.local_rank == 0:
    digits.write(config.data_dir)


def build(config: DataConfig, world: World, seed: int) -> Input:
  steps = config.dataset.num_train // config.global_batch
  if config.dataset.name == "synthetic":
    return _synthetic(config, seed, steps)
  return _records(config, world, seed, steps)


def _records(config: DataConfig, world: World, seed: int, steps: int) -> Input:
  info = config.dataset
  options = tf.data.Options()
  options.deterministic = True  # same (seed, epoch) -> same batches, for exact resume

  def read(split):
    ds = tf.data.TFRecordDataset(records.shard_paths(config.data_dir, split))
    # Record-level sharding: rank r keeps records r, r+size, ... so the ranks'
    # shards are disjoint and together cover the split.
    return ds.shard(world.size, world.rank).map(records.parse_example)

  train_records = read("train").cache()

  def train_epoch(epoch):
    ds = train_records.shuffle(config.shuffle_buffer, seed=seed * 1_000_003 + epoch * 101 + world.rank)
    ds = ds.map(lambda e, l: (decode(e, info), l), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(config.batch_size, drop_remainder=True).take(steps)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options)

  def eval_split():
    ds = read("eval").map(lambda e, l: (decode(e, info), l), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(config.eval_batch_size).prefetch(tf.data.AUTOTUNE).with_options(options)

  return Input(steps_per_epoch=steps, train_epoch=train_epoch, eval=eval_split)


def _synthetic(config: DataConfig, seed: int, steps: int) -> Input:
  info = config.dataset
  rng = np.random.default_rng(seed)
  images = tf.constant(rng.standard_normal((config.batch_size, *info.image_shape), np.float32))
  labels = tf.constant(rng.integers(0, info.num_classes, config.batch_size, np.int32))
  batch = tf.data.Dataset.from_tensors((images, labels))
  return Input(steps_per_epoch=steps,
               train_epoch=lambda epoch: batch.repeat(steps),
               eval=lambda: None)
