"""Flags of held-out evaluation: how often it runs, and the accuracy that ends the run."""
from absl import flags as absl_flags

from flags.config import ConfigError, DatasetInfo, EvalConfig


def define() -> None:
  absl_flags.DEFINE_integer(
      "eval_every", 0, "Also evaluate on the held-out split every N steps into each epoch (0: only "
      "at the end of each epoch and of the run), but not within N/2 steps of an epoch end that evaluates; "
      "with a target, each evaluation can end the run. Steps of "
      "the global batch the flags set: where the batch controller changes it (--batch_policy=adaptive), "
      "every N x that batch's images.")
  absl_flags.DEFINE_integer(
      "eval_every_epochs", 1, "Evaluate on the held-out split at the end of every N-th epoch (1: every epoch; "
      "MLPerf's ResNet-50 reference: 4), and always at the run's end. Each epoch's end still writes a "
      "checkpoint; with a target, only the epochs evaluated can end the run there.")
  absl_flags.DEFINE_float(
      "target_top1", 0, "Time to accuracy: stop every rank once the held-out top-1 reaches this "
      "fraction, in (0, 1] (MLPerf ResNet-50: 0.759), and report time_to_target_seconds from "
      "start-up to that evaluation (0: no target). With --target_top5 too, both must be met.")
  absl_flags.DEFINE_float(
      "target_top5", 0, "As --target_top1, for the held-out top-5 accuracy (0: no target).")


def build(f, dataset: DatasetInfo) -> EvalConfig:
  if f.eval_every < 0:
    raise ConfigError(f"--eval_every={f.eval_every} is negative; pass a number of steps, or 0 to evaluate "
                      "at epoch ends only.")
  if f.eval_every_epochs < 1:
    raise ConfigError(f"--eval_every_epochs={f.eval_every_epochs} is below 1; pass 1 to evaluate at every "
                      "epoch's end, or N for every N-th.")
  for name in ("target_top1", "target_top5"):
    value = getattr(f, name)
    if not 0 <= value <= 1:
      raise ConfigError(f"--{name}={value} lies outside (0, 1]; pass an accuracy as a fraction, e.g. "
                        f"--{name}=0.75, or 0 for no target.")
    if value and dataset.num_eval == 0 and not dataset.on_disk:
      raise ConfigError(f"--{name} needs a held-out split, and --dataset={dataset.name} has none; "
                        "train on a data set with one, or drop the target.")
  return EvalConfig(eval_every=f.eval_every, target_top1=f.target_top1, target_top5=f.target_top5,
                    eval_every_epochs=f.eval_every_epochs)
