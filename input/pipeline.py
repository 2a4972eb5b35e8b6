"""tf.data pipelines: each rank reads its own share of one shared per-epoch shuffle, prepares the
next batch while the current step runs, and a given (seed, epoch) always yields the same batches,
so a resumed run continues exactly where it stopped.

Stages (Jia et al.'s input module; tensorflow/models and NVIDIA's ResNet-50): plan
(input/sharding.py: this rank's runs of files for the epoch) -> parallel interleave of the files ->
shuffle buffer of encoded records -> parallel map of parse + decode-and-crop + resize + flip +
normalise -> batch (drop_remainder in training) -> label check -> prefetch (to the GPU when there is
one). Bad input is looked for only when a batch fails, or, with --skip_corrupt, in every example, to
drop it (input/damage.py). Every parallel stage is AUTOTUNE inside a private thread pool of the cores
this rank may use (World.threads_per_rank), so the ranks of a node do not oversubscribe it.
"""
import abc
import dataclasses
import functools

import numpy as np
import tensorflow as tf

from comm.topology import World
from flags.config import DataConfig, DatasetInfo, Source
from input import ahead, damage, digits, fashion_mnist, preprocessing, records, sharding, sources
from progress import emit


class Input(abc.ABC):
  """What the training loop needs from the input.

  info: the data set as found on disk (classes, image shape, split sizes);
  train_epoch(epoch, first_step=0, count=None) -> iterable of (images, labels)
  batches of config.step_batch (all the micro-batches of one update) for this
  rank: steps [first_step, steps_per_epoch) of the epoch, at most `count` of
  them; eval() -> this rank's share of the held-out split,
  every example exactly once across ranks, or None when there is none. Both
  iterate damage.Diagnosed datasets (a failure names the bad record) unless
  --skip_corrupt.
  """

  def __init__(self, info: DatasetInfo, steps_per_epoch: int):
    self.info, self.steps_per_epoch = info, steps_per_epoch

  @abc.abstractmethod
  def train_epoch(self, epoch: int, first_step: int = 0, count: int | None = None):
    """Batches of steps [first_step, min(steps_per_epoch, first_step + count)) of the epoch."""

  def eval(self):
    """This rank's share of the held-out split; None: there is none."""
    return None

  def elastic_plan(self, epoch: int, history: tuple[sharding.Generation, ...]) -> "ElasticPlan":
    """Elastic: this rank's share of what the epoch left after its generations (history), for train_epoch."""
    raise NotImplementedError(f"{type(self).__name__} has no elastic plan")


@dataclasses.dataclass(frozen=True)
class ElasticPlan:
  """This rank's part of generation `generation` of an epoch: `steps` steps of the line
  positions `positions` (sorted; input/sharding.partition), after the first `skip` of them in
  its reading order (read by earlier generations of the same dealing: sharding.dealings)."""
  generation: int
  steps: int
  positions: np.ndarray
  skip: int = 0


# --elastic: every rank interleaves this many record files at a time, whatever its cores (the
# order a rank read in is replayed by the others when the world changes: _Files.elastic_plan).
ELASTIC_READERS = 4


def prepare(config: DataConfig, world: World, every_rank: bool = False) -> None:
  """Make the data set's files exist (digits, fashion_mnist: write them once, on one rank per
  node, which the others wait for at a barrier). every_rank (--elastic, where no collective
  may come before the elastic loop): each rank writes what is missing itself; shards are
  renamed into place whole, so two writers of one file leave it complete."""
  writer = every_rank or world.local_rank == 0
  if config.source is Source.DIGITS and writer:
    digits.write(config.data_dir)
  if config.source is Source.FASHION_MNIST and writer:
    fashion_mnist.write(config.data_dir)


def build(config: DataConfig, world: World, seed: int, dtype=tf.float32,
          scanned: sources.Scanned | None = None, elastic: bool = False) -> Input:
  """The Input of this rank; images come out as `dtype` (the model's compute dtype).

  elastic: the epoch may be dealt again mid-way to another world (Input.elastic_plan), so
  every rank reads with the same interleave width (ELASTIC_READERS), whatever its cores: any
  rank can then replay the order another rank read in.

  scanned: sources.scan(config) if the caller has it (train.py: from the flag check, so the files
  are read once); scanned here otherwise (digits: after prepare() has written them).
  """
  if config.source is Source.SYNTHETIC:
    return _Synthetic(config, seed, dtype)
  source = scanned or sources.scan(config)
  for path in source.damaged:
    emit(f"input: {path} is truncated; training on its complete records (--skip_corrupt)")
  files = _Files(config, world, seed, source, dtype, elastic)
  return ahead.NextEpoch(files) if config.prepare_next_epoch else files


def _options(world: World) -> tf.data.Options:
  options = tf.data.Options()
  options.deterministic = True  # same (seed, epoch) -> same batches, for exact resume
  options.threading.private_threadpool_size = world.threads_per_rank()
  options.threading.max_intra_op_parallelism = 1  # parallelism across examples, not inside one
  # No model-based autotuning (AUTOTUNE stages run at the pool's width): it held an epoch's end for 1-16 s
  # on 2 ranks and 2 cores, make train's epoch input 8.5-11.3 s in all, 0.1 s without (docs/time.md).
  options.autotune.enabled = False
  return options


def _reader(source: sources.Scanned, split: sources.Split, threads: int):
  """read(runs [(file, first, count)], named, keep=None) -> dataset of (encoded, label, boxes),
  and `where` (file, or file:record N) after them when named. keep (elastic training's later
  generations: input/sharding.partition): (offsets, mask), run k's records being positions
  offsets[k].. of a span of the line and mask[p] True for the span's positions to read."""
  files = tf.constant(split.files or [""])
  if source.source is Source.FOLDER:
    labels = tf.constant(split.labels or [0], tf.int32)

    def read(runs, named, keep=None):  # a file per example: the runs name the examples kept
      index = tf.constant([f for f, _, _ in runs], tf.int64)
      ds = tf.data.Dataset.from_tensor_slices(index)
      return ds.map(lambda i: (tf.io.read_file(files[i]), labels[i], tf.zeros([0, 4]))
                    + ((files[i],) if named else ()), num_parallel_calls=tf.data.AUTOTUNE)
    return read

  parse = _tfds_parser(source) if source.source is Source.TFDS else records.parse_with_boxes

  def read(runs, named, keep=None):
    def one_run(i, first, count, offset):
      ds = tf.data.TFRecordDataset(files[i], buffer_size=1 << 20).skip(first).take(count)
      if named:
        where = tf.strings.join([files[i], ":record "])
        ds = ds.enumerate(first).map(lambda k, r: (r, tf.strings.join([where, tf.strings.as_string(k)])))
      return _kept(ds, offset, count, keep)
    ds = _interleave(runs, keep, one_run, threads)
    if named:
      return ds.map(lambda r, where: (*parse(r), where), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
  return read


def _interleave(runs, keep, one_run, threads: int):
  """one_run(file, first, count, offset in the span) of every run, interleaved one record at a
  time from up to `threads` runs (deterministic: the order is a function of the runs alone)."""
  offsets = keep[0] if keep else _offsets(runs)
  columns = ([tf.constant(c, tf.int64) for c in zip(*runs)] + [tf.constant(offsets, tf.int64)]
             if runs else [tf.zeros([0], tf.int64)] * 4)
  return tf.data.Dataset.from_tensor_slices(tuple(columns)).interleave(
      one_run, cycle_length=max(1, min(threads, len(runs))), block_length=1,
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _offsets(runs) -> list[int]:
  """Where each run starts in the span of the line the runs cover, end to end."""
  return np.concatenate([[0], np.cumsum([n for _, _, n in runs])[:-1]]).astype(np.int64).tolist()


def _kept(ds, offset, count, keep):
  """The records of ds (a run of `count` at `offset` in keep's span) that keep's mask keeps."""
  if not keep:
    return ds
  mask = keep[1]
  both = tf.data.Dataset.zip((ds, tf.data.Dataset.range(offset, offset + count)))
  return both.filter(lambda record, p: mask[p]).map(lambda record, p: record)


def _tfds_parser(source: sources.Scanned):
  """serialized tfds record -> (encoded image, 0-based label, no boxes)."""
  import tensorflow_datasets as tfds
  info = sources.tfds_builder(source.tfds_name, source.data_dir).info
  image_key, label_key = info.supervised_keys or ("image", "label")

  def parse(serialized):
    example = info.features.deserialize_example(serialized, decoders={image_key: tfds.decode.SkipDecoding()})
    return example[image_key], tf.cast(example[label_key], tf.int32), tf.zeros([0, 4])
  return parse


class _Files(Input):
  """A data set in files (digits, imagenet, folder, tfds): this rank's share of each epoch and the split."""

  def __init__(self, config: DataConfig, world: World, seed: int, source: sources.Scanned, dtype,
               elastic: bool = False):
    super().__init__(source.info, source.info.num_train // config.global_batch)
    self.config, self.world, self.seed, self.source, self.dtype = config, world, seed, source, dtype
    self.quota = self.steps_per_epoch * config.step_batch  # examples this rank trains on per epoch
    self.options = _options(world)
    threads = world.threads_per_rank()
    self.readers = ELASTIC_READERS if elastic else threads
    self.read_train = _reader(source, source.train, self.readers)
    self.read_eval = _reader(source, source.eval, threads)
    self.blank = tf.zeros(self.info.image_shape, dtype)
    self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_skipped")
    self._held_out = None  # eval()'s dataset, built at the first evaluation

  def train_prepare(self, encoded, boxes, s):
    """(encoded image, boxes (n, 4), stateless seed (2,)) -> training image (H, W, C) in self.dtype."""
    info = self.info
    if info.inception_crop:
      return preprocessing.train_image(encoded, boxes, s, info.image_shape[0], info.mean, info.std, self.dtype)
    # digits, fashion_mnist: tiny images, no crops
    return preprocessing.plain_image(encoded, info.image_shape, info.mean, info.std, self.dtype)

  def eval_prepare(self, encoded, boxes, s):
    """The evaluation image: a central crop, no augmentation (digits: as in training)."""
    return preprocessing.held_out_image(encoded, self.info, self.dtype)

  def train_epoch(self, epoch, first_step=0, count=None, plan=None):
    config, seed, rank = self.config, self.seed, self.world.rank
    if plan is None:
      order = sharding.epoch_order(len(self.source.train.files), seed, epoch)
      runs, keep, generation = sharding.segments(self.source.train.counts, order, rank * self.quota, self.quota), None, 0
      steps = self.steps_per_epoch
    else:
      (runs, keep), generation, steps = self._runs_of(epoch, plan.positions), plan.generation, plan.steps
    base_seed = _mix(seed, epoch, rank, 2, *([generation] if generation else []))
    first = first_step * config.step_batch + (plan.skip if plan else 0)
    examples = lambda named: self._train_examples(epoch, runs, named, keep, generation)
    ds = self._finish(examples(config.skip_corrupt).skip(first), self.train_prepare, base_seed, config.step_batch,
                      drop=True)
    left = steps - first_step if count is None else min(count, steps - first_step)
    ds = _to_device(ds.take(left).prefetch(tf.data.AUTOTUNE).with_options(self.options))
    return self._diagnosed(ds, lambda: examples(True), runs, self.source.train, self.train_prepare, base_seed,
                           first, config.step_batch)

  def elastic_plan(self, epoch, history):
    """A new world's generation: the epoch's rest dealt again; after a change of the step batch
    in the same world, this rank's share read on from where it stopped, at the new step batch
    (nothing replayed: the change costs what a new dataset costs)."""
    size, step_batch = self.world.size, self.config.step_batch
    dealt = sharding.dealings(history, self.readers)
    if dealt and sharding.reads_on(history[-1], size, self.readers, self.readers):
      first, gens = dealt[-1]
      _, shares = sharding.partition(self._remaining(epoch, history[:first]), size, gens[0].step_batch)
      read = sum(g.steps * g.step_batch for g in gens)
      share = shares[self.world.rank]
      return ElasticPlan(first, (len(share) - read) // step_batch, share, skip=read)
    steps, shares = sharding.partition(self._remaining(epoch, history), size, step_batch)
    return ElasticPlan(len(history), steps, shares[self.world.rank])

  def _remaining(self, epoch, history) -> np.ndarray:
    """The line positions the epoch has not trained on after the generations of history: each
    dealing's ranks are dealt their shares as elastic_plan dealt them, and each rank's first
    examples (the dealing's steps x step_batch), in its reading order (replayed), are gone."""
    left = np.arange(self.source.train.total)
    for first, gens in sharding.dealings(history, self.readers):
      g, count = gens[0], sum(x.steps * x.step_batch for x in gens)
      _, shares = sharding.partition(left, g.size, g.step_batch)
      read = [self._read_order(epoch, rank, first, share, g.readers or self.readers)[:count]
              for rank, share in enumerate(shares)]
      left = np.setdiff1d(left, np.concatenate(read)) if read else left
    return left

  def _read_order(self, epoch, rank, generation, positions, readers) -> np.ndarray:
    """The line positions `positions`, in the order rank `rank` trains on them in that
    generation: train_epoch's interleave and shuffle replayed on the positions alone (their
    order depends on the seeds and the counts, never on the records' contents)."""
    if self.source.source is Source.FOLDER:  # files are read in the order of the runs: unshuffled
      return np.asarray(positions)
    (runs, keep), lo = self._runs_of(epoch, positions), int(positions[0]) if len(positions) else 0
    spans = _interleave(runs, keep, lambda i, first, count, offset: _kept(
        tf.data.Dataset.range(offset, offset + count), offset, count, keep), readers)
    spans = spans.shuffle(self.config.shuffle_buffer, seed=self._shuffle_seed(epoch, rank, generation))
    return np.fromiter(spans.as_numpy_iterator(), np.int64, len(positions)) + lo

  def _runs_of(self, epoch, positions) -> tuple[list, tuple | None]:
    """(runs of files covering the sorted line positions' span, keep (offsets, mask) where it holds others)."""
    if not len(positions):
      return [], None
    split = self.source.train
    order = sharding.epoch_order(len(split.files), self.seed, epoch)
    lo, span = int(positions[0]), int(positions[-1]) - int(positions[0]) + 1
    runs = sharding.segments(split.counts, order, lo, span)
    if span == len(positions):
      return runs, None
    mask = np.zeros(span, bool)
    mask[np.asarray(positions) - lo] = True
    if self.source.source is Source.FOLDER:  # a run per example: keep the runs themselves
      return [run for run, kept in zip(runs, mask) if kept], None
    return runs, (_offsets(runs), tf.constant(mask))

  def _shuffle_seed(self, epoch, rank, generation):
    return _mix(self.seed, epoch, rank, 1, *([generation] if generation else []))

  def eval(self):
    """This rank's held-out batches (None: no split), built at the first evaluation, iterated at each."""
    if self._held_out is None:
      self._held_out = [self._build_eval()]
    return self._held_out[0]

  def _build_eval(self):
    split, config = self.source.eval, self.config
    if not split.total:
      return None
    start, length = sharding.rank_share(split.total, self.world.size, self.world.rank)
    runs = sharding.segments(split.counts, np.arange(len(split.files)), start, length)
    ds = self._finish(self.read_eval(runs, config.skip_corrupt).enumerate(), self.eval_prepare, 0,
                      config.eval_batch_size, drop=False)
    ds = _to_device(ds.prefetch(tf.data.AUTOTUNE).with_options(self.options))
    return self._diagnosed(ds, lambda: self.read_eval(runs, True).enumerate(), runs, split, self.eval_prepare,
                           0, 0, config.eval_batch_size)

  def _train_examples(self, epoch, runs, named, keep=None, generation=0):
    """This rank's examples of the epoch (or of an elastic generation of it) in training
    order, enumerated: the position is the augmentation seed, so skipping to a step is exact."""
    ds = self.read_train(runs, named, keep)
    if self.source.source is not Source.FOLDER:  # image files are already in a per-example shared permutation
      ds = ds.shuffle(self.config.shuffle_buffer, seed=self._shuffle_seed(epoch, self.world.rank, generation))
    return ds.enumerate()

  def _finish(self, ds, prepare, base_seed, batch, drop):
    """Enumerated examples -> batches of (images, labels)."""
    num_classes = self.info.num_classes
    if not self.config.skip_corrupt:
      ds = ds.map(lambda i, ex: (prepare(ex[0], ex[2], _seed_of(base_seed, i)), ex[1]),
                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      # A plain batch right after the map: tf.data fuses the two (map_and_batch_fusion)
      # and writes each image straight into its batch, one copy and one stage fewer;
      # a parallel batch is not fused (bench-input: 1,065-1,107 -> 1,112-1,144 images/s).
      ds = ds.batch(batch, drop_remainder=drop)
      return ds.map(damage.labels_in_range(num_classes))
    check = damage.skipping(prepare, self.blank, num_classes, self.skipped)
    ds = ds.map(lambda i, ex: check(*ex, _seed_of(base_seed, i)), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    # What looks_complete cannot see (a bit flip inside the data) still fails
    # the decoder: dropped here, logged by tf.data as "Ignoring error".
    ds = ds.filter(lambda image, label, ok: ok).ignore_errors(log_warning=True)
    ds = ds.map(lambda image, label, ok: (image, label))
    if drop:
      ds = ds.repeat()  # refill what was skipped, so every rank still runs steps_per_epoch steps
    return ds.batch(batch, drop_remainder=drop, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

  def _diagnosed(self, ds, named_examples, runs, split, prepare, base_seed, first, batch):
    """ds as a Diagnosed iterable (without --skip_corrupt, which drops bad input instead)."""
    if self.config.skip_corrupt:
      return ds
    # the record files these runs read, where a failed read looks for the damage
    files = [] if self.source.source is Source.FOLDER else [
        split.files[f] for f in dict.fromkeys(f for f, *_ in runs)]
    check = functools.partial(self._problem, prepare, base_seed)  # (encoded, label, boxes, i) -> problem
    return damage.Diagnosed(ds, lambda start, count: damage.find(named_examples(), files, start, count, check),
                     first, batch)

  def _problem(self, prepare, base_seed, encoded, label, boxes, i) -> str | None:
    """What is wrong with example i (eager tensors), or None."""
    num_classes = self.info.num_classes
    if not preprocessing.looks_complete(encoded):
      return "is a damaged image (truncated, or not an image)"
    if not 0 <= int(label) < num_classes:
      return f"has label {int(label)}, outside 0..{num_classes - 1}"
    try:
      prepare(encoded, boxes, _seed_of(base_seed, i))
    except tf.errors.InvalidArgumentError as error:
      return f"cannot be decoded ({damage.first_line(error)})"
    return None


def _seed_of(base_seed, i):
  """The stateless seed (2,) int64 of example i of a stream."""
  return tf.stack([tf.constant(base_seed, tf.int64), tf.cast(i, tf.int64)])


def _mix(*numbers) -> int:
  """A 62-bit seed from integers, the same on every rank that passes the same numbers."""
  return int(np.random.default_rng(list(numbers)).integers(1 << 62))


def _to_device(ds):
  """Prefetch onto the GPU when there is one: the host-to-device copy overlaps the step."""
  gpus = tf.config.list_logical_devices("GPU")
  if not gpus:
    return ds
  return ds.apply(tf.data.experimental.prefetch_to_device(gpus[0].name, buffer_size=2))


class _Synthetic(Input):
  """One fixed random batch, repeated: measures the model and the allreduce, never the input."""

  def __init__(self, config: DataConfig, seed: int, dtype):
    info = config.dataset
    super().__init__(info, info.num_train // config.global_batch)
    self.world_size, self.step_batch = config.global_batch // config.step_batch, config.step_batch
    rng = np.random.default_rng(seed)
    images = tf.constant(rng.standard_normal((config.step_batch, *info.image_shape), np.float32), dtype)
    labels = tf.constant(rng.integers(0, info.num_classes, config.step_batch, np.int32))
    self.batch = tf.data.Dataset.from_tensors((images, labels))

  def train_epoch(self, epoch, first_step=0, count=None, plan=None):
    steps = self.steps_per_epoch if plan is None else plan.steps
    left = steps - first_step if count is None else min(count, steps - first_step)
    return self.batch.repeat(left)

  def elastic_plan(self, epoch, history):
    """The steps what the epoch has left makes for this world (the examples have no positions)."""
    left = self.info.num_train - sum(g.size * g.step_batch * g.steps for g in history)
    return ElasticPlan(len(history), left // (self.world_size * self.step_batch), np.zeros([0], np.int64))
