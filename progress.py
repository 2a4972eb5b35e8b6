"""Progress lines, TensorBoard scalars and throughput of a training run (rank 0 writes)."""
import datetime
import json
import os
import sys
import time

import tensorflow as tf


def eval_line(epoch: float, top1: float, top5: float, loss: float) -> str:
  """The held-out evaluation's line, in a run and under --eval_only alike (scripts compare them)."""
  return f"epoch {epoch:6.2f}  eval top1 {top1:.4f}  top5 {top5:.4f}  loss {loss:.4f}"


def emit(line: str, stream=None) -> None:
  """Write one whole line in a single write, then flush.

  mpirun --tag-output (what horovodrun uses) prefixes every write it sees;
  print() writes the text and the newline separately, which leaves a stray
  "[1,0]<stderr>:" tag at the end of each line.
  """
  stream = stream or sys.stderr
  stream.write(line + "\n")
  stream.flush()


def logger(enabled):
  """log(fmt, *args): a timestamped line on stderr, or nothing where not enabled (rank != 0).
  enabled: a bool, or a function asked at each line (--elastic: rank 0 may change)."""
  def log(fmt, *args):
    if enabled() if callable(enabled) else enabled:
      emit(time.strftime("%H:%M:%S ") + (fmt % args if args else fmt))
  return log


def write_json_atomic(path: str, payload: dict) -> None:
  """Write JSON so that a reader never sees half a file (tmp file + rename)."""
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w") as fh:
    json.dump(payload, fh, indent=2, default=str)
    fh.write("\n")
  os.replace(tmp, path)


class Progress:
  """Accumulates step results on the device and reports every log_every steps.

  Loss and correct counts stay tensors between reports: reading them every
  step would force a host sync per step. Throughput excludes the first step,
  which pays for tracing the tf.function.
  """

  def __init__(self, is_chief, global_batch, step_batch, start_step, last_step,
               steps_per_epoch, log_every, writer, noise=None, adascale=None):
    self.is_chief = is_chief
    self.global_batch = global_batch
    self.step_batch = step_batch  # images per rank per step (all its micro-batches)
    self.start_step = start_step
    self.last_step = last_step
    self.steps_per_epoch = steps_per_epoch
    self.log_every = log_every
    self.writer = writer
    self.noise = noise  # training/noise_scale.NoiseScale, or None: not measured
    # --lr_scaling=adascale: () -> (r, S, tau, data epochs) now; the schedule's step is then tau, in
    # base-batch steps (training/course.py), and the lines come every log_every updates.
    self.adascale = adascale
    self._loss = self._correct = 0.0
    self._count = 0
    self._last = None                # perf_counter() after the previous step
    self._train_seconds = 0.0        # time inside training steps, after the first
    self._timed_steps = 0
    self._window = (0.0, 0)          # (train seconds, timed steps) at the last report

  def resume(self):
    """Restart the clock after evaluation or a checkpoint, which are not training time."""
    self._last = time.perf_counter()

  def step(self, step, loss, correct, lr, updates=None):
    """step: the schedule's (the line's and TensorBoard's); updates: the updates applied, which set
    the lines' cadence and TensorBoard's axis under AdaScale (None: step)."""
    now = time.perf_counter()
    if self._last is not None:
      self._train_seconds += now - self._last
      self._timed_steps += 1
    self._last = now
    self._loss += loss
    self._correct += correct
    self._count += 1
    tick = step if updates is None else updates
    if tick % self.log_every and step < self.last_step:
      return
    loss, top1 = float(self._loss) / self._count, float(self._correct) / (self._count * self.step_batch)
    self._loss = self._correct = 0.0
    self._count = 0
    seconds, steps = self._train_seconds - self._window[0], self._timed_steps - self._window[1]
    rate = steps * self.global_batch / seconds if seconds > 0 and steps else 0.0
    self._window = (self._train_seconds, self._timed_steps)
    if not self.is_chief:
      return
    left = max(0.0, self.last_step - step)  # in the schedule's steps
    ada = ""
    if self.adascale:  # each update moves the schedule's clock (base-batch steps) by r
      r, scale, tau, data_epochs = self.adascale()
      left /= r
      ada = f"  r {r:5.2f}  data epoch {data_epochs:6.2f}"
    eta = left * self.global_batch / rate if rate else 0.0
    epoch = step / self.steps_per_epoch
    b_simple = self.noise.b_simple if self.noise else None
    noise = "" if self.noise is None else f"  B_simple {b_simple:7.0f}" if b_simple else "  B_simple       -"
    # AdaScale: the updates made (how many are left depends on the gains to come; the eta guesses from r now).
    where = f"update {tick:>6d}" if self.adascale else f"step {step:>6d}/{self.last_step}"
    emit(f"epoch {epoch:6.2f}  {where}  loss {loss:.4f}  "
         f"top1 {top1:.3f}  lr {lr:.5f}{noise}{ada}  {rate:8.1f} img/s  "
         f"eta {datetime.timedelta(seconds=int(eta))}")
    with self.writer.as_default(step=tick):
      tf.summary.scalar("train/loss", loss)
      tf.summary.scalar("train/top1", top1)
      tf.summary.scalar("train/lr", lr)
      if rate:
        tf.summary.scalar("train/images_per_sec", rate)
      if b_simple:  # |G|^2 and tr(Sigma) too: which of the two moved B_simple
        tf.summary.scalar("noise/b_simple", b_simple)
        tf.summary.scalar("noise/grad_sq", self.noise.grad_sq)
        tf.summary.scalar("noise/trace_sigma", self.noise.trace_sigma)
      if self.adascale:  # the gain, and both clocks: the schedule's base-batch epochs and the data's
        tf.summary.scalar("adascale/gain", r)
        tf.summary.scalar("adascale/tau", tau)
        tf.summary.scalar("adascale/base_epochs", epoch)
        tf.summary.scalar("adascale/data_epochs", data_epochs)

  def evaluation(self, step, top1, top5, loss, updates=None):
    """Rank 0's line and scalars of a held-out evaluation (global fractions, mean loss); None: no split.
    step, updates: as step()'s."""
    if not self.is_chief or top1 is None:
      return
    emit(eval_line(step / self.steps_per_epoch, top1, top5, loss))
    with self.writer.as_default(step=step if updates is None else updates):
      tf.summary.scalar("eval/top1", top1)
      tf.summary.scalar("eval/top5", top5)
      tf.summary.scalar("eval/loss", loss)
    self.writer.flush()

  def evaluated_before(self, step, top1, loss):
    """Rank 0's line for an evaluation completed before a restart, not repeated (its eval line was printed then)."""
    if self.is_chief:
      emit(f"epoch {step / self.steps_per_epoch:6.2f}  its evaluation completed before the restart (top1 {top1:.4f}  "
           f"loss {loss:.4f}): not repeated")


def time_scalars(writer, epoch: int, groups: dict) -> None:
  """TensorBoard's time/<group> scalars of one epoch (training/ledger.py's groups, seconds), at the
  epoch's number: where each epoch's wall time went."""
  with writer.as_default(step=epoch):
    for name, seconds in groups.items():
      tf.summary.scalar(f"time/{name}", seconds)
  writer.flush()
