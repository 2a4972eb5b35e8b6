"""Flags of what a long run does when something goes wrong: a hung rank, a diverging loss."""
from absl import flags as absl_flags

from flags.config import ConfigError, FaultConfig


def define() -> None:
  absl_flags.DEFINE_float(
      "stall_timeout", 300,
      "Seconds a rank may go without progress (a step, an evaluation batch, a checkpoint) before "
      "every rank exits with status 4 and a line naming the rank and host that stopped; the limit "
      "grows to 20 typical steps for slow steps, or 4 times the slowest of its kind so far (epoch "
      "change, evaluation, checkpoint), and is at least 120 s the first time each kind runs; a rank "
      "waiting for another still within its own limit waits on. Under --elastic each rank is judged "
      "on its own progress, with no limit while a world re-forms. 0 disables.")
  absl_flags.DEFINE_integer(
      "max_skipped_steps", 10,
      "fp16: stop the run as diverged (status 3) after this many overflow-skipped steps in a row, "
      "when lowering the loss scale no longer helps.")
  absl_flags.DEFINE_boolean(
      "elastic", False,
      "Elastic training (Horovod elastic, Gloo): when a host is lost the other ranks roll back to "
      "the last commit and go on; when one comes back its ranks join. Launch with horovodrun --gloo "
      "-np N --min-np M --host-discovery-script S --blacklist-cooldown-range 10 20 (without the "
      "cooldown a lost host never rejoins). --batch_size keeps the per-rank batch (the global "
      "batch and the LR follow the world, the linear scaling rule); --global_batch_size keeps the "
      "global batch (the per-rank batch is recomputed; a world it does not divide ends the run).")
  absl_flags.DEFINE_integer(
      "elastic_commit_every", 10,
      "--elastic: steps between commits of the training state to host memory (and at every "
      "checkpoint); a lost host costs the others at most this many steps.")


def build(f) -> FaultConfig:
  if f.stall_timeout < 0:
    raise ConfigError(f"--stall_timeout={f.stall_timeout} is negative; pass seconds, e.g. "
                      "--stall_timeout=300, or 0 to disable the watchdog.")
  if f.max_skipped_steps < 1:
    raise ConfigError(f"--max_skipped_steps={f.max_skipped_steps} must be at least 1, e.g. "
                      "--max_skipped_steps=10.")
  if f.elastic_commit_every < 1:
    raise ConfigError(f"--elastic_commit_every={f.elastic_commit_every} must be at least 1, e.g. "
                      "--elastic_commit_every=10.")
  if f.elastic and f.skip_corrupt:
    raise ConfigError("--elastic cannot be combined with --skip_corrupt (a world change replays what "
                      "each rank read, which skipped records would shift); drop one of the two.")
  return FaultConfig(stall_timeout=f.stall_timeout, max_skipped_steps=f.max_skipped_steps,
                     elastic=f.elastic, elastic_commit_every=f.elastic_commit_every)
