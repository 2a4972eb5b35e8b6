"""What listens to the loop (training/loop.Hook): the stall watchdog, the progress lines and
TensorBoard, and the step variable checkpoints and commits hold."""
from training.loop import Hook


class Watching(Hook):
  """The watchdog (training/watchdog.py): each kind of work marked as it begins, progress
  after each step (timed: the stall limit follows the step time), evaluation batch and save."""

  def __init__(self, watchdog):
    self.watchdog = watchdog

  def before(self, phase, step):
    self.watchdog.mark(phase)

  def after_step(self, step, nominal, out, lr):
    self.watchdog.progress(step)

  def after_eval_batch(self, step):
    self.watchdog.progress(step, "eval", timed=False)

  def after_save(self, step):
    self.watchdog.progress(step, "checkpoint", timed=False)


class Reporting(Hook):
  """progress.Progress: a line and scalars every --log_every steps and after each evaluation;
  evaluations and saves are not training time, so its clock restarts after them."""

  def __init__(self, progress):
    self.progress = progress

  def after_step(self, step, nominal, out, lr):
    self.progress.step(nominal, out.loss, out.correct, lr)

  def after_eval(self, step, nominal, held):
    if held is not None:
      self.progress.evaluation(nominal, held.top1, held.top5, held.loss)
    self.progress.resume()

  def after_save(self, step):
    self.progress.resume()


class StepVariable(Hook):
  """The checkpointed step (a tf.Variable): a checkpoint or a commit holds the step it was taken at."""

  def __init__(self, variable):
    self.variable = variable

  def after_step(self, step, nominal, out, lr):
    self.variable.assign(step)
