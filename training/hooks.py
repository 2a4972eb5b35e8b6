"""What listens to the loop (Hook: what training/loop.py tells, in order): the stall watchdog, the
progress lines and TensorBoard, the step variable checkpoints and commits hold, the gradient noise
scale and the time ledger."""
from progress import time_scalars
from training import ledger as ledger_lib, step as step_lib


class Hook:
  """What the loop tells, in order; a hook overrides what it needs.

  before(phase, step): 'input', 'epoch' (the epoch's iterator runs out, the next is built), 'step',
    'eval' or 'checkpoint' work begins;
  after_step(step, nominal, out, lr): a step's update was applied (out: the step's outputs,
    .loss and .correct; nominal: the step the schedule and the progress lines are at);
  after_eval_batch(step), after_eval(step, nominal, held), after_save(step);
  before_commit(step), after_commit(step): --elastic's commit (before_commit only where one is due);
  after_epoch(epoch): epoch `epoch` ended, saved, evaluated and committed;
  evaluated_before(step, nominal, held): the evaluation at this step completed before a restart
  (its record): not repeated.
  """

  def before(self, phase: str, step: int) -> None: ...
  def after_step(self, step: int, nominal: int, out, lr: float) -> None: ...
  def after_eval_batch(self, step: int) -> None: ...
  def after_eval(self, step: int, nominal: int, held) -> None: ...
  def after_save(self, step: int) -> None: ...
  def before_commit(self, step: int) -> None: ...
  def after_commit(self, step: int) -> None: ...
  def after_epoch(self, epoch: int) -> None: ...
  def evaluated_before(self, step: int, nominal: int, held) -> None: ...


class Watching(Hook):
  """The watchdog (training/ending/watchdog.py): each phase marked as it begins ('input', 'epoch',
  'step', 'eval', 'checkpoint': its stall limit follows what its kind has taken so far), progress
  after each step (timed: the typical step time), evaluation batch, evaluation and save."""

  def __init__(self, watchdog):
    self.watchdog = watchdog

  def before(self, phase, step):
    self.watchdog.mark(phase)

  def after_step(self, step, nominal, out, lr):
    self.watchdog.progress(step)

  def after_eval_batch(self, step):
    self.watchdog.progress(step, "eval", timed=False)

  def after_eval(self, step, nominal, held):
    self.watchdog.evaluated(step)

  def after_save(self, step):
    self.watchdog.progress(step, "checkpoint", timed=False)


class Reporting(Hook):
  """progress.Progress: a line and scalars every --log_every steps and after each evaluation;
  evaluations and saves are not training time, so its clock restarts after them. by_updates:
  AdaScale's schedule step is a fraction, so the updates set the cadence and TensorBoard's axis."""

  def __init__(self, progress, by_updates: bool = False):
    self.progress, self.by_updates = progress, by_updates

  def after_step(self, step, nominal, out, lr):
    self.progress.step(nominal, out.loss, out.correct, lr, updates=step if self.by_updates else None)

  def after_eval(self, step, nominal, held):
    if held is not None:
      self.progress.evaluation(nominal, held.top1, held.top5, held.loss, updates=step if self.by_updates else None)
    self.progress.resume()

  def after_save(self, step):
    self.progress.resume()

  def evaluated_before(self, step, nominal, held):
    self.progress.evaluated_before(nominal, held.top1, held.loss)


class StepVariable(Hook):
  """The checkpointed step (a tf.Variable): a checkpoint or a commit holds the step it was taken at."""

  def __init__(self, variable):
    self.variable = variable

  def after_step(self, step, nominal, out, lr):
    self.variable.assign(step)


class Measuring(Hook):
  """The gradient noise scale (training/noise_scale.NoiseScale), fed each step's two squared
  norms (training/step.py) at this world's two batch sizes. Before Reporting in the hooks, so
  a progress line shows the step it ends."""

  def __init__(self, tracker, b_small: int, b_big: int, keep=lambda state: None):
    self.tracker, self.b_small, self.b_big, self.keep = tracker, b_small, b_big, keep

  def after_step(self, step, nominal, out, lr):
    self.tracker.update(float(out.sq_small), float(out.sq_big), self.b_small, self.b_big)
    self.keep(self.tracker.state())

  @classmethod
  def for_world(cls, tracker, ranks: int, data_config, log,
                keep=lambda state: None) -> tuple[str | None, "Measuring | None"]:
    """(the step's noise kind, this hook) for a world, or (None, None): not asked for (tracker
    None), or one rank without accumulation (one gradient a step, said once in the log).
    keep(state): after each step, the estimates to checkpoint (training/course.Course.keep_noise)."""
    sizes = step_lib.noise_sizes(ranks, data_config.batch_size, data_config.accumulation_steps) if tracker else None
    if sizes is None:
      if tracker is not None and not tracker.steps:
        log("noise scale: not measured: one rank without accumulation has one gradient a step (2+ ranks "
            "or --accumulation_steps >= 2 give the two it compares)")
      elif tracker is not None and tracker.b_simple is not None:  # a requeue or a world of one rank
        log("noise scale: not measured in this world (one rank without accumulation has one gradient a step); "
            "AdaScale's gain goes on from the estimates the run had, B_simple %.0f", tracker.b_simple)
      return None, None
    kind, b_small, b_big = sizes
    return kind, cls(tracker, b_small, b_big, keep)


class Timing(Hook):
  """The time ledger (training/ledger.py): each phase the loop tells charged to its part; after a
  save, an evaluation or a commit the run is in no named part until the loop says the next.

  images: a step's global batch. opening: the group charged with this stretch's opening work, its
  first batch (an iterator built, its shuffle buffer filled) and, where `traced` (the step function
  is new: its first call traces it), its first step: 'startup' for the run's first stretch,
  'world_change' for a later world's, 'resize' for one after a change of K or compression.
  writer: rank 0's TensorBoard writer, which gets each epoch's groups (None: not rank 0)."""
  PARTS = {"step": "steps.compute", "input": "steps.input_wait", "epoch": "epoch_input",
           "eval": "evaluation", "checkpoint": "checkpoint"}

  def __init__(self, ledger, images: int, opening: str, traced: bool = True, writer=None):
    self.ledger, self.images, self.opening, self.traced, self.writer = ledger, images, opening, traced, writer
    self.steps = 0

  def before(self, phase, step):
    part = self.PARTS.get(phase, ledger_lib.UNACCOUNTED)
    if phase in ("input", "epoch") and not self.steps:
      part = f"{self.opening}.first_input"
    elif phase == "step" and self.traced and not self.steps:
      part = f"{self.opening}.first_step"
    self.ledger.enter(part)

  def after_step(self, step, nominal, out, lr):
    self.ledger.stepped(self.images, timed=self.steps > 0 or not self.traced)
    self.steps += 1

  def after_eval(self, step, nominal, held):
    self.ledger.enter(ledger_lib.UNACCOUNTED)

  def after_save(self, step):
    self.ledger.enter(ledger_lib.UNACCOUNTED)

  def before_commit(self, step):
    self.ledger.enter("commit")

  def after_commit(self, step):
    self.ledger.enter(ledger_lib.UNACCOUNTED)

  def after_epoch(self, epoch):
    if self.writer is not None:
      time_scalars(self.writer, epoch + 1, self.ledger.since_epoch_mark())
