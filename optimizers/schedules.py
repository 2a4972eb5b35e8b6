"""Learning-rate schedules: pure functions of the global step.

Goyal et al.: the linear scaling rule (LR = 0.1 per 256 images, times the
global batch / 256) and gradual warmup from a small LR over the first epochs,
then step decay (x0.1 at epochs 30, 60, 80); polynomial decay of power 2 (the
MLPerf ResNet-50 LARS reference) or cosine decay as alternatives. Durations
arrive in epochs (from_epochs) or steps (Schedule) and are turned into steps
once, here.
"""
import dataclasses
import math


def scaled_lr(base_lr_per_256: float, global_batch: int) -> float:
  """The linear scaling rule: base_lr_per_256 * global_batch / 256."""
  return base_lr_per_256 * global_batch / 256.0


@dataclasses.dataclass(frozen=True)
class Schedule:
  """LR as a function of the global step (0-based)."""
  peak_lr: float
  total_steps: int
  warmup_steps: int = 0
  warmup_start_lr: float = 0.0
  kind: str = "cosine"                   # 'step', 'poly' or 'cosine'
  decay_steps: tuple[int, ...] = ()      # for 'step': multiply by 0.1 at each
  decay_factor: float = 0.1
  power: float = 2.0                     # for 'poly': peak * (1 - progress) ** power

  def __call__(self, step: int) -> float:
    if step < self.warmup_steps:
      return self.warmup_start_lr + (self.peak_lr - self.warmup_start_lr) * step / self.warmup_steps
    if self.kind == "step":
      return self.peak_lr * self.decay_factor ** sum(step >= s for s in self.decay_steps)
    # Decay spans the steps after warmup; progress runs 0 -> 1 and then stays at 1.
    progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
    if self.kind == "poly":
      return self.peak_lr * (1.0 - progress) ** self.power
    if self.kind == "cosine":
      return self.peak_lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule kind {self.kind!r}")


def from_epochs(*, base_lr: float, global_batch: int, steps_per_epoch: int, epochs: float,
                warmup_epochs: float, warmup_start_lr: float, kind: str,
                decay_epochs=()) -> Schedule:
  """A Schedule whose durations are given in epochs of steps_per_epoch steps."""
  to_steps = lambda e: int(round(e * steps_per_epoch))
  return Schedule(peak_lr=scaled_lr(base_lr, global_batch), total_steps=to_steps(epochs),
                  warmup_steps=to_steps(warmup_epochs), warmup_start_lr=warmup_start_lr,
                  kind=kind, decay_steps=tuple(to_steps(e) for e in decay_epochs))


def for_run(optim, global_batch: int, epochs: float, steps_per_epoch: int) -> Schedule:
  """The run's schedule (flags.config's OptimConfig) for a world's global batch: the linear
  scaling rule, so under --elastic the peak follows the world's batch."""
  return from_epochs(base_lr=optim.base_lr, global_batch=global_batch, steps_per_epoch=steps_per_epoch,
                     epochs=epochs, warmup_epochs=optim.warmup_epochs, warmup_start_lr=optim.warmup_start_lr,
                     kind=optim.lr_schedule, decay_epochs=optim.decay_epochs)


def describe(schedule: Schedule, optimizer: str, base_lr: float, global_batch: int) -> str:
  """The start-up line that says what the schedule is and where its peak comes from."""
  return (f"{optimizer}: LR peak {schedule.peak_lr:.4f} ({base_lr:.4f} per 256 x global batch {global_batch}), "
          f"{schedule.warmup_steps} warmup steps, {schedule.kind} decay over {schedule.total_steps} steps")
