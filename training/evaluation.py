"""Held-out evaluation over every rank's share: global counts, not an average of rank averages."""
import dataclasses
import time

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


AGREE_SECONDS = 1.0   # the batches between two agreements take about this long (a stop is seen within it)
MAX_BETWEEN = 64      # and are at most this many


def held_out(eval_step, dataset, allreduce_sum, on_batch=lambda: None, agree=None, stop_code=lambda: 0,
             clock=time.perf_counter) -> HeldOut:
  """Run eval_step (training/step.py: [loss sum, top-1 hits, top-5 hits, count] per batch) over
  this rank's share of the split, add the sums over ranks (allreduce_sum: a float32 (4,) ->
  its sum over ranks; one collective, every rank calls it) and divide once.

  Dividing the global sums weighs every example alike; a mean of rank means would weigh a
  rank's short last batch, or a rank with fewer examples, as much as a full one.
  on_batch() after each batch: the watchdog's progress.

  agree(int32 [stop, more, -n]) -> its max over ranks (one small allreduce; None: one process alone):
  every rank says whether it was asked to stop, whether it has a batch left, and how many batches it
  would run before the next agreement (n: about AGREE_SECONDS of its batches, 1 before it has timed
  one); a stop anywhere ends the evaluation everywhere (Stopped) within about a second, a rank whose
  share has fewer batches takes part until the last rank is done, and every rank runs the smallest n
  (the max of -n), so all meet at the same agreements. ImageNet's 50,000 held-out images take
  minutes, longer than a preemption notice; an agreement every batch cost one collective and a host
  read per batch.
  """
  totals = tf.zeros([4])
  batches = iter(dataset)
  batch = next(batches, None)
  between, per_batch = MAX_BETWEEN, None
  while True:
    if agree is not None:
      mine = min(MAX_BETWEEN, max(1, int(AGREE_SECONDS / per_batch))) if per_batch else 1
      stop, more, least = (int(x) for x in agree(tf.constant(
          [stop_code(), int(batch is not None), -(mine if batch is not None else MAX_BETWEEN)], tf.int32)).numpy())
      if stop:
        raise Stopped(stop)
      if not more:
        break
      between = -least
    elif batch is None:
      break
    start, ran = clock(), 0
    while batch is not None and (agree is None or ran < between):
      totals += eval_step(*batch)
      on_batch()
      ran += 1
      batch = next(batches, None)
    if ran:
      per_batch = (clock() - start) / ran
  loss_sum, top1, top5, count = (float(x) for x in allreduce_sum(totals).numpy())
  # Divided in float64: in float32, 285 / 300 is 0.94999999, and --target_top1=0.95 was missed
  # by an evaluation that printed 0.9500 (measured on digits).
  return HeldOut(top1=top1 / count, top5=top5 / count, loss=loss_sum / count, count=int(count))


def evaluator(eval_step, data, allreduce_sum, agree=None, stop_code=lambda: 0):
  """evaluate(on_batch) -> HeldOut over data's held-out split (data.eval(), built once by the input
  and iterated again at each evaluation), or None when it has none: what the loop
  (training/loop.py) calls, every rank at the same step. agree, stop_code: held_out's (a stop
  between batches raises Stopped)."""
  def evaluate(on_batch):
    dataset = data.eval()
    return None if dataset is None else held_out(eval_step, dataset, allreduce_sum, on_batch, agree, stop_code)
  return evaluate


def over_ranks(hvd, eval_step, stop_code):
  """evaluator(data) -> evaluator's evaluate over Horovod's ranks: the sums [loss, top-1 hits, top-5
  hits, count] in one allreduce, and about once a second one small allreduce (Max) that agrees a stop
  request, whether any rank has a batch left and the batches until the next (held_out)."""
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
