"""tf.data pipelines: each rank reads its own share of one shared per-epoch
shuffle, prepares the next batch while the current step runs, and a given
(seed, epoch) always yields the same batches, so a resumed run continues
exactly where it stopped.

Stages (Jia et al.'s input module; tensorflow/models and NVIDIA's ResNet-50):
plan (input/sharding.py: this rank's runs of files for the epoch) -> parallel
interleave of the files -> shuffle buffer of encoded records -> parallel map of
parse + decode-and-crop + resize + flip + normalise -> batch (drop_remainder
in training) -> prefetch (to the GPU when there is one). Every parallel stage
is AUTOTUNE inside a private thread pool of the cores this rank may use
(World.threads_per_rank), so the ranks of a node do not oversubscribe it.
"""
import dataclasses
import sys

import numpy as np
import tensorflow as tf

from comm.topology import World
from flags.data import DataConfig
from input import digits, preprocessing, records, sharding, sources
from progress import emit


@dataclasses.dataclass(frozen=True)
class Input:
  """What the training loop needs from the input.

  info: the data set as found on disk (classes, image shape, split sizes);
  train_epoch(epoch, first_step=0, steps=None) -> dataset of (images, labels)
  batches for this rank: steps [first_step, steps_per_epoch) of the epoch, at
  most `steps` of them; eval() -> this rank's share of the held-out split,
  every example exactly once across ranks, or None when there is none.
  """
  info: object
  steps_per_epoch: int
  train_epoch: callable
  eval: callable


def prepare(config: DataConfig, world: World) -> None:
  """Make the data set's files exist (digits: write them once, on one rank per node)."""
  if config.source == "digits" and world.local_rank == 0:
    digits.write(config.data_dir)


def build(config: DataConfig, world: World, seed: int, dtype=tf.float32) -> Input:
  """The Input of this rank; images come out as `dtype` (the model's compute dtype)."""
  if config.source == "synthetic":
    return _synthetic(config, seed, dtype)
  source = sources.scan(config)
  for path in source.damaged:
    emit(f"input: {path} is truncated; training on its complete records (--skip_corrupt)")
  return _files(config, world, seed, source, dtype)


def _options(world: World) -> tf.data.Options:
  options = tf.data.Options()
  options.deterministic = True  # same (seed, epoch) -> same batches, for exact resume
  options.threading.private_threadpool_size = world.threads_per_rank()
  options.threading.max_intra_op_parallelism = 1  # parallelism across examples, not inside one
  return options


def _reader(source: sources.Source, split: sources.Split, threads: int):
  """runs [(file, first, count)] -> dataset of (encoded, label, boxes, where)."""
  files = tf.constant(split.files or [""])
  if source.kind == "images":
    labels = tf.constant(split.labels or [0], tf.int32)

    def read(runs):
      index = tf.constant([f for f, _, _ in runs], tf.int64)
      ds = tf.data.Dataset.from_tensor_slices(index)
      return ds.map(lambda i: (tf.io.read_file(files[i]), labels[i], tf.zeros([0, 4]), files[i]),
                    num_parallel_calls=tf.data.AUTOTUNE)
    return read

  parse = records.parse_with_boxes if source.kind == "tfrecord" else _tfds_parser(source)

  def read(runs):
    columns = [tf.constant(c, tf.int64) for c in zip(*runs)] if runs else [tf.zeros([0], tf.int64)] * 3

    def one_run(i, first, count):
      where = tf.strings.join([files[i], ":record "])
      ds = tf.data.TFRecordDataset(files[i], buffer_size=1 << 20).skip(first).take(count)
      return ds.enumerate(first).map(lambda k, r: (r, tf.strings.join([where, tf.strings.as_string(k)])))
    ds = tf.data.Dataset.from_tensor_slices(tuple(columns)).interleave(
        one_run, cycle_length=max(1, min(threads, len(runs))), block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.map(lambda r, where: (*parse(r), where), num_parallel_calls=tf.data.AUTOTUNE)
  return read


def _tfds_parser(source: sources.Source):
  """serialized tfds record -> (encoded image, 0-based label, no boxes)."""
  import tensorflow_datasets as tfds
  info = sources.tfds_builder(source.tfds_name, source.data_dir).info
  image_key, label_key = info.supervised_keys or ("image", "label")

  def parse(serialized):
    example = info.features.deserialize_example(serialized, decoders={image_key: tfds.decode.SkipDecoding()})
    return example[image_key], tf.cast(example[label_key], tf.int32), tf.zeros([0, 4])
  return parse


def _checked(prepare, blank, num_classes: int, skip_corrupt: bool, skipped: tf.Variable):
  """Wrap prepare(encoded, label, boxes, seed) with the bad-input rules.

  A damaged image (input/preprocessing.looks_complete) or a label outside
  0..num_classes-1 stops the run with an error naming the file, or, with
  --skip_corrupt, is counted on stderr and dropped (the caller filters on ok).
  """
  def fn(encoded, label, boxes, where, seed):
    ok = preprocessing.looks_complete(encoded) & (label >= 0) & (label < num_classes)
    if skip_corrupt:
      report = tf.cond(ok, lambda: tf.constant(0, tf.int64), lambda: skipped.assign_add(1))
      note = tf.cond(ok, tf.no_op, lambda: tf.print(tf.strings.join([
          "input: skipped ", where, f" (damaged image, or label outside 0..{num_classes - 1}); ",
          tf.strings.as_string(report), " skipped on this rank so far (--skip_corrupt)"]),
          output_stream=sys.stderr))
      with tf.control_dependencies([note]):
        image = tf.cond(ok, lambda: prepare(encoded, boxes, seed), lambda: blank)
      return image, label, ok
    # Without --skip_corrupt the assertion stops the run before prepare sees a
    # bad example, so no tf.cond: its function call cost 4% of the pipeline.
    with tf.control_dependencies([tf.debugging.Assert(
        ok, ["input: damaged image or label outside 0..", num_classes - 1, "in", where, "label", label,
             "; replace the file, or pass --skip_corrupt to skip it"])]):
      return prepare(encoded, boxes, seed), label, ok
  return fn


def _files(config: DataConfig, world: World, seed: int, source: sources.Source, dtype) -> Input:
  info = source.info
  steps = info.num_train // config.global_batch
  quota = steps * config.batch_size  # examples this rank trains on per epoch
  threads = world.threads_per_rank()
  options = _options(world)
  size = info.image_shape[0]
  if info.inception_crop:
    def train_prepare(encoded, boxes, s):
      return preprocessing.train_image(encoded, boxes, s, size, info.mean, info.std, dtype)

    def eval_prepare(encoded, boxes, s):
      return preprocessing.eval_image(encoded, size, info.mean, info.std, dtype)
  else:  # digits: tiny images, no crops
    def train_prepare(encoded, boxes, s):
      return preprocessing.plain_image(encoded, info.image_shape, info.mean, info.std, dtype)
    eval_prepare = train_prepare
  blank = tf.zeros(info.image_shape, dtype)
  skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_skipped")
  read_train = _reader(source, source.train, threads)
  read_eval = _reader(source, source.eval, threads)

  def finish(ds, prepare, base_seed, batch, drop):
    check = _checked(prepare, blank, info.num_classes, config.skip_corrupt, skipped)
    ds = ds.map(lambda i, ex: check(*ex, tf.stack([tf.constant(base_seed, tf.int64), i])),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if config.skip_corrupt:
      # What looks_complete cannot see (a bit flip inside the data) still fails
      # the decoder: dropped here, logged by tf.data as "Ignoring error".
      ds = ds.filter(lambda image, label, ok: ok).ignore_errors(log_warning=True)
    ds = ds.map(lambda image, label, ok: (image, label))
    if config.skip_corrupt and drop:
      ds = ds.repeat()  # refill what was skipped, so every rank still runs steps_per_epoch steps
    return ds.batch(batch, drop_remainder=drop, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

  def train_epoch(epoch, first_step=0, count=None):
    order = sharding.epoch_order(len(source.train.files), seed, epoch)
    runs = sharding.segments(source.train.counts, order, world.rank * quota, quota)
    ds = read_train(runs)
    if source.kind != "images":  # image files are already in a per-example shared permutation
      ds = ds.shuffle(config.shuffle_buffer, seed=_mix(seed, epoch, world.rank, 1))
    # Position in this rank's epoch: the augmentation seed, so skipping to a step is exact.
    ds = ds.enumerate().skip(first_step * config.batch_size)
    ds = finish(ds, train_prepare, _mix(seed, epoch, world.rank, 2), config.batch_size, drop=True)
    left = steps - first_step if count is None else min(count, steps - first_step)
    return _to_device(ds.take(left).prefetch(tf.data.AUTOTUNE).with_options(options))

  def eval_split():
    if not source.eval.total:
      return None
    start, length = sharding.rank_share(source.eval.total, world.size, world.rank)
    runs = sharding.segments(source.eval.counts, np.arange(len(source.eval.files)), start, length)
    ds = finish(read_eval(runs).enumerate(), eval_prepare, 0, config.eval_batch_size, drop=False)
    return _to_device(ds.prefetch(tf.data.AUTOTUNE).with_options(options))

  return Input(info=info, steps_per_epoch=steps, train_epoch=train_epoch, eval=eval_split)


def _mix(*numbers) -> int:
  """A 62-bit seed from integers, the same on every rank that passes the same numbers."""
  return int(np.random.default_rng(list(numbers)).integers(1 << 62))


def _to_device(ds):
  """Prefetch onto the GPU when there is one: the host-to-device copy overlaps the step."""
  gpus = tf.config.list_logical_devices("GPU")
  if not gpus:
    return ds
  return ds.apply(tf.data.experimental.prefetch_to_device(gpus[0].name, buffer_size=2))


def _synthetic(config: DataConfig, seed: int, dtype) -> Input:
  info = config.dataset
  steps = info.num_train // config.global_batch
  rng = np.random.default_rng(seed)
  images = tf.constant(rng.standard_normal((config.batch_size, *info.image_shape), np.float32), dtype)
  labels = tf.constant(rng.integers(0, info.num_classes, config.batch_size, np.int32))
  batch = tf.data.Dataset.from_tensors((images, labels))

  def train_epoch(epoch, first_step=0, count=None):
    left = steps - first_step if count is None else min(count, steps - first_step)
    return batch.repeat(left)
  return Input(info=info, steps_per_epoch=steps, train_epoch=train_epoch, eval=lambda: None)
