"""Flags of what a long run does when something goes wrong: a hung rank, a diverging loss."""
from absl import flags as absl_flags

from flags.config import ConfigError, FaultConfig


def define() -> None:
  absl_flags.DEFINE_float(
      "stall_timeout", 300,
      "Seconds a rank may go without progress (a step, an evaluation batch, a checkpoint) before "
      "every rank exits with status 4 and a line naming the rank and host that stopped; the limit "
      "grows to 20 typical steps for slow steps and doubles before the first step. 0 disables.")
  absl_flags.DEFINE_integer(
      "max_skipped_steps", 10,
      "fp16: stop the run as diverged (status 3) after this many overflow-skipped steps in a row, "
      "when lowering the loss scale no longer helps.")


def build(f) -> FaultConfig:
  if f.stall_timeout < 0:
    raise ConfigError(f"--stall_timeout={f.stall_timeout} is negative; pass seconds, e.g. "
                      "--stall_timeout=300, or 0 to disable the watchdog.")
  if f.max_skipped_steps < 1:
    raise ConfigError(f"--max_skipped_steps={f.max_skipped_steps} must be at least 1, e.g. "
                      "--max_skipped_steps=10.")
  return FaultConfig(stall_timeout=f.stall_timeout, max_skipped_steps=f.max_skipped_steps)
