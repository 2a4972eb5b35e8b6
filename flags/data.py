"""Flags of the input: which data set, where it lives, how it is batched."""
import dataclasses
import os

from absl import flags as absl_flags

from comm.topology import World
from flags.config import ConfigError, DataConfig, DatasetInfo, Source
from input import fashion_mnist, sources
from input.datasets import DATASETS, IMAGENET

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The sources read from --data_dir, by the name --dataset gives them (tfds:<name>).
SCANNED = {s.value: s for s in Source if s.scanned}
CHOICES = sorted(DATASETS) + [f"{name}:<name>" if s is Source.TFDS else name for name, s in SCANNED.items()]


def define() -> None:
  absl_flags.DEFINE_string(
      "dataset", "digits",
      f"Data set: {', '.join(CHOICES)}. 'digits' is scikit-learn's "
      "handwritten digits written once as TFRecords; 'fashion_mnist' is Zalando's 28x28 grey clothing "
      "images, 10 classes, 60,000 to train on and its 10,000 test images held out (Debian's "
      "dataset-fashion-mnist, which make setup installs), written the same way; 'synthetic' is a fixed "
      "in-memory batch "
      "(no input cost, for benchmarks); 'imagenet' reads TFRecords in ImageNet's layout "
      "(train-00000-of-01024 ..., validation-...) from --data_dir; 'folder' reads "
      "--data_dir/train/<wnid>/*.JPEG and val/<wnid>/*.JPEG; 'tfds:<name>' reads a "
      "tensorflow-datasets set (e.g. tfds:imagenet2012) prepared in --data_dir.")
  absl_flags.DEFINE_string(
      "data_dir", "",
      "Directory of the data set's files. Empty: the default place for the data set "
      "(digits, fashion_mnist: data/<name> in the repository, written on first use).")
  absl_flags.DEFINE_integer(
      "batch_size", 32, "Images per rank per step (the BatchNorm batch). "
      "The global batch is this times the number of ranks.")
  absl_flags.DEFINE_integer(
      "global_batch_size", 0, "If set, the global batch instead of --batch_size: "
      "must divide evenly by the number of ranks times --accumulation_steps.")
  absl_flags.DEFINE_integer(
      "accumulation_steps", 1,
      "Gradient accumulation: forward and backward passes of --batch_size images per rank before "
      "one exchange and one update, so the global batch is batch x ranks x this on fewer ranks "
      "(BatchNorm still normalises each --batch_size micro-batch; the LR rule, warmup and epochs "
      "count the global batch).")
  absl_flags.DEFINE_enum(
      "batch_policy", "fixed", ["fixed", "adaptive"],
      "fixed: the global batch the batch flags give, for the whole run. adaptive: a goodput controller "
      "(training/adaptive/batch_control.py) re-picks the accumulation steps every --batch_decide_every updates and at "
      "each world change, the K that makes the most base-batch progress a second (AdaScale's gain over the "
      "update time, fitted as the run goes), moving only for a predicted gain over 5% across the noise "
      "scale's spread; --accumulation_steps is where it starts (on one rank at least 2: its noise scale "
      "compares micro-batches). Needs --lr_scaling=adascale.")
  absl_flags.DEFINE_integer(
      "max_global_batch", 0, "--batch_policy=adaptive: the largest global batch it may choose "
      "(0: 8 x the starting global batch).")
  absl_flags.DEFINE_integer(
      "batch_decide_every", 50, "--batch_policy=adaptive: updates between its decisions (a decision "
      "costs one broadcast; a change rebuilds the input, not the step).")
  absl_flags.DEFINE_integer("eval_batch_size", 0, "Images per rank per evaluation step "
                            "(0: same as the training batch per rank).")
  absl_flags.DEFINE_integer("shuffle_buffer", 10_000, "Examples in each rank's shuffle buffer.")
  absl_flags.DEFINE_boolean(
      "prepare_next_epoch", True, "Build the next epoch's input and read its first batch in the "
      "background while this epoch trains, so an epoch's end does not wait for it (false: one "
      "pipeline, and one shuffle buffer, alive at a time).")
  absl_flags.DEFINE_integer(
      "image_size", 224, "Side of the square images fed to the model for imagenet, folder and "
      "tfds sets: random crops resized to it in training, a central crop in evaluation.")
  absl_flags.DEFINE_boolean(
      "skip_corrupt", False, "Skip damaged images and truncated TFRecord files, counting them "
      "in the log, instead of stopping with an error that names the file.")


def _dataset(f) -> tuple[DatasetInfo, Source, str]:
  """(nominal info, source, tfds name) of --dataset."""
  if f.dataset in DATASETS:
    return DATASETS[f.dataset], Source(f.dataset), ""
  name, _, tfds_name = f.dataset.partition(":")
  source = SCANNED.get(name)
  if source is None or bool(tfds_name) != (source is Source.TFDS):
    raise ConfigError(f"--dataset={f.dataset!r} is unknown; choose one of "
                      f"{', '.join(CHOICES)}.")
  if not f.data_dir:
    raise ConfigError(f"--dataset={f.dataset} reads its files from --data_dir; pass "
                      f"--data_dir=/path/to/{'tensorflow_datasets' if tfds_name else 'imagenet'}.")
  if f.image_size < 8:
    raise ConfigError(f"--image_size={f.image_size} is too small; pass at least 8, e.g. --image_size=224.")
  info = dataclasses.replace(IMAGENET, name=f.dataset, image_shape=(f.image_size, f.image_size, 3))
  return info, source, tfds_name


def fits(info: DatasetInfo, batch_size: int, world: World, accumulation_steps: int = 1) -> str | None:
  """Why this batch and these ranks cannot run on the data set, or None."""
  global_batch = batch_size * world.size * accumulation_steps
  if global_batch > info.num_train:
    times = f" x {accumulation_steps} accumulation steps" if accumulation_steps > 1 else ""
    return (f"The global batch {global_batch} ({batch_size} per rank x {world.size} ranks{times}) exceeds the "
            f"{info.num_train} training examples of {info.name}; lower --batch_size.")
  if info.num_eval and world.size > info.num_eval:
    return (f"{world.size} ranks exceed the {info.num_eval} examples of {info.name}'s held-out split, "
            f"so some ranks would evaluate nothing; run with at most {info.num_eval} ranks.")
  return None


def check(config: DataConfig, world: World) -> tuple[str | None, sources.Scanned | None]:
  """(problem, scanned): read what --data_dir holds (scanned sources) and check the
  batch against it. problem: a sentence naming the flag and the fix, or None;
  scanned: the files found, for input.pipeline.build (None for the other sources,
  or with a problem). Runs on every rank before training."""
  if config.source is Source.FASHION_MNIST:
    return fashion_mnist.check(config.data_dir), None
  if not config.source.scanned:
    return None, None
  try:
    scanned = sources.scan(config)
  except ConfigError as e:
    return str(e), None
  problem = fits(scanned.info, config.batch_size, world, config.accumulation_steps)
  return problem, None if problem else scanned


def build(f, world: World, later_world: bool = False) -> DataConfig:
  info, source, tfds_name = _dataset(f)
  k = f.accumulation_steps
  if k < 1:
    raise ConfigError(f"--accumulation_steps={k} must be at least 1 (1: no accumulation), "
                      "e.g. --accumulation_steps=4.")

  if f.global_batch_size:
    if f.global_batch_size <= 0:
      raise ConfigError(f"--global_batch_size={f.global_batch_size} must be positive, e.g. --global_batch_size=256.")
    per_update = world.size * k  # micro-batches in one update, over all ranks
    if f.global_batch_size % per_update:
      what = f"{world.size} ranks" + (f" x {k} accumulation steps" if k > 1 else "")
      raise ConfigError(
          f"--global_batch_size={f.global_batch_size} does not divide by the {what}; "
          f"pass a multiple of {per_update}, "
          f"e.g. --global_batch_size={max(1, f.global_batch_size // per_update) * per_update}.")
    batch_size = f.global_batch_size // per_update
  else:
    if f.batch_size <= 0:
      raise ConfigError(f"--batch_size={f.batch_size} must be positive (images per rank), e.g. --batch_size=32.")
    batch_size = f.batch_size
  global_batch = batch_size * world.size * k
  problem = None if source.scanned else fits(info, batch_size, world, k)
  if problem:  # scanned sources are checked against their files in check()
    raise ConfigError(problem)
  if f.eval_batch_size < 0:
    raise ConfigError(f"--eval_batch_size={f.eval_batch_size} is negative; pass 0 or a positive number.")
  max_global = _check_batch_policy(f, global_batch, batch_size, world, later_world)
  if f.shuffle_buffer <= 0:
    raise ConfigError(f"--shuffle_buffer={f.shuffle_buffer} must be positive, e.g. --shuffle_buffer=10000.")

  data_dir = f.data_dir
  create_data_dir = info.on_disk and not data_dir
  if create_data_dir:
    data_dir = os.path.join(REPO_ROOT, "data", info.name)
  data_dir = os.path.abspath(os.path.expanduser(data_dir)) if data_dir else ""
  return DataConfig(dataset=info, source=source, tfds_name=tfds_name, image_size=f.image_size,
                    skip_corrupt=f.skip_corrupt, data_dir=data_dir, create_data_dir=create_data_dir,
                    batch_size=batch_size,
                    global_batch=global_batch, eval_batch_size=f.eval_batch_size or batch_size,
                    shuffle_buffer=f.shuffle_buffer, accumulation_steps=k, batch_policy=f.batch_policy,
                    max_global_batch=max_global, decide_every=f.batch_decide_every,
                    prepare_next_epoch=f.prepare_next_epoch)


def _check_batch_policy(f, global_batch: int, batch_size: int, world: World, later_world: bool = False) -> int:
  """--batch_policy's flags checked; the largest global batch it may choose (0: fixed).

  A starting --accumulation_steps past --max_global_batch is no error: each world starts at the
  largest K that fits and says so (training/adaptive/batch_control.py; an elastic world that grew past it
  ended the run before). later_world: an elastic world after the first, which goes on even where
  K=1 is past the bound or leaves one batch to choose, where a first world's flags are refused."""
  if f.batch_policy != "adaptive":
    if f.max_global_batch:
      raise ConfigError(f"--max_global_batch={f.max_global_batch} bounds --batch_policy=adaptive; add it or "
                        "drop --max_global_batch.")
    return 0
  if f.batch_decide_every < 1:
    raise ConfigError(f"--batch_decide_every={f.batch_decide_every} must be at least 1, e.g. --batch_decide_every=50.")
  smallest = batch_size * world.size * (2 if world.size == 1 else 1)  # K from 1 (2 on one rank)
  max_global = f.max_global_batch or 8 * global_batch
  if later_world:
    return max_global
  if max_global < smallest:
    raise ConfigError(f"--max_global_batch={max_global} is below the smallest global batch {smallest} "
                      f"({batch_size} per rank x {world.size} ranks); pass at least {smallest}, e.g. "
                      f"--max_global_batch={8 * smallest}.")
  if max_global < batch_size * world.size * (3 if world.size == 1 else 2):  # K from 1 (2 on one rank): two to choose
    raise ConfigError(f"--max_global_batch={max_global} leaves --batch_policy=adaptive one batch to choose "
                      f"({batch_size} per rank x {world.size} ranks); raise it, e.g. "
                      f"--max_global_batch={8 * global_batch}, or use --batch_policy=fixed.")
  return max_global
