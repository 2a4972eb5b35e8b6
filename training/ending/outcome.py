"""What ends a run, and the exit status that says so: for launchers, job scripts and users.

Every rank of a job exits with the same status for the same cause, so
mpirun/horovodrun/srun report it whichever rank they see first.
"""
import dataclasses

OK = 0
BAD_INPUT = 2   # bad flags, data or topology: fix the command (nothing was trained)
DIVERGED = 3    # a non-finite loss or gradient stopped every rank: lower the LR, add warmup
STALLED = 4     # a rank made no progress for the stall limit: the job was ended
PEER_LOST = 5   # a collective failed: another rank died or became unreachable (resumable)
STOPPED = 75    # stopped by a signal after a checkpoint: resumable (sysexits' EX_TEMPFAIL)
# Not an exit status (those end at 255): the held-out metric reached --target_top1/--target_top5,
# so the run ended early; a success, which exits 0 (exit_status).
TARGET_REACHED = 256

STATUS_WORDS = {OK: "finished", DIVERGED: "diverged", STALLED: "stalled", STOPPED: "stopped",
                TARGET_REACHED: "reached"}


def exit_status(status: int) -> int:
  """The process's exit status for a run that ended with this status."""
  return OK if status == TARGET_REACHED else status


@dataclasses.dataclass(frozen=True)
class Verdict:
  """After one step: go on (status OK) or end the run with this status; skipped: the fp16
  overflow-skipped steps in a row so far."""
  status: int
  skipped: int


def after_step(finite: bool, stop: int, skipped: int, fp16: bool, max_skipped: int) -> Verdict:
  """The run's verdict after a step (pure; every rank passes the same agreed values).

  finite: the step's update was applied (every rank's loss and the exchanged
  gradients finite); stop: the agreed stop request (0: none). fp32/bf16: one
  non-finite step is a divergence. fp16: an overflow lowers the loss scale
  and skips the step; max_skipped in a row means the scale cannot recover.
  A stop request after a finite step is a stop; divergence wins over it, since
  a checkpoint of a diverging run is not one to resume from.
  """
  skipped = 0 if finite else skipped + 1
  if not finite and (not fp16 or skipped >= max_skipped):
    return Verdict(DIVERGED, skipped)
  if stop:
    return Verdict(STOPPED, skipped)
  return Verdict(OK, skipped)


def after_eval(top1: float | None, top5: float | None, target_top1: float, target_top5: float,
               skipped: int) -> Verdict:
  """The run's verdict after a held-out evaluation (pure; the metrics are global counts, the
  same on every rank): TARGET_REACHED once every target given (> 0) is met, else go on.
  top1/top5: None when there is no held-out split (never reached); skipped as after_step's."""
  targets = [(target, metric) for target, metric in ((target_top1, top1), (target_top5, top5)) if target > 0]
  met = targets and all(metric is not None and metric >= target for target, metric in targets)
  return Verdict(TARGET_REACHED if met else OK, skipped)
