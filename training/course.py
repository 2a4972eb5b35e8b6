"""Where a run is and when it ends: by steps in a fixed world, or by the data (--elastic).

train.py's loop asks its course for the next batches, the step the LR schedule and the
progress line are at, whether an evaluation or the end is due, and tells it of each step,
each epoch's end and each checkpoint. Steps is the plain run: the step alone says where it
is (epoch, offset = divmod(step, steps per epoch)). Elastic counts what the worlds trained
on (training/elastic.Position), since the global batch, and so the steps an epoch has,
change with the world; it commits the state every commit_every steps.
"""
import time

from flags.config import RunConfig


class Steps:
  """A run of one world: step s is epoch s // steps_per_epoch, offset s % steps_per_epoch."""

  position = None  # no elastic position to checkpoint

  def __init__(self, step: int, run: RunConfig):
    self.step, self.run = step, run

  def last_step(self, steps_per_epoch: int) -> int:
    total = int(round(self.run.epochs * steps_per_epoch))
    return min(total, self.run.max_steps) if self.run.max_steps else total

  def finished(self, steps_per_epoch: int) -> bool:
    return self.step >= self.last_step(steps_per_epoch)

  def nominal_step(self, steps_per_epoch: int) -> int:
    return self.step

  def epochs(self, steps_per_epoch: int) -> float:
    return self.step / steps_per_epoch

  def epoch_now(self, steps_per_epoch: int) -> int:
    """The epoch the next batches come from."""
    return self.step // steps_per_epoch

  def into_epoch(self, steps_per_epoch: int) -> int:
    return self.step % steps_per_epoch

  def batches(self, data):
    """(epoch, this rank's batches from the step to the epoch's end or the last step)."""
    epoch, offset = divmod(self.step, data.steps_per_epoch)
    return epoch, data.train_epoch(epoch, first_step=offset,
                                   count=self.last_step(data.steps_per_epoch) - self.step)

  def after_step(self) -> None:
    self.step += 1

  def epoch_ended(self, epoch: int) -> None:
    """The step already says so."""

  def commit(self, step: int, force: bool = False) -> bool:
    """Nothing to commit in a fixed world."""
    return False


class Elastic:
  """A run whose world may change (training/elastic.py): the state's Position says where it is.

  Epochs are counted in images, so the LR schedule and the end of the run stay where they
  are in the data when the global batch changes: the schedule's step is the epochs trained
  times this world's steps per epoch.
  """

  def __init__(self, state, commit_every: int, run: RunConfig, num_train: int, world, data_config):
    self.state, self.commit_every, self.run, self.num_train = state, commit_every, run, num_train
    self.world, self.data_config = world, data_config
    self.commit_seconds = []  # each commit's time (make faults reports the median)

  @property
  def position(self):
    return self.state.position

  @property
  def step(self) -> int:
    return self.state.position.step

  def epochs(self, steps_per_epoch: int) -> float:
    p = self.state.position
    gens = p.history + ((p.current,) if p.current else ())
    return p.epoch + sum(g.size * g.step_batch * g.steps for g in gens) / self.num_train

  def nominal_step(self, steps_per_epoch: int) -> int:
    return int(round(self.epochs(steps_per_epoch) * steps_per_epoch))

  def epoch_now(self, steps_per_epoch: int) -> int:
    """The epoch the next batches come from (epoch_ended moves it on)."""
    return self.state.position.epoch

  def last_step(self, steps_per_epoch: int) -> int:
    """The schedule's step the run ends at, in this world's steps (--max_steps counts updates)."""
    if self.run.max_steps:
      return self.nominal_step(steps_per_epoch) + max(0, self.run.max_steps - self.step)
    return int(round(self.run.epochs * steps_per_epoch))

  def finished(self, steps_per_epoch: int) -> bool:
    if self.run.max_steps and self.step >= self.run.max_steps:
      return True
    return self.epochs(steps_per_epoch) >= self.run.epochs - 1e-9

  def into_epoch(self, steps_per_epoch: int) -> int:
    return self.nominal_step(steps_per_epoch) - self.state.position.epoch * steps_per_epoch

  def batches(self, data):
    """(epoch, this rank's batches of what the epoch has left, dealt to this world)."""
    p = self.state.position
    plan = data.elastic_plan(p.epoch, p.history + ((p.current,) if p.current else ()))
    count = self.run.max_steps - self.step if self.run.max_steps else None
    return p.epoch, data.train_epoch(p.epoch, plan=plan, count=count)

  def after_step(self) -> None:
    self.state.position = self.state.position.after_step(self.world.size, self.data_config.step_batch,
                                                         self.data_config.global_batch)

  def epoch_ended(self, epoch: int) -> None:
    self.state.position = self.state.position.next_epoch()

  def commit(self, step: int, force: bool = False) -> bool:
    """Every commit_every steps (and, forced, at each checkpoint): the state is kept in host
    memory; Horovod raises HostsUpdatedInterrupt here when the discovery script's hosts changed.
    Whether it committed."""
    if not (force or step % self.commit_every == 0):
      return False
    start = time.perf_counter()
    self.state.save()
    self.commit_seconds.append(time.perf_counter() - start)
    self.state.check_host_updates()
    return True
