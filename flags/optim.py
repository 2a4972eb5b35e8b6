"""Flags of the update: optimizer, learning-rate schedule, regularisation, arithmetic precision."""
from absl import flags as absl_flags

from flags.config import LR_SCALINGS, LR_SCHEDULES, OPTIMIZERS, PRECISIONS, ConfigError, OptimConfig


def define() -> None:
  absl_flags.DEFINE_enum(
      "optimizer", "sgd", OPTIMIZERS, "Optimizer: sgd (momentum SGD) or lars (layer-wise "
      "adaptive rate scaling, You et al. 2017, as Jia et al. for batches up to 64K).")
  absl_flags.DEFINE_float(
      "base_lr", 0.8, "Learning rate per 256 images; the peak LR is base_lr * global_batch / 256 "
      "(Goyal et al.'s linear scaling rule; they use 0.1 for ImageNet).")
  absl_flags.DEFINE_enum(
      "lr_scaling", "linear", LR_SCALINGS,
      "How the LR follows the global batch. linear: Goyal et al.'s rule, the peak --base_lr x global "
      "batch / 256 and the schedule laid out in epochs. adascale (Johnson et al. 2020, "
      "optimizers/adascale.py): the schedule is written for --base_batch and read on a clock of "
      "base-batch steps; each step's LR is the gain r times it and the clock moves on by r, r = (1 + "
      "B_simple / B0) / (1 + B_simple / B) from the measured noise scale, between 1 and B / B0 (1 until "
      "measured). --epochs then counts base-batch epochs: the run ends when the schedule has counted "
      "them, having trained on more images where r < B / B0. Needs the noise scale (2+ ranks or "
      "--accumulation_steps >= 2 when the global batch is not the base batch).")
  absl_flags.DEFINE_integer(
      "base_batch", 0, "AdaScale's base batch B0: the batch the LR schedule (--base_lr per 256, "
      "warmup, decay) is written for (0: the per-rank batch of the run's first world, kept for the whole "
      "run: a requeue onto another node count or a new elastic world reads the same clock). Only with "
      "--lr_scaling=adascale.")
  absl_flags.DEFINE_float("momentum", 0.9, "Momentum of the optimizer.")
  absl_flags.DEFINE_float(
      "weight_decay", 5e-4, "L2 weight decay (not scaled with the batch, as Goyal et al.); "
      "sgd decays decoupled from the gradient, lars adds it to the gradient inside its trust ratio.")
  absl_flags.DEFINE_float(
      "warmup_epochs", 2, "Gradual warmup: the LR rises linearly from --warmup_start_lr "
      "to the peak over this many epochs (Goyal et al.: 5).")
  absl_flags.DEFINE_float(
      "warmup_start_lr", 0.0, "LR at step 0 of the warmup (Goyal et al.: 0.1, the small-batch LR).")
  absl_flags.DEFINE_enum(
      "lr_schedule", "cosine", LR_SCHEDULES,
      "Decay after warmup: step (x0.1 at each of --decay_epochs), poly ((1 - progress)^2 to 0, "
      "the MLPerf LARS reference) or cosine (to 0 at the end).")
  absl_flags.DEFINE_list(
      "decay_epochs", ["30", "60", "80"], "Epochs at which the step schedule multiplies the LR by 0.1.")
  absl_flags.DEFINE_float(
      "lars_eta", 0.001, "LARS trust coefficient: each layer steps about eta * ||w|| per unit of "
      "LR (MLPerf: 0.001). Only with --optimizer=lars.")
  absl_flags.DEFINE_float(
      "label_smoothing", 0.0, "Label smoothing of the cross-entropy target (MLPerf LARS: 0.1; "
      "Goyal et al.: none).")
  absl_flags.DEFINE_boolean(
      "no_decay_on_bias_bn", True, "Exempt biases and BatchNorm gamma/beta from weight decay "
      "(and, with lars, from the trust ratio), as Jia et al. and MLPerf; "
      "--nono_decay_on_bias_bn decays every variable.")
  absl_flags.DEFINE_enum(
      "precision", "fp32", PRECISIONS,
      "Arithmetic of forward and backward: fp32; bf16 (Keras mixed_bfloat16, fp32 variables, "
      "no loss scaling); fp16 (mixed_float16 with dynamic loss scaling, as Jia et al.). Logits, "
      "loss and BatchNorm statistics stay fp32. On a CPU, bf16 trained faster than fp32 only with "
      "AMX-BF16 (1.36x, measured); with AVX512-BF16 and no AMX it was slower (0.72x), with neither "
      "several times slower (0.17x). fp16 is presumed to need AMX-FP16 likewise (not measured). "
      "train.py warns at start-up where the CPU is not of the fast kind.")


def build(f, batch_size: int, pinned: int = 0) -> OptimConfig:
  """batch_size: the per-rank batch, --base_batch's default when the run has not pinned one (pinned:
  the base batch of the run's first world, which a default follows)."""
  if f.base_batch < 0:
    raise ConfigError(f"--base_batch={f.base_batch} is negative; pass 0 (the per-rank batch) or a batch size.")
  if f.base_batch and f.lr_scaling != "adascale":
    raise ConfigError(f"--base_batch={f.base_batch} is AdaScale's; add --lr_scaling=adascale or drop it.")
  if f.base_lr <= 0:
    raise ConfigError(f"--base_lr={f.base_lr} must be positive, e.g. --base_lr=0.1.")
  if not 0 <= f.momentum < 1:
    raise ConfigError(f"--momentum={f.momentum} must lie in [0, 1), e.g. --momentum=0.9.")
  if f.weight_decay < 0:
    raise ConfigError(f"--weight_decay={f.weight_decay} is negative; pass 0 to disable it.")
  if f.warmup_epochs < 0 or f.warmup_start_lr < 0:
    raise ConfigError("--warmup_epochs and --warmup_start_lr must be non-negative; pass 0 to disable warmup.")
  try:
    decay_epochs = tuple(sorted(float(e) for e in f.decay_epochs))
  except ValueError:
    raise ConfigError(f"--decay_epochs={','.join(f.decay_epochs)} must be numbers, e.g. --decay_epochs=30,60,80.") from None
  if f.lars_eta <= 0:
    raise ConfigError(f"--lars_eta={f.lars_eta} must be positive, e.g. --lars_eta=0.001.")
  if not 0 <= f.label_smoothing < 1:
    raise ConfigError(f"--label_smoothing={f.label_smoothing} must lie in [0, 1), e.g. --label_smoothing=0.1.")
  return OptimConfig(optimizer=f.optimizer, base_lr=f.base_lr, momentum=f.momentum,
                     weight_decay=f.weight_decay, warmup_epochs=f.warmup_epochs,
                     warmup_start_lr=f.warmup_start_lr, lr_schedule=f.lr_schedule,
                     decay_epochs=decay_epochs, lars_eta=f.lars_eta,
                     label_smoothing=f.label_smoothing, no_decay_on_bias_bn=f.no_decay_on_bias_bn,
                     precision=f.precision, lr_scaling=f.lr_scaling,
                     base_batch=f.base_batch or pinned or batch_size, base_batch_given=bool(f.base_batch))
