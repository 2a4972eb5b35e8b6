"""The study's recipe and arms: train.py's flags for each (pure, no launch).

One recipe for every arm (make noise-scale's, bench/noise_scale/study.py): ResNet-8 on
Fashion-MNIST, BatchNorm batch 32 a rank (MICRO), SGD with momentum, the LR per 256 images the
search of make noise-scale found best at batch 64 (peak 0.2 there; make adaptive's B0 LR too),
a warmup of a quarter epoch then a constant LR (a step schedule whose decay lies far past the
cap), evaluations every EVAL_IMAGES images (8 an epoch), stop at TARGET held-out top-1. What
differs between arms is only what the arm chooses: the batch (by accumulation, so BatchNorm's
batch never changes), the LR rule, the exchange and whether compression is used.
"""
import dataclasses
import re

MODEL = "resnet8"
MICRO = 32              # images per rank per micro-batch: BatchNorm's batch in every arm
BASE_LR = 0.8           # per 256 images: peak 0.2 at batch 64, make noise-scale's best there
WARMUP_EPOCHS = 0.25    # the recipe's (study.warmup_epochs: a quarter epoch below batch 4,800)
TARGET = 0.85           # make noise-scale's and make time-to-accuracy's
TRAIN_IMAGES = 60_000
EVAL_IMAGES = 7_500     # 8 evaluations an epoch, in images, whatever the batch
EVAL_BATCH = 250
MAX_EPOCHS = 4.0        # a run that has not reached the target by then has not (make noise-scale: 0.87-2.5
                        # epochs at batches up to 1,024 at their best LR; 6.9 at 2,048)
STOCK_PER_RANK = (32, 128, 512)  # images per rank per update: K = 1, 4 and 16 micro-batches
OURS = "flat"           # our exchange: fused buckets, one allreduce each (docs/communication.md)
# PowerSGD may be chosen from the first update: the runs reach the target in ~1 epoch, and a start
# past the warmup (234 updates at batch 64) would leave compression a third of them or less. Error
# feedback keeps what it delays; any accuracy it costs shows as updates to the target.
COMPRESSION_START = 0
COMMIT_EVERY = 10       # --elastic: train.py's default
RATES = ("20mbit", "none")  # the exchange dominates a step at 20 Mbit/s; 'none': links unshaped
HOSTS = (2, 4)
SEEDS = (0, 1)
BUDGET_EPOCHS = 2.0     # the budget part: base-batch epochs, cosine to 0, no target
ARMS = ("stock", "auto", "adaptive", "joint", "lost")
LABELS = {"stock": "stock Horovod, linear rule", "auto": f"ours ({OURS}), compression auto",
          "adaptive": "ours adaptive K (AdaScale)", "joint": "ours adaptive K + auto compression",
          "lost": "joint, a host lost at 1/3 and back at 2/3"}


@dataclasses.dataclass(frozen=True)
class Budget:
  """How every run of an invocation ends, and what it runs."""
  target: float = TARGET
  max_epochs: float = MAX_EPOCHS
  eval_images: int = EVAL_IMAGES
  stock: tuple[int, ...] = STOCK_PER_RANK
  budget_epochs: float = BUDGET_EPOCHS


# --quick: a smoke run of the program (numbers meaningless): a target reached within a few hundred
# updates, evaluations 4x as often, the budget part a tenth of an epoch.
QUICK = Budget(target=0.7, max_epochs=1.0, eval_images=1_875, stock=(32, 128), budget_epochs=0.1)


def link_mbit(rate: str) -> float | None:
  """tc's rate as Mbit/s (None: 'none', links unshaped); ValueError otherwise."""
  if rate == "none":
    return None
  m = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", rate)
  if not m:
    raise ValueError(f"rate {rate!r}: give tc's form, e.g. 20mbit or 1gbit, or none (unshaped)")
  return float(m.group(1)) * {"kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}[m.group(2)]


def eval_every(global_batch: int, budget: Budget) -> int:
  """Updates between evaluations at this global batch: budget.eval_images images, rounded."""
  return max(1, round(budget.eval_images / global_batch))


def threads(hosts: int, cores: int) -> int:
  """TensorFlow threads a rank: the machine's cores shared by the ranks (one a host)."""
  return max(1, cores // hosts)


def common(hosts: int, seed: int, budget: Budget, cores: int, every: int) -> list[str]:
  return ["--dataset=fashion_mnist", f"--model={MODEL}", f"--batch_size={MICRO}", f"--base_lr={BASE_LR:g}",
          "--optimizer=sgd", f"--warmup_epochs={WARMUP_EPOCHS:g}", "--lr_schedule=step", "--decay_epochs=1000",
          f"--epochs={budget.max_epochs:g}", f"--target_top1={budget.target:g}", f"--eval_every={every}",
          f"--log_every={every}", f"--eval_batch_size={EVAL_BATCH}", f"--seed={seed}", "--export=false",
          f"--threads={threads(hosts, cores)}"]


def flags(arm: str, hosts: int, seed: int, budget: Budget, cores: int, per_rank: int = MICRO) -> list[str]:
  """train.py's flags (without --model_dir) of one arm on `hosts` hosts of one rank.
  per_rank: images per rank per update of the fixed arms (stock, auto); the adaptive arms start at
  one micro-batch with AdaScale's base batch the smallest stock batch (32 x hosts) and may choose up
  to the largest stock batch."""
  if arm not in ARMS:
    raise ValueError(f"arm {arm!r}: one of {ARMS}")
  if per_rank % MICRO:
    raise ValueError(f"per_rank={per_rank}: a multiple of the micro-batch {MICRO}")
  if arm in ("stock", "auto"):
    k = per_rank // MICRO
    out = common(hosts, seed, budget, cores, eval_every(per_rank * hosts, budget)) + [f"--accumulation_steps={k}"]
    if arm == "stock":
      return out + ["--allreduce=horovod", "--compression=none", "--noise_scale=false"]
    return out + [f"--allreduce={OURS}", "--compression=auto", f"--compression_start={COMPRESSION_START}",
                  "--noise_scale=true"]
  base = min(budget.stock) * hosts
  out = common(hosts, seed, budget, cores, eval_every(base, budget)) + [
      "--accumulation_steps=1", "--lr_scaling=adascale", f"--base_batch={base}", "--batch_policy=adaptive",
      f"--max_global_batch={max(budget.stock) * hosts}", f"--allreduce={OURS}", "--noise_scale=true"]
  if arm == "adaptive":
    return out + ["--compression=none"]
  out += ["--compression=auto", f"--compression_start={COMPRESSION_START}"]
  return out + (["--elastic", f"--elastic_commit_every={COMMIT_EVERY}"] if arm == "lost" else [])


def budget_flags(arm: str, hosts: int, seed: int, budget: Budget, cores: int, per_rank: int = MICRO) -> list[str]:
  """The budget part's flags: the arm's, over budget.budget_epochs base-batch epochs, cosine to 0,
  no target, evaluated at epoch ends and at the end (the final top-1 at equal epochs)."""
  out = flags(arm, hosts, seed, budget, cores, per_rank)
  drop = ("--epochs=", "--target_top1=", "--eval_every=", "--lr_schedule=", "--decay_epochs=")
  return [f for f in out if not f.startswith(drop)] + [f"--epochs={budget.budget_epochs:g}", "--lr_schedule=cosine"]


def name(arm: str, rate: str, hosts: int, seed: int, per_rank: int | None = None, part: str = "target") -> str:
  """A run's directory name under the runs directory."""
  batch = f"-b{per_rank}" if arm in ("stock", "auto") and per_rank else ""
  return f"{'budget-' if part == 'budget' else ''}{rate}-h{hosts}-{arm}{batch}-s{seed}"


def lose_schedule(joint_seconds: float) -> tuple[float, float]:
  """Seconds after the launch at which the lost-host arm loses a host and lists it again: a third
  and two thirds of the joint arm's time to target in the same configuration and seed."""
  return round(joint_seconds / 3, 1), round(2 * joint_seconds / 3, 1)
