"""What one run of bench-scaling measures: the constants behind each choice, and Settings, the
frozen set of sizes, launches and repeats that the command line selects (one object, passed down)."""
import dataclasses
import os

from flags.config import ConfigError

KB, MB = 1 << 10, 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(REPO, "results")
CLUSTER, SUBNET, HOSTS = "imcb", "198.18.30", 4
IFACE = f"{CLUSTER}0"
# The default takes about 12 minutes on the idle 2-core machine; --full adds larger
# buffers, AlexNet's gradients (244 MB), the 4 x 1 topology and every algorithm as a
# training variant.
# Calibration: 5 sizes each level over the rows' range (1 MB buffers to Horovod's
# 64 MB fused responses), every size timed --repeats times alongside the measured
# rows (medians), PLAN_REPEATS times before them for hybrid's plan. With 64 KB-32 MB
# the relative fit leaned on a size no row has and ran 10% under its own 32 MB
# point: the 1x4 32 MB and ResNet-50 rows came out 0.74-0.82 in four runs.
CALIBRATION_SIZES = (1 * MB, 4 * MB, 16 * MB, 32 * MB, 64 * MB)
PLAN_REPEATS = 5
# Cases of at most 8 MB (tens of ms or less) are timed SMALL_CASE_TURNS times per repeat,
# each timing the mean of SMALL_CASE_CALLS calls after one sync, as calibration sizes
# that small: single 4 ms calls, each the slowest of 4 ranks just out of a barrier,
# put the same plan (flat, hybrid) 11-15% apart on 1x4 at 36 timings.
SMALL_CASE_BYTES, SMALL_CASE_TURNS, SMALL_CASE_CALLS = 8 * MB, 3, 4
# Larger cases take LARGE_CASE_TURNS single-call turns per repeat: at 12 timings hybrid,
# running hier's plan, measured 1.15x hier's own 2x2 32 MB row (655 against 567 ms).
LARGE_CASE_TURNS = 2
ALGORITHMS = ("flat", "hier", "hybrid", "horovod")
THRESHOLD_MB = 32.0
HOROVOD_FUSION_MB = 64.0  # HOROVOD_FUSION_THRESHOLD set for the launches (the Slurm scripts' value)
# On 1x4 flat took 38, 47 and 189 ms for 1, 8 and 32 MB (0.8 GB/s from 1 to 8 MB,
# 0.17 from 8 to 32), while ResNet-50's 97.5 MB, no tensor over 10 MB, took 331 ms.
# The likely cause: glibc's malloc gives a block of 32 MB or more a fresh mmap on
# every call (its dynamic mmap threshold stops at 32 MB), so a 32 MB output tensor
# (or hier's 32 MB packed bucket) is first-touched, page fault by page fault, on
# every exchange, while smaller blocks come back warm from the heap. The launches
# keep every block on the heap and never hand it back, so all sizes run on warm
# memory, as Horovod's fusion buffer does.
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}
TRAIN_BATCH = 16
LAUNCH_TIMEOUT_S = 900  # the default 2x2 launch took 539 s on the idle machine


@dataclasses.dataclass(frozen=True)
class Launch:
  """One horovodrun launch: `hosts` emulated hosts of `per_host` ranks; what rank 0 measures there."""
  name: str
  hosts: int
  per_host: int
  comm: bool
  training: bool


# In the order the driver runs them: 2x2 first, whose calibration costs hybrid's
# training variant in the launches without a calibration of their own.
LAUNCHES = (Launch("2x2", 2, 2, True, True), Launch("1x4", 1, 4, True, False),
            Launch("1x1", 1, 1, False, True), Launch("2x1", 2, 1, False, True),
            Launch("4x1", 4, 1, True, False))
FULL_ONLY = ("4x1",)
# The small ResNet and ResNet-50 at a reduced resolution (the two):
# (name, classes, image shape).
TRAIN_MODELS = (("resnet20", 10, (32, 32, 3)), ("resnet50", 1000, (64, 64, 3)))


@dataclasses.dataclass(frozen=True)
class Settings:
  """Everything a run's launches and report depend on, from the command line."""
  rate: str = "1gbit"
  repeats: int = 12
  train_steps: int = 3
  full: bool = False
  quick: bool = False
  sizes: tuple[int, ...] = (1 * MB, 8 * MB, 32 * MB)
  gradient_sets: tuple[str, ...] = ("resnet50",)
  train_variants: tuple[str, ...] = ("horovod", "hybrid")
  train_models: tuple = TRAIN_MODELS
  calibration_sizes: tuple[int, ...] = CALIBRATION_SIZES
  plan_repeats: int = PLAN_REPEATS
  launches: tuple[Launch, ...] = tuple(l for l in LAUNCHES if l.name not in FULL_ONLY)
  only: tuple[str, ...] = ()  # --only: the launches rerun; the others are kept from out_dir's JSON
  out_dir: str = RESULTS

  @classmethod
  def from_args(cls, args) -> "Settings":
    """--full adds sizes, AlexNet, 4x1 and every training variant; --quick shrinks every axis
    to a smoke run (numbers meaningless); --only keeps the named launches (ConfigError for a
    name that is none)."""
    base = cls(rate=args.rate, repeats=args.repeats, train_steps=args.train_steps, full=args.full,
               quick=args.quick, out_dir=args.out_dir)
    changes = {}
    if args.full:
      changes = {"sizes": (1 * MB, 4 * MB, 16 * MB, 64 * MB), "gradient_sets": ("resnet50", "alexnet"),
                 "train_variants": ALGORITHMS, "launches": LAUNCHES}
    if args.quick:
      changes.update(sizes=(1 * MB,), gradient_sets=(), train_models=TRAIN_MODELS[:1],
                     calibration_sizes=(1 * MB, 4 * MB), plan_repeats=1)
    only = tuple(args.only.split(",")) if args.only else ()
    unknown = [name for name in only if name not in {l.name for l in LAUNCHES}]
    if unknown:
      raise ConfigError(f"--only={args.only} names no launch {','.join(unknown)}; choose among "
                        f"{','.join(l.name for l in LAUNCHES)}, e.g. --only=2x2.")
    if only:
      changes.update(launches=tuple(l for l in LAUNCHES if l.name in only), only=only)
    return dataclasses.replace(base, **changes)

  @property
  def json_path(self) -> str:
    return os.path.join(self.out_dir, "bench_scaling.json")

  def worker_args(self) -> list[str]:
    """The options that carry these settings into a launch's worker."""
    return ([f"--repeats={self.repeats}", f"--train_steps={self.train_steps}"]
            + (["--full"] if self.full else []) + (["--quick"] if self.quick else []))
