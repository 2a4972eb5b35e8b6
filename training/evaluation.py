"""Held-out evaluation over every rank's share: global counts, not an average of rank averages."""
import dataclasses

import tensorflow as tf

from flags.config import EvalConfig


@dataclasses.dataclass(frozen=True)
class HeldOut:
  """Global held-out metrics: top1/top5 as fractions of count examples, loss the mean per example."""
  top1: float
  top5: float
  loss: float
  count: int


class Stopped(Exception):
  """A stop request agreed between evaluation batches: the evaluation ends there on every rank
  (code: the agreed stop code, a signal number)."""

  def __init__(self, code: int):
    super().__init__(f"stopped by signal {code} during an evaluation")
    self.code = code


def held_out(eval_step, dataset, allreduce_sum, on_batch=lambda: None, agree=None, stop_code=lambda: 0) -> HeldOut:
  """Run eval_step (training/step.py: [loss sum, top-1 hits, top-5 hits, count] per batch) over
  this rank's share of the split, add the sums over ranks (allreduce_sum: a float32 (4,) ->
  its sum over ranks; one collective, every rank calls it) and divide once.

  Dividing the global sums weighs every example alike; a mean of rank means would weigh a
  rank's short last batch, or a rank with fewer examples, as much as a full one.
  on_batch() after each batch: the watchdog's progress.

  agree(int32 [stop, more]) -> its max over ranks (one small allreduce a batch; None: one process
  alone): before each batch every rank says whether it was asked to stop and whether it has a batch
  left, so a stop anywhere ends the evaluation everywhere (Stopped) within one batch, and a rank
  whose share has fewer batches takes part until the last rank is done. ImageNet's 50,000 held-out
  images take minutes, longer than a preemption notice (Slurm's --signal=B:USR1@120).
  """
  totals = tf.zeros([4])
  batches = iter(dataset)
  while True:
    batch = next(batches, None)
    if agree is not None:
      stop, more = (int(x) for x in agree(tf.constant([stop_code(), int(batch is not None)], tf.int32)).numpy())
      if stop:
        raise Stopped(stop)
      if not more:
        break
    elif batch is None:
      break
    if batch is not None:
      totals += eval_step(*batch)
      on_batch()
  loss_sum, top1, top5, count = (float(x) for x in allreduce_sum(totals).numpy())
  # Divided in float64: in float32, 285 / 300 is 0.94999999, and --target_top1=0.95 was missed
  # by an evaluation that printed 0.9500 (measured on digits).
  return HeldOut(top1=top1 / count, top5=top5 / count, loss=loss_sum / count, count=int(count))


def evaluator(eval_step, data, allreduce_sum, agree=None, stop_code=lambda: 0):
  """evaluate(on_batch) -> HeldOut over data's held-out split (data.eval()), or None when it
  has none: what the loop (training/loop.py) calls, every rank at the same step. agree,
  stop_code: held_out's (a stop between batches raises Stopped)."""
  def evaluate(on_batch):
    dataset = data.eval()
    return None if dataset is None else held_out(eval_step, dataset, allreduce_sum, on_batch, agree, stop_code)
  return evaluate


def over_ranks(hvd, eval_step, stop_code):
  """evaluator(data) -> evaluator's evaluate over Horovod's ranks: the sums [loss, top-1 hits, top-5
  hits, count] in one allreduce, and before each batch one small allreduce (Max) that agrees a stop
  request and whether any rank has a batch left (held_out)."""
  def for_data(data):
    return evaluator(eval_step, data, lambda sums: hvd.allreduce(sums, op=hvd.Sum, name="eval_totals"),
                     agree=lambda codes: hvd.allreduce(codes, op=hvd.Max, name="eval_stop"), stop_code=stop_code)
  return for_data


def target_summary(targets: EvalConfig, reached: dict) -> dict:
  """summary.json's time-to-accuracy keys. reached: {} until a target was met, then the
  seconds from start-up to the end of that evaluation, its step and its epoch."""
  return {"target_top1": targets.target_top1 or None, "target_top5": targets.target_top5 or None,
          "target_reached": bool(reached), "time_to_target_seconds": reached.get("seconds"),
          "target_step": reached.get("step"), "target_epoch": reached.get("epoch")}


def target_line(targets: EvalConfig, reached: dict, held: HeldOut | None, step: int, epoch: float) -> str:
  """The line before the summary of a run with a target: when it was reached, or that it was not."""
  given = " and ".join(f"--target_{name}={value:g}" for name, value in
                       (("top1", targets.target_top1), ("top5", targets.target_top5)) if value)
  metrics = f"eval top1 {held.top1:.4f} top5 {held.top5:.4f}" if held else "no held-out split"
  if reached:
    return (f"target reached: {given} at step {reached['step']} (epoch {reached['epoch']:.2f}), "
            f"{reached['seconds']:.1f} s after start-up; {metrics}")
  return f"target not reached: {given} by the end, step {step} (epoch {epoch:.2f}); {metrics}"
