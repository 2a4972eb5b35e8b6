"""Where a run is and when it ends, counted in the data: one course for every run.

train.py's loop asks its course for the next batches, the step the LR schedule and the
progress line are at, whether an evaluation or the end is due, and tells it of each step,
each epoch's end and each checkpoint; a world whose ranks can be lost (--elastic) commits the
state through it too. Progress is training/state.Position: the epoch, the images and updates
since the run began, and the epoch's generations (a stretch trained by one world: its ranks,
batch and steps). A fixed run is the one-world case: one generation an epoch, never committed.
A run resumed on another number of ranks (a Slurm requeue onto fewer nodes) goes on at the epoch,
the images and the point of its LR schedule it reached: the schedule is written for this world's
steps per epoch and read at the epoch reached, never at the old step count read in new steps.

The LR schedule's clock: under the linear rule, the epochs of data trained (in this world's
steps); under --lr_scaling=adascale, the base-batch steps tau the schedule has counted
(optimizers/adascale.py), whatever the batch: the schedule is the base batch's, its warmup and
end in base-batch steps (floor(N / B0) an epoch). Then --epochs ends the run when tau reaches
them, and the data's own epochs (evaluations at their ends, the position in the files) run on as
many as that takes. Counting tau in steps of the current batch instead would end a run early and
move the LR at each change of batch, each batch's floor rounding another way.
"""
import dataclasses
import math
import time

from flags.config import RunConfig
from training.state import RunState


def whole(x: float) -> int:
  """x rounded down, past float error (2.3 epochs x 10 steps is 22.999999999999996): every count of
  steps here is rounded one way."""
  return math.floor(x + 1e-9)


class Course:
  """A run in `world` at data_config's batch, whose Position lives in `state.position` (the run's
  training/state.RunState, which this course moves on). readers: the input's reading width,
  kept with each generation so a later world replays the order it read in; base_batch: AdaScale's
  B0 (0: the linear rule), num_train the training split's examples (AdaScale: its clock's epoch is
  num_train // B0 base-batch steps). commit_every: the state is committed every that many steps and
  at each checkpoint (--elastic_commit_every; 0, a fixed world: never), before_commit() first
  (train.py: PowerSGD's residuals averaged over ranks, which changes no later update, so a new
  world starts from their mean)."""

  def __init__(self, state, run: RunConfig, world, data_config, readers: int = 0, base_batch: int = 0,
               num_train: int = 0, *, commit_every: int = 0, before_commit=None):
    self.state, self.run, self.world, self.data_config, self.readers = state, run, world, data_config, readers
    self.base_batch = base_batch
    self.base_spe = max(1, num_train // base_batch) if base_batch else 0
    self.commit_every, self.before_commit = commit_every, before_commit
    self.commit_seconds = []  # each commit's time (make faults reports the median)

  @property
  def position(self):
    return self.state.position

  @property
  def step(self) -> int:
    """Updates applied since the run began (--max_steps and --checkpoint_every count these)."""
    return self.state.position.step

  def epoch_images(self) -> int:
    """Images the epoch has trained, over its worlds and batches."""
    p = self.state.position
    return sum(g.size * g.step_batch * g.steps for g in p.history + ((p.current,) if p.current else ()))

  def into_epoch(self, steps_per_epoch: int) -> int:
    """Steps of this world's batch the epoch has trained, 0 at its end (which the epoch end
    itself handles: an --eval_every that divides the epoch does not evaluate its last step twice)."""
    return self._steps_into(steps_per_epoch) % steps_per_epoch

  def _steps_into(self, steps_per_epoch: int) -> int:
    """Whole steps of this world's batch in what the epoch has trained, rounded down: one way, so
    a position of another world's batch moves on by exactly one a step (round(), half to even, read
    a 1-rank run's odd step 71 on 2 ranks as 36, then 36 again, and ran its evaluation twice)."""
    return min(steps_per_epoch, whole(self.epoch_images() / self.data_config.global_batch))

  def nominal_step(self, steps_per_epoch: int) -> float:
    """The LR schedule's and the progress line's step: epochs trained in this world's steps (AdaScale:
    tau, the base-batch steps the schedule has counted, a fraction)."""
    if self.base_batch:
      return self.state.position.tau
    return self.state.position.epoch * steps_per_epoch + self._steps_into(steps_per_epoch)

  def per_epoch(self, steps_per_epoch: int) -> int:
    """The schedule's steps in an epoch: this world's (AdaScale: the base batch's, floor(N / B0))."""
    return self.base_spe if self.base_batch else steps_per_epoch

  def epochs(self, steps_per_epoch: int) -> float:
    return self.nominal_step(steps_per_epoch) / self.per_epoch(steps_per_epoch)

  def epoch_now(self, steps_per_epoch: int) -> int:
    """The epoch the next batches come from (epoch_ended moves it on)."""
    return self.state.position.epoch

  def fresh_epoch(self) -> bool:
    """Nothing of the current epoch trained yet."""
    return not self.epoch_images()

  def last_step(self, steps_per_epoch: int) -> int:
    """The schedule's step the run ends at (--max_steps counts updates: AdaScale's bound, a step moves
    its clock by at most S = B / B0)."""
    total = whole(self.run.epochs * self.per_epoch(steps_per_epoch))
    if self.run.max_steps:
      most = self.data_config.global_batch / self.base_batch if self.base_batch else 1
      return min(total, whole(self.nominal_step(steps_per_epoch) + most * max(0, self.run.max_steps - self.step)))
    return total

  def finished(self, steps_per_epoch: int) -> bool:
    if self.run.max_steps and self.step >= self.run.max_steps:
      return True
    return self.nominal_step(steps_per_epoch) >= whole(self.run.epochs * self.per_epoch(steps_per_epoch))

  def batches(self, data):
    """(epoch, this rank's batches of what the epoch has left). In one world the step within the
    epoch says where its batches start; after a world change the epoch's remainder is dealt
    again to this world (input/pipeline's elastic_plan: no example twice, none skipped)."""
    p = self.state.position
    count = self.run.max_steps - self.step if self.run.max_steps else None
    spe = data.steps_per_epoch
    if not self.base_batch:  # AdaScale's steps left are not known ahead: the loop asks finished()
      left = self.last_step(spe) - self.nominal_step(spe)
      count = left if count is None else min(count, left)
    if not p.history:
      done = p.current.steps if p.current else 0
      if done >= spe:  # saved at the epoch's last step, before its end: only the end (save, evaluation) is left
        return p.epoch, ()
      return p.epoch, data.train_epoch(p.epoch, first_step=done, count=count)
    plan = data.elastic_plan(p.epoch, p.history + ((p.current,) if p.current else ()))
    return p.epoch, data.train_epoch(p.epoch, plan=plan, count=count)

  def after_step(self, tau: float = 0.0) -> None:
    """tau: how far the step moved AdaScale's clock (its gain; 0 under the linear rule)."""
    self.state.position = self.state.position.after_step(self.world.size, self.data_config.step_batch,
                                                           self.data_config.global_batch, self.readers, tau)

  def resized(self, data_config, readers: int = 0) -> None:
    """The batch controller changed the accumulation steps (--batch_policy=adaptive): the stretch
    trained at the old step batch joins the epoch's history, and each rank reads on in its share
    at the new one (input/sharding.dealings); the epoch, the images and tau go on."""
    self.data_config, self.readers = data_config, readers
    self.state.position = self.state.position.world_changed(continued=True)

  def keep_noise(self, state: dict) -> None:
    """The noise scale's averages after a step (NoiseScale.state), checkpointed and committed with
    the position: a resumed run, and a rank that joins a world, start from them."""
    self.state.position = dataclasses.replace(self.state.position, noise=state)

  def evaluated(self, record: dict) -> None:
    """The evaluation at this step completed (training/loop.py's record): kept in the position, so a
    commit or checkpoint after it carries it and a resume does not repeat it."""
    self.state.position = dataclasses.replace(self.state.position, evaluated=record)

  def epoch_ended(self, epoch: int) -> None:
    self.state.position = self.state.position.next_epoch()

  def commit_due(self, step: int, force: bool = False) -> bool:
    """Whether commit(step, force) would commit: never in a fixed world."""
    return bool(self.commit_every) and (force or step % self.commit_every == 0)

  def commit(self, step: int, force: bool = False, final: bool = False) -> bool:
    """Every commit_every steps (and, forced, at each checkpoint): the state is kept in host
    memory; Horovod raises HostsUpdatedInterrupt here when the discovery script's hosts changed,
    except at the run's final commit (final): a new world would have nothing left to train, and
    evaluated again and reported `nothing_left` with no images/s. Whether it committed."""
    if not self.commit_due(step, force):
      return False
    start = time.perf_counter()
    if self.before_commit:
      self.before_commit()  # every rank commits at this step: a collective may come first
    self.state.save()
    self.commit_seconds.append(time.perf_counter() - start)
    if not final:
      self.state.check_host_updates()
    return True


def epochs_as_trained(position, run: RunConfig, data_config, num_train: int, base_batch: int = 0) -> float:
  """The epoch the run's own lines gave at `position`: counted in the steps of the global batch it
  trained at then (another world's batch would read a mid-epoch position differently)."""
  batch = position.global_batch or data_config.global_batch
  then = dataclasses.replace(data_config, global_batch=batch)
  return Course(RunState.at(position), run, None, then, base_batch=base_batch, num_train=num_train).epochs(
      max(1, num_train // batch))
