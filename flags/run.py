"""Flags of the run itself: where it writes, how long it trains, how it reports."""
import os

from absl import flags as absl_flags

from flags.config import ConfigError, RunConfig


def define() -> None:
  absl_flags.DEFINE_string(
      "model_dir", "runs/default",
      "Directory for checkpoints, TensorBoard scalars, config.json and summary.json "
      "(written by rank 0). A run resumes automatically from the newest checkpoint here.")
  absl_flags.DEFINE_float(
      "epochs", 12, "Training length in epochs (passes over the training split); "
      "the LR schedule is laid out over this length.")
  absl_flags.DEFINE_integer(
      "max_steps", 0, "Stop after this many global steps (0: train all --epochs). "
      "The LR schedule still follows --epochs, so a stopped run can be resumed.")
  absl_flags.DEFINE_integer("seed", 0, "Seed for weights, shuffling and augmentation; "
                            "all ranks derive theirs from it.")
  absl_flags.DEFINE_integer("log_every", 10, "Print a progress line on rank 0 every N steps.")
  absl_flags.DEFINE_integer(
      "checkpoint_every", 0,
      "Also checkpoint every N steps (0: only at the end of each epoch and of the run).")
  absl_flags.DEFINE_integer("keep_checkpoints", 3, "How many checkpoints to keep in --model_dir.")
  absl_flags.DEFINE_boolean(
      "background_checkpoints", True, "Rank 0 copies the variables at a checkpoint's step and writes them "
      "while training goes on (the checkpoint appears, whole, once written; the previous stays valid until "
      "then); --background_checkpoints=false writes each before the next step.")
  absl_flags.DEFINE_boolean(
      "export", True, "At the end of a run that finished or reached its target, rank 0 writes a "
      "SavedModel to <model_dir>/export/ that takes encoded images (JPEG, PNG, ...) and returns class "
      "probabilities and the top-5 classes, with the evaluation preprocessing inside; --export=false skips it.")
  absl_flags.DEFINE_boolean(
      "noise_scale", True, "Measure the gradient noise scale B_simple (McCandlish et al. 2018: the batch "
      "beyond which a larger one buys few fewer steps) from each step's per-rank and global gradients, "
      "and report it in the progress lines, TensorBoard and summary.json; needs 2+ ranks or "
      "--accumulation_steps >= 2. Costs two squared norms and one 4-byte allreduce a step "
      "(docs/noise_scale.md); --noise_scale=false skips them.")
  absl_flags.DEFINE_boolean(
      "eval_only", False, "Evaluate the newest checkpoint of --model_dir on the held-out split, print its "
      "eval line and one JSON line, and exit: nothing is trained or written. Any number of ranks gives the "
      "same figures (BatchNorm's statistics are one model's in every checkpoint); the model, data set and "
      "optimizer flags must be the run's, the batch flags are checked but not used.")
  absl_flags.DEFINE_integer(
      "threads", 0, "TensorFlow intra-op threads per rank (0: the node's cores "
      "divided by the ranks on the node, so ranks do not oversubscribe the CPU).")


def build(f) -> RunConfig:
  if not f.model_dir:
    raise ConfigError("--model_dir is empty; give a directory for checkpoints, e.g. --model_dir=runs/exp1.")
  if f.epochs <= 0:
    raise ConfigError(f"--epochs={f.epochs} must be positive; pass e.g. --epochs=10.")
  for name in ("max_steps", "checkpoint_every", "threads"):
    if getattr(f, name) < 0:
      raise ConfigError(f"--{name}={getattr(f, name)} is negative; pass 0 or a positive number.")
  if f.log_every <= 0:
    raise ConfigError(f"--log_every={f.log_every} must be positive; pass e.g. --log_every=10.")
  if f.keep_checkpoints <= 0:
    raise ConfigError(f"--keep_checkpoints={f.keep_checkpoints} must be at least 1.")
  return RunConfig(model_dir=os.path.abspath(os.path.expanduser(f.model_dir)),
                   epochs=f.epochs, max_steps=f.max_steps, seed=f.seed,
                   log_every=f.log_every, checkpoint_every=f.checkpoint_every,
                   keep_checkpoints=f.keep_checkpoints, background_checkpoints=f.background_checkpoints,
                   threads=f.threads, export=f.export,
                   noise_scale=f.noise_scale, eval_only=f.eval_only)
