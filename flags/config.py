"""The validated settings of a run, as frozen dataclasses, and the error a user's mistake becomes.

The ground floor of the project (see flags/__init__.py): imports nothing of
it, so comm/, input/, models/ and optimizers/ take their settings from here
without importing the flag definitions and checks that sit above them.
"""
import dataclasses
import enum


class ConfigError(ValueError):
  """Bad flags, data or topology: one sentence that names the flag and the fix.

  Raised before any expensive work; train.py prints it on every rank and exits
  with status 2.
  """


ALGORITHMS = ("horovod", "flat", "hier", "hybrid")
COMPRESSIONS = ("none", "fp16", "powersgd", "auto")  # auto: powersgd where the cost model says it pays
POWERSGD_WIRES = ("fp32", "fp16")  # the dtype of --compression=powersgd's payloads
OPTIMIZERS = ("sgd", "lars")
LR_SCHEDULES = ("step", "poly", "cosine")
PRECISIONS = ("fp32", "bf16", "fp16")
LR_SCALINGS = ("linear", "adascale")  # how the LR follows the global batch (optimizers/adascale.py)


class Source(enum.StrEnum):
  """Where the examples come from. A StrEnum, so config.json holds the plain name."""
  DIGITS = "digits"        # scikit-learn's digits, written once as TFRecords
  FASHION_MNIST = "fashion_mnist"  # Debian's Fashion-MNIST IDX files, written once as TFRecords
  SYNTHETIC = "synthetic"  # a fixed in-memory batch
  IMAGENET = "imagenet"    # TFRecords in ImageNet's layout in --data_dir
  FOLDER = "folder"        # train/<wnid>/*.JPEG and val/<wnid>/*.JPEG in --data_dir
  TFDS = "tfds"            # a tensorflow-datasets set prepared in --data_dir

  @property
  def scanned(self) -> bool:
    """Whether its classes and split sizes are only known once --data_dir is read (input.sources)."""
    return self in (Source.IMAGENET, Source.FOLDER, Source.TFDS)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """num_train/num_eval: examples per split; image_shape: (height, width, channels)
  fed to the model; mean/std: per-channel normalisation of pixels in [0, 1];
  inception_crop: train on random crops and evaluate on a central crop
  (input/preprocessing.py), instead of decoding the image as it is."""
  name: str
  num_classes: int
  image_shape: tuple[int, int, int]
  num_train: int
  num_eval: int
  mean: tuple[float, ...]
  std: tuple[float, ...]
  on_disk: bool
  inception_crop: bool = False


@dataclasses.dataclass(frozen=True)
class RunConfig:
  model_dir: str
  epochs: float
  max_steps: int
  seed: int
  log_every: int
  checkpoint_every: int
  keep_checkpoints: int
  threads: int
  background_checkpoints: bool = True  # rank 0 writes each checkpoint while training goes on (persist/checkpoints.py)
  export: bool = True    # rank 0 writes a SavedModel to <model_dir>/export/ at the end (training/persist/export.py)
  noise_scale: bool = True  # measure the gradient noise scale each step (training/adaptive/noise_scale.py)
  eval_only: bool = False   # evaluate the newest checkpoint and exit (train.py's evaluate_checkpoint)


@dataclasses.dataclass(frozen=True)
class DataConfig:
  dataset: DatasetInfo   # for a scanned source, ILSVRC-2012's until input.sources reads the files
  source: Source
  tfds_name: str         # the <name> of tfds:<name>, else ''
  image_size: int        # side of the square images the model sees (ImageNet-like sources)
  skip_corrupt: bool     # skip (and count) damaged images and records instead of stopping
  data_dir: str          # '' for in-memory data sets
  create_data_dir: bool  # the default place may be created; a --data_dir given must exist
  batch_size: int        # per rank and micro-batch: the BatchNorm batch (Goyal et al.)
  global_batch: int      # batch_size * ranks * accumulation_steps: one update's images, what the LR scales with
  eval_batch_size: int   # per rank
  shuffle_buffer: int
  accumulation_steps: int = 1  # micro-batches per update (training/step.py); adaptive: where it starts
  batch_policy: str = "fixed"  # fixed | adaptive: the goodput controller moves the accumulation steps (training/adaptive/batch_control.py)
  max_global_batch: int = 0    # adaptive: the largest global batch it may choose
  decide_every: int = 50       # adaptive: updates between its decisions
  prepare_next_epoch: bool = True  # the next epoch's input built while this one trains (input/ahead.py)

  @property
  def step_batch(self) -> int:
    """Images per rank per training step: accumulation_steps micro-batches of batch_size."""
    return self.batch_size * self.accumulation_steps

  @property
  def adaptive(self) -> bool:
    return self.batch_policy == "adaptive"

  def k_range(self, ranks: int) -> tuple[int, int]:
    """The accumulation steps the adaptive policy may choose on `ranks` ranks: from 1 (2 on one rank,
    whose noise scale compares micro-batches) to the most that stay within max_global_batch."""
    low = 2 if ranks == 1 else 1
    return low, max(low, self.max_global_batch // (self.batch_size * ranks))

  def with_accumulation(self, k: int, ranks: int) -> "DataConfig":
    """This config at K accumulation steps on `ranks` ranks (the adaptive policy's change)."""
    return dataclasses.replace(self, accumulation_steps=k, global_batch=self.batch_size * ranks * k)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  name: str
  zero_init_residual: bool


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  optimizer: str
  base_lr: float        # per 256 images (Goyal et al.'s linear scaling rule)
  momentum: float
  weight_decay: float
  warmup_epochs: float
  warmup_start_lr: float
  lr_schedule: str
  decay_epochs: tuple[float, ...]
  lars_eta: float
  label_smoothing: float
  no_decay_on_bias_bn: bool
  precision: str
  lr_scaling: str = "linear"  # linear: Goyal et al.'s rule; adascale: the gain r of optimizers/adascale.py
  base_batch: int = 0         # adascale's B0, the batch the schedule is written for (0: linear scaling)
  base_batch_given: bool = False  # --base_batch was given (else the run's first world's per-rank batch)

  @property
  def adascale_base(self) -> int:
    """B0 under --lr_scaling=adascale, 0 under the linear rule (training/course.py's switch)."""
    return self.base_batch if self.lr_scaling == "adascale" else 0


@dataclasses.dataclass(frozen=True)
class CommConfig:
  allreduce: str = "horovod"
  fusion_threshold_mb: float = 32.0  # bucket size of flat/hier/hybrid, MB (2^20 bytes)
  compression: str = "none"          # none | fp16 (dtype on the wire) | powersgd (comm/powersgd.py) | auto
  ranks_per_node: int = 0            # 0: the hosts' own layout
  hybrid_cost: str = "probe"         # probe | ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER[,mpi|ring]
  powersgd_rank: int = 4             # powersgd, auto: P's and Q's columns
  powersgd_wire: str = "fp32"        # powersgd: fp32 | fp16, the dtype P, Q and the whole vectors travel in
  compression_start: int = 1000      # powersgd: steps of the plain exchange first (PyTorch's start_powerSGD_iter)
  powersgd_error_feedback: bool = True  # powersgd: keep each rank's residual (False: the paper's ablation)

  @property
  def wire(self) -> str:
    """What float32 gradients travel as, in comm.exchange.wire_dtype's terms: 'fp16' under
    --compression=fp16 and under powersgd with --powersgd_wire=fp16, else 'none': auto sends
    what it leaves whole as none does (comm.exchange.make_compression)."""
    fp16 = self.compression == "fp16" or (self.compression == "powersgd" and self.powersgd_wire == "fp16")
    return "fp16" if fp16 else "none"


@dataclasses.dataclass(frozen=True)
class FaultConfig:
  stall_timeout: float    # seconds without progress before the job is ended (0: never)
  max_skipped_steps: int  # fp16: overflow-skipped steps in a row that count as divergence
  elastic: bool = False   # Horovod elastic (Gloo): ranks may leave and join (training/elastic.py)
  elastic_commit_every: int = 10  # steps between commits, the most a lost rank costs the others


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  eval_every: int      # steps between held-out evaluations within an epoch, besides its end (0: ends only)
  target_top1: float   # held-out top-1 that ends the run (0: none)
  target_top5: float
  eval_every_epochs: int = 1  # epoch ends between held-out evaluations (the run's end always evaluates)

  @property
  def has_target(self) -> bool:
    return bool(self.target_top1 or self.target_top5)


@dataclasses.dataclass(frozen=True)
class Config:
  """Every setting of a run. world is the comm.topology.World it was validated
  against (not imported: comm sits above this floor)."""
  run: RunConfig
  data: DataConfig
  model: ModelConfig
  optim: OptimConfig
  comm: CommConfig
  faults: FaultConfig
  evaluation: EvalConfig
  world: object

  def to_json(self) -> dict:
    """Plain dict of every setting, for config.json and summaries."""
    return dataclasses.asdict(self)
