"""Flags of the input: which data set, where it lives, how it is batched."""
import dataclasses
import os

from absl import flags as absl_flags

from comm.topology import World
from flags.errors import ConfigError
from input.datasets import DATASETS, DatasetInfo

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class DataConfig:
  dataset: DatasetInfo
  data_dir: str          # '' for in-memory data sets
  create_data_dir: bool  # the default place may be created; a --data_dir given must exist
  batch_size: int        # per rank: the BatchNorm batch (Goyal et al.)
  global_batch: int      # batch_size * ranks: what the LR scales with
  eval_batch_size: int   # per rank
  shuffle_buffer: int


def define() -> None:
  absl_flags.DEFINE_string(
      "dataset", "digits",
      f"Data set: {', '.join(sorted(DATASETS))}. 'digits' is scikit-learn's handwritten "
      "digits written once as TFRecords; 'synthetic' is a fixed in-memory batch "
      "(no input cost, for benchmarks).")
  absl_flags.DEFINE_string(
      "data_dir", "",
      "Directory of the data set's files. Empty: the default place for the data set "
      "(digits: data/digits in the repository, written on first use).")
  absl_flags.DEFINE_integer(
      "batch_size", 32, "Images per rank per step (the BatchNorm batch). "
      "The global batch is this times the number of ranks.")
  absl_flags.DEFINE_integer(
      "global_batch_size", 0, "If set, the global batch instead of --batch_size: "
      "must divide evenly by the number of ranks.")
  absl_flags.DEFINE_integer("eval_batch_size", 0, "Images per rank per evaluation step "
                            "(0: same as the training batch per rank).")
  absl_flags.DEFINE_integer("shuffle_buffer", 10_000, "Examples in each rank's shuffle buffer.")


def build(f, world: World) -> DataConfig:
  if f.dataset not in DATASETS:
    raise ConfigError(f"--dataset={f.dataset!r} is unknown; choose one of {', '.join(sorted(DATASETS))}.")
  info = DATASETS[f.dataset]

  if f.global_batch_size:
    if f.global_batch_size <= 0:
      raise ConfigError(f"--global_batch_size={f.global_batch_size} must be positive, e.g. --global_batch_size=256.")
    if f.global_batch_size % world.size:
      raise ConfigError(
          f"--global_batch_size={f.global_batch_size} does not divide by the {world.size} ranks; "
          f"pass a multiple of {world.size}, e.g. --global_batch_size={max(1, f.global_batch_size // world.size) * world.size}.")
    batch_size = f.global_batch_size // world.size
  else:
    if f.batch_size <= 0:
      raise ConfigError(f"--batch_size={f.batch_size} must be positive (images per rank), e.g. --batch_size=32.")
    batch_size = f.batch_size
  global_batch = batch_size * world.size
  if global_batch > info.num_train:
    raise ConfigError(
        f"The global batch {global_batch} ({batch_size} per rank x {world.size} ranks) exceeds the "
        f"{info.num_train} training examples of {info.name}; lower --batch_size.")
  if info.num_eval and world.size > info.num_eval:
    raise ConfigError(
        f"{world.size} ranks exceed the {info.num_eval} examples of {info.name}'s held-out split, "
        f"so some ranks would evaluate nothing; run with at most {info.num_eval} ranks.")
  if f.eval_batch_size < 0:
    raise ConfigError(f"--eval_batch_size={f.eval_batch_size} is negative; pass 0 or a positive number.")
  if f.shuffle_buffer <= 0:
    raise ConfigError(f"--shuffle_buffer={f.shuffle_buffer} must be positive, e.g. --shuffle_buffer=10000.")

  data_dir = f.data_dir
  create_data_dir = info.on_disk and not data_dir
  if create_data_dir:
    data_dir = os.path.join(REPO_ROOT, "data", info.name)
  data_dir = os.path.abspath(os.path.expanduser(data_dir)) if data_dir else ""
  return DataConfig(dataset=info, data_dir=data_dir, create_data_dir=create_data_dir,
                    batch_size=batch_size,
                    global_batch=global_batch, eval_batch_size=f.eval_batch_size or batch_size,
                    shuffle_buffer=f.shuffle_buffer)
