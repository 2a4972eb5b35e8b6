"""make time-to-accuracy's recipe (pure): the configurations (a)-(e) of the large-batch recipe on
Fashion-MNIST, the target that ends a run, how long a run may go, and each run's train.py flags.
make compression's accuracy part trains configuration (c) by these (bench/compression/accuracy.py)."""
import dataclasses

from bench.harness import train_runs
from bench.harness.train_runs import Setting

RANKS = 2
TRAIN_IMAGES = 60_000  # Fashion-MNIST's training split; train.py's steps per epoch: this // global batch
SEEDS = (0, 1)
# ResNet-8, the smallest CIFAR ResNet: 2.8x ResNet-20's images/s here (410 against 145 at global
# batch 64 or 1,024, 2 ranks, measured back to back), so ten runs fit in under two hours of both
# cores. ResNet-20 was calibrated first (2026-12-01, (a) seed 0): held-out top-1 0.700 / 0.793 /
# 0.831 / 0.842 / 0.861 / 0.865 / 0.880 / 0.886 every quarter epoch, 0.86 after ~12 minutes; a
# large batch needs several times the baseline's epochs, and 6 epochs of it are 50 minutes a run.
MODEL = "resnet8"
# The held-out top-1 that ends a run: what the baseline reaches in about 1.5-2 epochs (ResNet-20
# passed it at 1.25), so the large batches, which need more epochs, can reach it within MAX_EPOCHS.
TARGET_TOP1 = 0.85
# The cap of a run that does not reach the target, and the span of its LR schedule: 232 updates at
# 1,024 and 56 at 4,096, and a run that misses ends in ~12 minutes here.
MAX_EPOCHS = 4.0
EVALS_PER_EPOCH = 4  # the stop is found within ~1/4 epoch of the target
# Every configuration evaluates in batches of this many per rank (10,000 / 2 ranks = 20 of them),
# so the evaluations in the clock cost the same whatever the training batch.
EVAL_BATCH = 250
# Base LRs per 256 images (train.py: peak = base * global batch / 256).
BASELINE_LR = 0.2     # He et al.'s CIFAR ResNet: 0.1 at batch 128; peak 0.05 at 64
LARGE_SGD_LR = 0.2    # the linear scaling rule: (a)'s base, peak 0.8 at 1,024 (the retired make reproduce's search: 0.2)
LARS_LR = 4.0         # the retired make reproduce's search on digits at 256: 4-16 within a point of the best
# (e) by the rule from (c) would peak at 64, the LR that lost 9 points in that search (LARS leaves
# biases and BatchNorm at the global LR): half of it.
ACCUM_LARS_LR = 2.0
LARS_ETA = 0.001      # MLPerf
WARMUP_EPOCHS = 1.0   # 58 updates at 1,024 (Goyal et al.: 5 of 90 epochs)
ACCUM_WARMUP_EPOCHS = 2.0  # 28 updates at 4,096: one epoch is only 14
WARMUP_START_LR = BASELINE_LR * 64 / 256  # Goyal et al.: warmup starts from the small-batch LR

SETTINGS = {
    "a": Setting("(a) batch 64, SGD", 64, RANKS, BASELINE_LR, 0),
    "b": Setting("(b) batch 1,024, SGD + warmup", 1024, RANKS, LARGE_SGD_LR, WARMUP_EPOCHS),
    "c": Setting("(c) batch 1,024, LARS + warmup", 1024, RANKS, LARS_LR, WARMUP_EPOCHS, "lars",
                 schedule="poly"),
    "d": Setting("(d) batch 1,024, LARS + warmup, bf16", 1024, RANKS, LARS_LR, WARMUP_EPOCHS, "lars", "bf16",
                 "poly"),
    "e": Setting("(e) batch 4,096 by accumulation, LARS + warmup", 4096, RANKS, ACCUM_LARS_LR,
                 ACCUM_WARMUP_EPOCHS, "lars", schedule="poly", accumulation_steps=8),
}
# --quick: a smoke run of the program, numbers meaningless: about QUICK_IMAGES images a run, and a
# target (a) reaches at its first evaluation (24% held-out top-1 after 20 steps, 30% after 40 in
# the smoke run), so the stop is taken too.
QUICK_TARGET = 0.2
QUICK_IMAGES = 64 * 40


@dataclasses.dataclass(frozen=True)
class Budget:
  """How every run ends: at the target top-1, or after max_epochs (quick: a few steps)."""
  target: float
  max_epochs: float
  quick: bool = False


def steps_per_epoch(s: Setting) -> int:
  return TRAIN_IMAGES // s.global_batch


def quick_steps(s: Setting) -> int:
  return max(2, QUICK_IMAGES // s.global_batch)


def eval_every(s: Setting, budget: Budget) -> int:
  """Steps between held-out evaluations, counted into each epoch (train.py's --eval_every):
  EVALS_PER_EPOCH of them an epoch, its end the last (937 steps: 235, 470, 705 and 937); quick:
  twice a run."""
  if budget.quick:
    return max(1, quick_steps(s) // 2)
  return max(1, -(-steps_per_epoch(s) // EVALS_PER_EPOCH))


def train_args(s: Setting, seed: int, budget: Budget, model_dir: str) -> list[str]:
  """train.py's flags for one run of setting s."""
  every = eval_every(s, budget)
  flags = [f"--model_dir={model_dir}", "--dataset=fashion_mnist", f"--model={MODEL}", *s.flags(),
           f"--epochs={budget.max_epochs:g}", f"--seed={seed}", f"--target_top1={budget.target:g}",
           f"--eval_every={every}", f"--eval_batch_size={EVAL_BATCH}", f"--log_every={every}",
           "--export=false"]  # a SavedModel per run is not what is timed
  if s.warmup_epochs:
    flags.append(f"--warmup_start_lr={WARMUP_START_LR:g}")
  if s.optimizer == "lars":
    flags.append(f"--lars_eta={LARS_ETA:g}")
  if budget.quick:
    flags.append(f"--max_steps={quick_steps(s)}")
  return flags


def shown(flags: list[str]) -> str:
  """The command a user would type for these flags."""
  return train_runs.shown(train_runs.command(RANKS, flags))
