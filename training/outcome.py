"""What ends a run, and the exit status that says so: for launchers, job scripts and users.

Every rank of a job exits with the same status for the same cause, so
mpirun/horovodrun/srun report it whichever rank they see first.
"""
import dataclasses

OK = 0
BAD_INPUT = 2   # bad flags, data or topology: fix the command (nothing was trained)
DIVERGED = 3    # a non-finite loss or gradient stopped every rank: lower the LR, add warmup
STALLED = 4     # a rank made no progress for the stall limit: the job was ended
STOPPED = 75    # stopped by a signal after a checkpoint: resumable (sysexits' EX_TEMPFAIL)

STATUS_WORDS = {OK: "finished", DIVERGED: "diverged", STALLED: "stalled", STOPPED: "stopped"}


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
