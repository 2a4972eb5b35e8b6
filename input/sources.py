"""Where the examples of a data set are: its files, how many records each holds,
and its metadata, found once before training (every rank, cheaply).

Formats: TFRecords in ImageNet's layout (`imagenet`, and the digits set), an
image folder in ImageNet's layout (`folder`: train/<wnid>/*.JPEG, val/<wnid>/...),
and a tensorflow-datasets set prepared in --data_dir (`tfds:<name>`). Every
problem found here is a flags.config.ConfigError naming the flag and the fix,
raised before the model is built.
"""
import dataclasses
import json
import os
import re

import tensorflow as tf

from flags.config import ConfigError, DatasetInfo, Source
from input import records
from input.datasets import IMAGENET_MEAN, IMAGENET_STD

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png")
FOLDER_SPLITS = {"train": ("train",), "eval": ("val", "validation")}
INFO_FILE = "dataset_info.json"  # written by input.convert: classes and record counts
LABEL_PROBES = 8  # files whose first record's label is checked before training
# A shard's name: ImageNet's train-00002-of-01024 (input/records.shard_name) and tfds's
# fashion_mnist-train.tfrecord-00000-of-00001 alike; a writer's .tmp-PID file does not match.
SHARD = re.compile(r"^(?P<prefix>.+)-(?P<index>\d+)-of-(?P<count>\d+)$")
NAMED_MISSING = 5  # missing shards named in full; the rest counted


@dataclasses.dataclass(frozen=True)
class Split:
  """files: paths; counts: records in each (1 for an image file); labels: the
  0-based label of each image file (folder only, else empty)."""
  files: tuple[str, ...] = ()
  counts: tuple[int, ...] = ()
  labels: tuple[int, ...] = ()

  @property
  def total(self) -> int:
    return sum(self.counts)


@dataclasses.dataclass(frozen=True)
class Scanned:
  """What --data_dir holds. source: how to read it, TFRecords in ImageNet's
  layout (digits, imagenet), one image file per example (folder) or tfds's
  TFRecords read with tfds's feature spec (tfds); damaged: files whose
  unreadable tail is left out (--skip_corrupt)."""
  info: DatasetInfo
  source: Source
  train: Split
  eval: Split
  tfds_name: str = ""
  data_dir: str = ""
  damaged: tuple[str, ...] = ()


def imagenet_like(name, num_classes, image_size, num_train, num_eval, crop=True) -> DatasetInfo:
  return DatasetInfo(name=name, num_classes=num_classes, image_shape=(image_size, image_size, 3),
                     num_train=num_train, num_eval=num_eval, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                     on_disk=True, inception_crop=crop)


def scan(config) -> Scanned:
  """What the files of a DataConfig hold: every file's record count (the writer's record index where
  a shard's size matches it, else its headers walked). train.py scans once, in the flag check, and
  hands the result to input.pipeline.build."""
  if config.source is Source.FOLDER:
    return _folder(config)
  if config.source is Source.TFDS:
    return _tfds(config)
  return _tfrecords(config)


# --------------------------------------------------------------- TFRecords --

def missing_shards(paths) -> list[str]:
  """The shards that the -NNNNN-of-MMMMM names of `paths` say exist but are absent from them:
  sorted base names, [] for a complete set (pure: names only, so a rank finds a gap in its copy of
  the set before it counts a record). Names without -of- say nothing and are left out."""
  sets: dict[tuple, set[int]] = {}
  for path in paths:
    m = SHARD.match(os.path.basename(path))
    if m:
      key = (os.path.dirname(path), m["prefix"], len(m["index"]), m["count"])
      sets.setdefault(key, set()).add(int(m["index"]))
  missing = []
  for (_, prefix, width, count), present in sorted(sets.items()):
    missing += [f"{prefix}-{i:0{width}d}-of-{count}" for i in range(int(count)) if i not in present]
  return missing


def _missing_sentence(data_dir, missing, count, where, again) -> str:
  """'--data_dir=D is missing a, b ... of the M shards ...; copy ... or ...'. count: the set's shards;
  where: where the set was made; again: how to make the missing shards."""
  named = ", ".join(missing[:NAMED_MISSING]) + (f" and {len(missing) - NAMED_MISSING} more"
                                                if len(missing) > NAMED_MISSING else "")
  what, it = (named, "it") if len(missing) == 1 else (f"{len(missing)} shards: {named}", "them")
  return (f"--data_dir={data_dir} is missing {what} of the {count:,} shards of its set; copy "
          f"{it} from where the set was {where}, or {again}.")


def _count(paths, flag_hint, skip_corrupt, damaged, index):
  counts = []
  for path in paths:
    try:
      counts.append(records.indexed_count(path, index))
    except records.TruncatedRecordFile as e:
      if not skip_corrupt:
        raise ConfigError(f"{e}; re-create it ({flag_hint}) or pass --skip_corrupt to train on "
                          "the records before the damage.") from None
      damaged.append(path)
      counts.append(e.complete)
  return counts


def _tfrecords(config) -> Scanned:
  d = config.data_dir
  train = records.shard_paths(d, "train")
  if not train:
    raise ConfigError(
        f"--data_dir={d} holds no train-*-of-* TFRecord files for --dataset={config.dataset.name}; "
        "point --data_dir at them, or convert an image folder with "
        f"`python -m input.convert --src FOLDER --dst {d}`.")
  evals = records.shard_paths(d, "eval")
  hint = "python -m input.convert resumes and rewrites missing shards"
  missing = missing_shards(train) or missing_shards(evals)
  if missing:
    count = int(SHARD.match(missing[0])["count"])
    raise ConfigError(_missing_sentence(d, missing, count, "written", f"write the set again ({hint})"))
  damaged, index = [], records.read_index(d)
  train_counts = _count(train, hint, config.skip_corrupt, damaged, index)
  eval_counts = _count(evals, hint, config.skip_corrupt, damaged, index)
  meta = {}
  if os.path.exists(os.path.join(d, INFO_FILE)):
    with open(os.path.join(d, INFO_FILE)) as fh:
      meta = json.load(fh)
  if config.source in (Source.DIGITS, Source.FASHION_MNIST):
    info = dataclasses.replace(config.dataset, num_train=sum(train_counts), num_eval=sum(eval_counts))
  else:
    info = imagenet_like(config.dataset.name, meta.get("num_classes", config.dataset.num_classes),
                         config.image_size, sum(train_counts), sum(eval_counts))
  _check_labels([p for p, c in zip(train + evals, train_counts + eval_counts) if c], info.num_classes)
  return Scanned(info=info, source=config.source,
                train=Split(tuple(train), tuple(train_counts)),
                eval=Split(tuple(evals), tuple(eval_counts)), damaged=tuple(damaged))


def _check_labels(paths, num_classes):
  """The first record's label of a few files lies in 0..num_classes-1.

  A full check would read the whole data set; the pipeline also checks every
  batch's labels as it reads, and names the record when one fails.
  """
  step = max(1, len(paths) // LABEL_PROBES)
  for path in paths[::step][:LABEL_PROBES]:
    try:
      serialized = next(iter(tf.data.TFRecordDataset(path).take(1)))
    except tf.errors.DataLossError:
      raise ConfigError(f"{path} is damaged: its first record fails its checksum; re-create it "
                        "(python -m input.convert resumes and rewrites missing shards).") from None
    label = int(records.parse_example(serialized)[1])
    if not 0 <= label < num_classes:
      raise ConfigError(
          f"{path} holds label {label + records.LABEL_OFFSET} (stored 1-based), outside 1..{num_classes} "
          f"for --dataset; the files must follow the layout's 1-based image/class/label, and a set "
          f"with other classes needs its {INFO_FILE} (python -m input.convert writes it).")


# ------------------------------------------------------------ image folder --

def _images_in(directory):
  return sorted(f for f in os.listdir(directory) if f.lower().endswith(IMAGE_EXTENSIONS))


def folder_splits(root: str, flag: str = "--data_dir") -> tuple[list[str], Split, Split]:
  """(classes = sorted wnids of train/, train Split, eval Split) of an ImageNet-layout folder."""
  train_dir = os.path.join(root, "train")
  classes = sorted(c for c in os.listdir(train_dir) if os.path.isdir(os.path.join(train_dir, c))) \
      if os.path.isdir(train_dir) else []
  if not classes:
    raise ConfigError(
        f"{flag}={root} has no class subfolders under train/; lay the images out as "
        "train/<wnid>/*.JPEG (and val/<wnid>/*.JPEG), one folder per class.")
  index = {c: i for i, c in enumerate(classes)}

  def split(directory):
    files, labels = [], []
    for wnid in sorted(os.listdir(directory)):
      if not os.path.isdir(os.path.join(directory, wnid)):
        continue
      if wnid not in index:
        raise ConfigError(
            f"{flag}={root}: {directory}/{wnid} is a class that train/ does not have; "
            "evaluation classes must be a subset of the training classes.")
      names = _images_in(os.path.join(directory, wnid))
      files += [os.path.join(directory, wnid, n) for n in names]
      labels += [index[wnid]] * len(names)
    return Split(tuple(files), (1,) * len(files), tuple(labels))

  train = split(train_dir)
  if not train.total:
    raise ConfigError(f"{flag}={root}: the class folders under train/ hold no "
                      f"{'/'.join(IMAGE_EXTENSIONS)} images.")
  eval_dirs = [os.path.join(root, n) for n in FOLDER_SPLITS["eval"] if os.path.isdir(os.path.join(root, n))]
  return classes, train, split(eval_dirs[0]) if eval_dirs else Split()


def _folder(config) -> Scanned:
  classes, train, evals = folder_splits(config.data_dir)
  info = imagenet_like("folder", len(classes), config.image_size, train.total, evals.total)
  return Scanned(info=info, source=Source.FOLDER, train=train, eval=evals)


# ----------------------------------------------------- tensorflow-datasets --

def tfds_builder(name, data_dir):
  """The tfds builder of a set prepared in data_dir (never downloads)."""
  import tensorflow_datasets as tfds
  return tfds.builder(name, data_dir=data_dir, try_gcs=False)


def _tfds(config) -> Scanned:
  name, d = config.tfds_name, config.data_dir
  fix = (f"prepare it there first (`tfds build {name} --data_dir={d}`, with the archives "
         "in --manual_dir for imagenet2012) or point --data_dir at the tfds data directory.")
  try:
    builder = tfds_builder(name, d)
  except Exception as e:  # tfds raises several types for an unknown name or an unreadable dir
    raise ConfigError(f"--dataset=tfds:{name} cannot be loaded from --data_dir={d} ({type(e).__name__}: "
                      f"{str(e).splitlines()[0][:200]}); {fix}") from None
  splits = builder.info.splits
  if "train" not in splits or not builder.info.splits["train"].num_examples:
    raise ConfigError(f"--dataset=tfds:{name} is not prepared in --data_dir={d}; {fix}")
  if str(builder.info.file_format.value) != "tfrecord":
    raise ConfigError(f"--dataset=tfds:{name} in --data_dir={d} is stored as {builder.info.file_format.value}; "
                      f"rebuild it as TFRecords (`tfds build {name} --file_format=tfrecord`).")
  keys = builder.info.supervised_keys or ("image", "label")
  num_classes = builder.info.features[keys[1]].num_classes

  def split(split_name):
    if split_name not in splits:
      return Split()
    instructions = splits[split_name].file_instructions
    return Split(tuple(os.fspath(i.filename) for i in instructions),
                 tuple(int(i.take) for i in instructions))

  eval_name = next((s for s in ("validation", "test") if s in splits), None)
  for split_name in [s for s in ("train", eval_name) if s]:
    # tfds's metadata names every shard and its records (file_instructions leaves empty ones out):
    # each that holds records must be there.
    shards = splits[split_name]
    expected = [os.fspath(p) for p, n in zip(shards.filepaths, shards.shard_lengths) if n]
    present = {os.path.basename(p) for p in tf.io.gfile.glob(os.path.join(os.path.dirname(expected[0]), "*"))} \
        if expected else set()
    missing = [os.path.basename(p) for p in expected if os.path.basename(p) not in present]
    if missing:
      raise ConfigError(_missing_sentence(d, missing, len(expected), "prepared",
                                          f"prepare it again (`tfds build {name} --data_dir={d}`)"))
  train, evals = split("train"), split(eval_name) if eval_name else Split()
  info = imagenet_like(config.dataset.name, num_classes, config.image_size, train.total, evals.total)
  return Scanned(info=info, source=Source.TFDS, train=train, eval=evals, tfds_name=name, data_dir=d)
