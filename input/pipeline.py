"""tf.data pipelines: each rank reads its own share of one shared per-epoch
shuffle, prepares the next batch while the current step runs, and a given
(seed, epoch) always yields the same batches, so a resumed run continues
exactly where it stopped.

Stages (Jia et al.'s input module; tensorflow/models and NVIDIA's ResNet-50):
plan (input/sharding.py: this rank's runs of files for the epoch) -> parallel
interleave of the files -> shuffle buffer of encoded records -> parallel map of
parse + decode-and-crop + resize + flip + normalise -> batch (drop_remainder
in training) -> label check -> prefetch (to the GPU when there is one). Bad
input is looked for only when a batch fails (Diagnosed), or, with
--skip_corrupt, in every example, to drop it. Every parallel stage
is AUTOTUNE inside a private thread pool of the cores this rank may use
(World.threads_per_rank), so the ranks of a node do not oversubscribe it.
"""
import dataclasses
import sys

import numpy as np
import tensorflow as tf

from comm.topology import World
from flags.data import DataConfig
from input import digits, fashion_mnist, preprocessing, records, sharding, sources
from progress import emit


@dataclasses.dataclass(frozen=True)
class Input:
  """What the training loop needs from the input.

  info: the data set as found on disk (classes, image shape, split sizes);
  train_epoch(epoch, first_step=0, steps=None) -> iterable of (images, labels)
  batches for this rank: steps [first_step, steps_per_epoch) of the epoch, at
  most `steps` of them; eval() -> this rank's share of the held-out split,
  every example exactly once across ranks, or None when there is none. Both
  iterate Diagnosed datasets (a failure names the bad record) unless
  --skip_corrupt.
  """
  info: object
  steps_per_epoch: int
  train_epoch: callable
  eval: callable


def prepare(config: DataConfig, world: World) -> None:
  """Make the data set's files exist (digits, fashion_mnist: write them once, on one rank per node)."""
  if config.source == "digits" and world.local_rank == 0:
    digits.write(config.data_dir)
  if config.source == "fashion_mnist" and world.local_rank == 0:
    fashion_mnist.write(config.data_dir)


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
  """read(runs [(file, first, count)], named) -> dataset of (encoded, label, boxes),
  and `where` (file, or file:record N) after them when named."""
  files = tf.constant(split.files or [""])
  if source.kind == "images":
    labels = tf.constant(split.labels or [0], tf.int32)

    def read(runs, named):
      index = tf.constant([f for f, _, _ in runs], tf.int64)
      ds = tf.data.Dataset.from_tensor_slices(index)
      return ds.map(lambda i: (tf.io.read_file(files[i]), labels[i], tf.zeros([0, 4]))
                    + ((files[i],) if named else ()), num_parallel_calls=tf.data.AUTOTUNE)
    return read

  parse = records.parse_with_boxes if source.kind == "tfrecord" else _tfds_parser(source)

  def read(runs, named):
    columns = [tf.constant(c, tf.int64) for c in zip(*runs)] if runs else [tf.zeros([0], tf.int64)] * 3

    def one_run(i, first, count):
      ds = tf.data.TFRecordDataset(files[i], buffer_size=1 << 20).skip(first).take(count)
      if not named:
        return ds
      where = tf.strings.join([files[i], ":record "])
      return ds.enumerate(first).map(lambda k, r: (r, tf.strings.join([where, tf.strings.as_string(k)])))
    ds = tf.data.Dataset.from_tensor_slices(tuple(columns)).interleave(
        one_run, cycle_length=max(1, min(threads, len(runs))), block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if named:
      return ds.map(lambda r, where: (*parse(r), where), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
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


def _skipping(prepare, blank, num_classes: int, skipped: tf.Variable):
  """--skip_corrupt: prepare(encoded, boxes, seed) of the examples that pass the
  bad-input checks (a damaged image, input/preprocessing.looks_complete, or a
  label outside 0..num_classes-1); the rest are counted on stderr and flagged
  for the caller to drop (ok = False)."""
  def fn(encoded, label, boxes, where, seed):
    ok = preprocessing.looks_complete(encoded) & (label >= 0) & (label < num_classes)
    report = tf.cond(ok, lambda: tf.constant(0, tf.int64), lambda: skipped.assign_add(1))
    note = tf.cond(ok, tf.no_op, lambda: tf.print(tf.strings.join([
        "input: skipped ", where, f" (damaged image, or label outside 0..{num_classes - 1}); ",
        tf.strings.as_string(report), " skipped on this rank so far (--skip_corrupt)"]),
        output_stream=sys.stderr))
    with tf.control_dependencies([note]):
      image = tf.cond(ok, lambda: prepare(encoded, boxes, seed), lambda: blank)
    return image, label, ok
  return fn


def _labels_in_range(num_classes: int):
  """Batch map: stop on a label outside 0..num_classes-1 (one check per batch;
  the Diagnosed iterator then names the record)."""
  def fn(images, labels):
    ok = tf.reduce_all((labels >= 0) & (labels < num_classes))
    with tf.control_dependencies([tf.debugging.Assert(ok, [f"input: label outside 0..{num_classes - 1}"])]):
      return images, tf.identity(labels)
  return fn


class Diagnosed:
  """Batches of a dataset; when reading or preparing one fails, the error names
  the file (and record) behind it.

  Checking every example as it passes cost 5% of bench-input (and the names,
  carried along, 1%), so the fast path checks nothing per example: a failure
  surfaces at its own batch (deterministic order), and only then does
  `find(position)` look again at that batch's examples, by name and one at a
  time, or at the files themselves when the reading failed (a TFRecord CRC).
  """

  def __init__(self, dataset, find, first_position: int, batch_size: int):
    self.dataset, self.find, self.first, self.batch_size = dataset, find, first_position, batch_size

  def __iter__(self):
    done = 0
    try:
      for item in self.dataset:
        yield item
        done += 1
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
      emit(f"input: a batch failed ({_first_line(error)}); looking for the damaged file")
      found = self.find(self.first + done * self.batch_size, self.batch_size)
      if found is None:
        raise
      raise tf.errors.InvalidArgumentError(
          None, None, f"input: {found}; replace the file, or pass --skip_corrupt to skip it") from error


def _first_line(error) -> str:
  return (getattr(error, "message", None) or str(error)).strip().splitlines()[0][:200]


def _find_damage(named, files, start: int, count: int, check) -> str | None:
  """'<where> <what is wrong>' of the first bad example among positions
  [start, start + count) of `named` (enumerated (encoded, label, boxes, where)),
  or of the first unreadable file among `files` when reading itself fails."""
  try:
    for i, (encoded, label, boxes, where) in named.skip(start).take(count):
      problem = check(encoded, label, boxes, i)
      if problem:
        return f"{where.numpy().decode()} {problem}"
  except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
    pass  # the records themselves are damaged: find the file
  for path in files:
    try:
      for _ in tf.data.TFRecordDataset(path, buffer_size=1 << 20):
        pass
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
      return f"{path} is a damaged record file ({_first_line(error)})"
  return None


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
  else:  # digits, fashion_mnist: tiny images, no crops
    def train_prepare(encoded, boxes, s):
      return preprocessing.plain_image(encoded, info.image_shape, info.mean, info.std, dtype)
    eval_prepare = train_prepare
  blank = tf.zeros(info.image_shape, dtype)
  skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_skipped")
  read_train = _reader(source, source.train, threads)
  read_eval = _reader(source, source.eval, threads)

  def seed_of(base_seed, i):
    return tf.stack([tf.constant(base_seed, tf.int64), tf.cast(i, tf.int64)])

  def finish(ds, prepare, base_seed, batch, drop):
    """Enumerated examples -> batches of (images, labels)."""
    if not config.skip_corrupt:
      ds = ds.map(lambda i, ex: (prepare(ex[0], ex[2], seed_of(base_seed, i)), ex[1]),
                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      # A plain batch right after the map: tf.data fuses the two (map_and_batch_fusion)
      # and writes each image straight into its batch, one copy and one stage fewer;
      # a parallel batch is not fused (bench-input: 1,065-1,107 -> 1,112-1,144 images/s).
      ds = ds.batch(batch, drop_remainder=drop)
      return ds.map(_labels_in_range(info.num_classes))
    check = _skipping(prepare, blank, info.num_classes, skipped)
    ds = ds.map(lambda i, ex: check(*ex, seed_of(base_seed, i)), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    # What looks_complete cannot see (a bit flip inside the data) still fails
    # the decoder: dropped here, logged by tf.data as "Ignoring error".
    ds = ds.filter(lambda image, label, ok: ok).ignore_errors(log_warning=True)
    ds = ds.map(lambda image, label, ok: (image, label))
    if drop:
      ds = ds.repeat()  # refill what was skipped, so every rank still runs steps_per_epoch steps
    return ds.batch(batch, drop_remainder=drop, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

  def diagnosed(ds, named_examples, runs, split, prepare, base_seed, first, batch):
    """ds as a Diagnosed iterable (without --skip_corrupt, which drops bad input instead)."""
    if config.skip_corrupt:
      return ds

    def check(encoded, label, boxes, i):
      if not preprocessing.looks_complete(encoded):
        return "is a damaged image (truncated, or not an image)"
      if not 0 <= int(label) < info.num_classes:
        return f"has label {int(label)}, outside 0..{info.num_classes - 1}"
      try:
        prepare(encoded, boxes, seed_of(base_seed, i))
      except tf.errors.InvalidArgumentError as error:
        return f"cannot be decoded ({_first_line(error)})"
      return None
    files = [] if source.kind == "images" else [split.files[f] for f in dict.fromkeys(f for f, _, _ in runs)]
    return Diagnosed(ds, lambda start, count: _find_damage(named_examples(), files, start, count, check),
                     first, batch)

  def train_examples(epoch, runs, named):
    """This rank's examples of the epoch in training order, enumerated: the
    position is the augmentation seed, so skipping to a step is exact."""
    ds = read_train(runs, named)
    if source.kind != "images":  # image files are already in a per-example shared permutation
      ds = ds.shuffle(config.shuffle_buffer, seed=_mix(seed, epoch, world.rank, 1))
    return ds.enumerate()

  def train_epoch(epoch, first_step=0, count=None):
    order = sharding.epoch_order(len(source.train.files), seed, epoch)
    runs = sharding.segments(source.train.counts, order, world.rank * quota, quota)
    base_seed = _mix(seed, epoch, world.rank, 2)
    first = first_step * config.batch_size
    ds = finish(train_examples(epoch, runs, config.skip_corrupt).skip(first), train_prepare, base_seed,
                config.batch_size, drop=True)
    left = steps - first_step if count is None else min(count, steps - first_step)
    ds = _to_device(ds.take(left).prefetch(tf.data.AUTOTUNE).with_options(options))
    return diagnosed(ds, lambda: train_examples(epoch, runs, True), runs, source.train, train_prepare,
                     base_seed, first, config.batch_size)

  def eval_split():
    if not source.eval.total:
      return None
    start, length = sharding.rank_share(source.eval.total, world.size, world.rank)
    runs = sharding.segments(source.eval.counts, np.arange(len(source.eval.files)), start, length)
    ds = finish(read_eval(runs, config.skip_corrupt).enumerate(), eval_prepare, 0, config.eval_batch_size,
                drop=False)
    ds = _to_device(ds.prefetch(tf.data.AUTOTUNE).with_options(options))
    return diagnosed(ds, lambda: read_eval(runs, True).enumerate(), runs, source.eval, eval_prepare, 0, 0,
                     config.eval_batch_size)

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
