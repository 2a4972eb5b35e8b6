"""The training loop: steps, evaluations, checkpoints and commits until the run ends, and a
frozen record of how it ended.

The loop owns the order of things and asks its parts for the work (a train step, an evaluation, a
save, a commit, each passed in), as orbit's Controller does: the same in train.py, each --elastic
world and tests.
What happens is told to hooks (Keras's callbacks): progress lines and TensorBoard, the watchdog,
the step variable, the noise scale, the time ledger; none is called by hand.

Whether a run ends is decided after each step (`_step`) and at each epoch's end (`_epoch_end`),
what is due by one predicate (`due`), and what is saved on the way out by one rule (`_finish`):

  finished      save, evaluate, commit
  target        nothing more (the evaluation that reached it was saved first)
  stopped       save (a stop at the last step is a finished run)
  diverged      nothing: the step's update was not applied, the newest checkpoint is good
  a save that finds inf/NaN in the weights turns any of these into a divergence (not reached)

Every evaluation comes after a save of its step, mid-epoch (--eval_every) as at an epoch's end and
at the run's: ImageNet's 50,000 held-out images take minutes, and a SIGTERM then is followed by
SIGKILL within 10 s (mpirun) or 5 s (Gloo's horovodrun). The epoch end's checkpoint is taken before
the epoch counts as ended, so a run stopped there evaluates that epoch when it resumes. A completed
evaluation is recorded (the position and eval-N.json beside checkpoint N: record()) and not repeated
on resume; a run restarted after it ended (finished, or its target met) says so and trains nothing
(cause OVER). An evaluation checks for a stop between its batches, agreed by every rank
(training/evaluation.py): stopped there, the run ends STOPPED with the step saved just before it.
"""
import dataclasses
import time
from typing import Callable

from training import evaluation
from training.ending import outcome


class NoProgress(RuntimeError):
  """An epoch gave no batch while the run has steps left: one sentence, the run ends."""


@dataclasses.dataclass(frozen=True)
class Policy:
  """When to evaluate and checkpoint, and what ends a run (from the run's Config)."""
  eval_every: int = 0          # steps into an epoch between held-out evaluations (0: epoch ends only)
  eval_images: int = 0         # the same spacing in images, where the batch can change (0: count steps)
  target_top1: float = 0.0     # held-out top-1 that ends the run (0: none)
  target_top5: float = 0.0
  checkpoint_every: int = 0    # steps between checkpoints besides epoch ends (0: epoch ends only)
  fp16: bool = False           # an overflow skips a step instead of ending the run
  max_skipped: int = 10        # fp16: skipped steps in a row that count as a divergence
  eval_every_epochs: int = 1   # epoch ends between evaluations (MLPerf's: 4); the run's end always evaluates

  @classmethod
  def of(cls, config, eval_batch: int = 0) -> "Policy":
    """eval_batch: the global batch --eval_every's steps are of (the world's as the flags set it): a
    batch controller's larger K then does not space the evaluations out (0: this config's steps)."""
    e = config.evaluation
    return cls(eval_every=e.eval_every, eval_images=e.eval_every * eval_batch, target_top1=e.target_top1,
               target_top5=e.target_top5,
               checkpoint_every=config.run.checkpoint_every, fp16=config.optim.precision == "fp16",
               max_skipped=config.faults.max_skipped_steps, eval_every_epochs=e.eval_every_epochs)


@dataclasses.dataclass(frozen=True)
class Reached:
  """When a target was met: seconds since start-up (MLPerf's clock), the step and the epoch."""
  seconds: float
  step: int
  epoch: float


# Why a run ended: Ending.cause. RESIZED ends a stretch, not the run: the batch controller
# (training/adaptive/batch_control.py) chose another accumulation K, and train.py goes on at it. OVER: a run
# started again after it had ended (finished with its last evaluation, or its target met): nothing to do.
FINISHED, NOTHING_LEFT, TARGET, SIGNAL, RESIZED, OVER = "finished", "nothing_left", "target", "signal", "resized", "over"
NONFINITE_STEP, NONFINITE_WEIGHTS = "nonfinite_step", "nonfinite_weights"


@dataclasses.dataclass(frozen=True)
class Ending:
  """How a run (or, --elastic, a world's stretch of it) ended.

  status: outcome.OK, TARGET_REACHED, STOPPED or DIVERGED; cause: one of the names above;
  step: updates applied; lr: the last step's LR; skipped: fp16 overflow-skipped steps in a row;
  held: the newest held-out metrics (None: none taken); stop_code: the agreed stop request;
  images: the images trained since the run began (every world's global batch, step by step);
  epochs: the schedule's (AdaScale: base-batch epochs, which the images exceed where r < S).
  """
  status: int
  cause: str
  step: int
  epochs: float
  lr: float
  skipped: int
  held: object = None
  reached: Reached | None = None
  stop_code: int = 0
  images: int = 0
  gain: float | None = None  # AdaScale: the last step's r (None: the linear rule)
  tau: float = 0.0           # AdaScale: the base-batch steps its schedule counted
  resize_to: int = 0         # RESIZED: the accumulation steps the run goes on at


def due(step: int, every: int) -> bool:
  """Whether work done every `every` steps falls at `step` (pure; every=0: never, step 0: never).

  big_vision's one "is it time" predicate: evaluations count steps into the epoch (a spacing
  that does not divide the epoch, 937 steps every 235, gives none a step before the epoch
  end's), checkpoints count the run's steps.
  """
  return bool(every) and step > 0 and step % every == 0


@dataclasses.dataclass(frozen=True)
class Work:
  """What the loop asks its parts for (Loop's `work`).

  evaluate(on_batch) -> HeldOut or None (no held-out split); on_batch() after each batch; it raises
  training.evaluation.Stopped when a stop was agreed between its batches; save(step) -> bool: False
  when some rank's weights hold inf/NaN (nothing written); schedule(step) -> LR; stop_code() -> this
  rank's stop request (0: none); average_statistics(): the ranks' BatchNorm statistics made one model's
  (comm.sync.average_statistics, a collective) before every evaluation, save and commit, once a step;
  record(step, record): a completed evaluation's record (rank 0 keeps it beside its checkpoint);
  resize(step) -> a shape.Transition or None (the stretch ends RESIZED after that step, nothing saved:
  the run goes on in this process); clock() -> seconds since start-up; gain: None (the linear rule)
  or optimizers/adascale.Gain: each step's LR is r x schedule(tau), and the course's clock tau moves
  on by r."""
  evaluate: Callable
  save: Callable
  schedule: Callable
  stop_code: Callable
  average_statistics: Callable = lambda: None
  record: Callable = lambda step, record: None
  resize: Callable | None = None
  clock: Callable = time.time
  gain: object = None


class Loop:
  """Train until the run ends: run() -> Ending. course: training/course.py's Course or Elastic (where
  the run is in the data, when it ends, commits); data: input/pipeline's Input (steps_per_epoch;
  course.batches asks it for an epoch's batches); train_step(images, labels, lr, stop) -> out with
  .loss, .correct, .finite, .stop (training/step.py); work: what it asks for (Work)."""

  def __init__(self, course, data, train_step, *, work: Work, policy: Policy, hooks=()):
    self.course, self.data, self.train_step, self.policy, self.hooks = course, data, train_step, policy, list(hooks)
    self.evaluate_fn, self.save_fn, self.schedule, self.stop_code = work.evaluate, work.save, work.schedule, \
        work.stop_code
    self.clock, self.gain, self.resize, self.record = work.clock, work.gain, work.resize, work.record
    self.average_statistics, self.averaged_at = work.average_statistics, None  # the step they were last averaged
    self.resize_to, self.spe = 0, data.steps_per_epoch
    self.held = self.reached = None
    self.skipped = self.agreed_stop = 0
    self.saved = None  # the step of this loop's last good save
    self.r = self.gain() if self.gain else 1.0  # the last step's gain (AdaScale), for the hooks and the summary
    self.lr = self._lr()

  def _lr(self) -> float:
    """This step's LR: the schedule at the course's clock, times r under AdaScale (the base batch's
    schedule read at tau, its warmup's start and its peak scaled alike)."""
    lr = self.schedule(self.course.nominal_step(self.spe))
    return lr * self.r if self.gain else lr

  def _tell(self, event: str, *args) -> None:
    for hook in self.hooks:
      getattr(hook, event)(*args)

  def run(self) -> Ending:
    course = self.course
    begun = self._resumed()
    if begun:
      return begun
    while True:
      fresh = course.fresh_epoch()
      # Building a new epoch's dataset (and tracing its functions) is the epoch change's work.
      self._tell("before", "input" if not fresh or not course.step else "epoch", course.step)
      epoch, batches = course.batches(self.data)
      end, taken = None, 0
      for images, labels in batches:
        taken += 1
        end = self._step(images, labels)
        if end:
          break
      else:
        end = self._epoch_end(epoch, taken, fresh)
      if end:
        if end[1] == RESIZED:
          return self._ending(*end)
        return self._finish(*end)

  def _resumed(self) -> Ending | None:
    """What the run's step holds before any training (a run started again): the Ending when there
    is nothing to train, else None. Every rank holds the same position, so all decide alike."""
    course, spe = self.course, self.spe
    record = self._record()
    if record is not None and self._meets_target(record):  # its target was met there: it ended
      self._recall(record)
      return self._ending(outcome.TARGET_REACHED, OVER)
    if course.finished(spe):
      if record is not None:  # finished, its last evaluation done: nothing to do
        self._recall(record)
        return self._ending(outcome.OK, OVER)
      # Stopped during its last evaluation: that evaluation (ended by a stop again, it says so).
      end = self._evaluate()
      if end == SIGNAL:
        return self._ending(outcome.STOPPED, SIGNAL)
      return self._ending(outcome.TARGET_REACHED, TARGET) if end == TARGET else self._ending(outcome.OK, NOTHING_LEFT)
    into = course.into_epoch(spe)
    if course.step and self._eval_due(into, course.position.global_batch) and record is None:
      end = self._evaluate()  # stopped during a mid-epoch evaluation: it runs before training goes on
      if end:
        return self._finish(*self._ended_by(end))
    return None

  def _step(self, images, labels):
    """One step and what is due after it; (status, cause) when the run ends here, else None."""
    course, spe = self.course, self.spe
    if self.gain:  # from the estimates of the steps before: the same on every rank
      self.r = self.gain()
    self.lr = self._lr()
    self._tell("before", "step", course.step)
    out = self.train_step(images, labels, self.lr, self.stop_code())
    # One host read per step, of verdicts identical on every rank: all ranks leave together.
    verdict = outcome.after_step(bool(out.finite), int(out.stop), self.skipped, self.policy.fp16,
                                 self.policy.max_skipped)
    self.skipped, self.agreed_stop = verdict.skipped, int(out.stop)
    if verdict.status == outcome.DIVERGED:
      return outcome.DIVERGED, NONFINITE_STEP  # not applied: the weights are the step before's
    # AdaScale's clock counts updates made: an fp16 step skipped for an overflow moves it by nothing.
    course.after_step(self.r if self.gain and bool(out.finite) else 0.0)
    step = course.step
    self._tell("after_step", step, course.nominal_step(spe), out, self.lr)
    if course.finished(spe):  # a stop requested at the last step too: nothing is left to resume
      return outcome.OK, FINISHED
    if verdict.status == outcome.STOPPED:
      return outcome.STOPPED, SIGNAL
    into = course.into_epoch(spe)
    evaluating = self._eval_due(into)
    # A --checkpoint_every save is a commit too (--elastic: a world change resumes from it), and every
    # evaluation is saved first (the module docstring); at an epoch's last step the epoch end saves,
    # once (its finiteness agreed once).
    saving = (due(step, self.policy.checkpoint_every) or evaluating) and into
    if saving and not self._save(step):
      return outcome.DIVERGED, NONFINITE_WEIGHTS
    if evaluating and (end := self._evaluate()):
      return self._ended_by(end)
    self._commit(step, force=bool(saving))
    if self.resize and into:  # an epoch's last step: its end comes first, in this stretch
      self.resize_to = self.resize(step) or 0
      if self.resize_to:
        return outcome.OK, RESIZED
    # The next batch is read next: a stuck reader shows as 'input'; after an epoch's last step the
    # epoch's iterator runs out and the next one is built ('epoch': slower, and first-time at first).
    self._tell("before", "input" if into else "epoch", step)
    return None

  def _epoch_end(self, epoch: int, taken: int, fresh: bool):
    """The epoch's batches ran out after `taken` steps: save, evaluate, commit; (status, cause)
    if the run ends here. A pass from the epoch's start that took no batch would end epoch
    after epoch with no step, evaluating and saving the same step each time."""
    course = self.course
    if not taken and fresh and not course.finished(self.spe):
      last = course.last_step(self.spe)
      raise NoProgress(
          f"epoch {epoch} gave no batch at step {course.step} of {last}, though its data should fill "
          f"{self.spe} steps: the training files hold fewer records than they did when the run began "
          "(files removed, or records skipped as unreadable); restore them in --data_dir and run the same "
          "command to resume from the newest checkpoint")
    if course.finished(self.spe):
      return outcome.OK, FINISHED
    step = course.step
    if not self._save(step):  # before the evaluation, and before the epoch counts as ended (module docstring)
      return outcome.DIVERGED, NONFINITE_WEIGHTS
    end = self._evaluate() if (epoch + 1) % self.policy.eval_every_epochs == 0 else None
    if end == SIGNAL:  # the epoch's end is not counted: its evaluation runs again after the resume
      return self._ended_by(end)
    course.epoch_ended(epoch)
    if end:
      return self._ended_by(end)
    self._commit(step, force=True)
    self._tell("after_epoch", epoch)
    return None

  def _finish(self, status: int, cause: str) -> Ending:
    """The one rule for what is saved on the way out (the module docstring)."""
    step = self.course.step
    if status != outcome.DIVERGED and self.saved != step:  # a target met at an epoch's end was saved there
      if not self._save(step):
        return self._ending(outcome.DIVERGED, NONFINITE_WEIGHTS)
    if cause == FINISHED:
      end = self._evaluate()
      if end:
        status, cause = self._ended_by(end)
      if end != SIGNAL:  # The run's last commit asks for no world change: one would start a world with nothing to train.
        self._commit(step, force=True, final=True)
    return self._ending(status, cause)

  def _ending(self, status: int, cause: str) -> Ending:
    # A target met and then inf/NaN weights at its save: diverged, not reached (nothing saved, nothing to export).
    reached = self.reached if status == outcome.TARGET_REACHED else None
    return Ending(status=status, cause=cause, step=self.course.step, epochs=self.course.epochs(self.spe),
                  lr=self.lr, skipped=self.skipped, held=self.held, reached=reached,
                  stop_code=self.agreed_stop, images=self.course.position.images,
                  gain=self.r if self.gain else None, tau=self.course.position.tau, resize_to=self.resize_to)

  def _one_model(self, step: int) -> None:
    """One model before it is measured, saved or committed (every rank reaches the same steps)."""
    if self.averaged_at != step:
      self.average_statistics()
      self.averaged_at = step

  def _eval_due(self, into: int, last_batch: int = 0) -> bool:
    """Whether an --eval_every evaluation falls after the step just taken (into: its steps into the
    epoch, 0 at the epoch's end, which evaluates anyway): every eval_every steps into the epoch, or,
    where the batch can change, each time the epoch's images cross a multiple of eval_images (in steps
    of K = 2 they came 3,712 images apart, not 1,875). last_batch: the images that step took."""
    p = self.policy
    if not into or not p.eval_every or self._end_evaluates_soon(into):
      return False
    if not p.eval_images:
      return due(into, p.eval_every)
    now = self.course.epoch_images()
    return now // p.eval_images > (now - (last_batch or self.course.data_config.global_batch)) // p.eval_images

  def _end_evaluates_soon(self, into: int) -> bool:
    """Whether an evaluating epoch end is under half an --eval_every interval away: it stands for the one
    due here (make slow-links evaluated at 232 and 234 of 234 steps, 2.2 s each, before)."""
    p, course, left = self.policy, self.course, self.spe - into
    if (course.position.epoch + 1) % p.eval_every_epochs:
      return False  # this epoch's end does not evaluate
    batch = course.position.global_batch or course.data_config.global_batch
    return 2 * left < p.eval_every if not p.eval_images else 2 * left * batch < p.eval_images

  @staticmethod
  def _ended_by(end: str) -> tuple[int, str]:
    """(status, cause) of an evaluation that ended the run: its target met, or a stop during it."""
    return (outcome.TARGET_REACHED, TARGET) if end == TARGET else (outcome.STOPPED, SIGNAL)

  def _record(self) -> dict | None:
    """The record of the evaluation completed at this step, if one was (the position's)."""
    record = self.course.position.evaluated
    return record if record and record.get("step") == self.course.step else None

  def _meets_target(self, record: dict) -> bool:
    p = self.policy
    return outcome.after_eval(record["top1"], record["top5"], p.target_top1, p.target_top5,
                              self.skipped).status == outcome.TARGET_REACHED

  def _recall(self, record: dict) -> None:
    """An evaluation completed before a restart: its figures and, if it met the target, its time."""
    self.held = evaluation.HeldOut(top1=record["top1"], top5=record["top5"], loss=record["loss"],
                                   count=record["count"])
    if self._meets_target(record):
      self.reached = Reached(seconds=record["seconds"], step=record["step"], epoch=record["epoch"])

  def _evaluate(self) -> str | None:
    """The held-out metrics, told to the hooks and recorded: TARGET when they meet it, SIGNAL when a
    stop was agreed between its batches (nothing recorded), else None. One completed before a
    restart (its record) is not repeated."""
    step, nominal, record = self.course.step, self.course.nominal_step(self.spe), self._record()
    if record is not None:
      self._recall(record)
      self._tell("evaluated_before", step, nominal, self.held)
      return TARGET if self.reached else None
    self._one_model(step)
    self._tell("before", "eval", step)
    try:
      held = self.evaluate_fn(lambda: self._tell("after_eval_batch", step))
    except evaluation.Stopped as stop:
      self.agreed_stop = stop.code
      return SIGNAL
    if held is not None:
      self.held = held
    self._tell("after_eval", step, nominal, held)
    if held is None:
      return None
    # MLPerf's time to train: from start-up to the end of the evaluation that reached the target.
    record = {"step": step, "top1": held.top1, "top5": held.top5, "loss": held.loss, "count": held.count,
              "seconds": round(self.clock(), 1), "epoch": round(self.course.epochs(self.spe), 3)}
    self.course.evaluated(record)
    self.record(step, record)
    if not self._meets_target(record):
      return None
    self.reached = Reached(seconds=record["seconds"], step=step, epoch=record["epoch"])
    return TARGET

  def _save(self, step: int) -> bool:
    self._one_model(step)
    self._tell("before", "checkpoint", step)
    ok = self.save_fn(step)
    self._tell("after_save", step)
    if ok:
      self.saved = step
    return ok

  def _commit(self, step: int, force: bool = False, final: bool = False) -> None:
    if self.course.commit_due(step, force):
      self._one_model(step)
      self._tell("before_commit", step)
    if self.course.commit(step, force, final):
      self._tell("after_commit", step)
