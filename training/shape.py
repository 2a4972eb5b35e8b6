"""What a run is at any moment, and the transitions that change it (the trainer: training/trainer.py).

A run's shape is its world (ranks, nodes), the accumulation steps K (the global batch is K x the
micro-batch x the ranks), whether PowerSGD compresses the exchange, and where it is: the course's
position (training/course.py: the epoch, the images and updates trained, tau, the data's dealing),
with AdaScale's base batch pinned at the run's first world. It changes only through these
transitions, each a method of Run, each saying so in one line:

  begin()          a world begins: the run's first, or --elastic's next (its exchange and probe, auto's
                   choice for its links, the noise scale's estimates of the commit it starts from, the
                   batch controller's prior and first choice); a resume on another shape is a first
                   world whose position came from another (training/modes.py deals the epoch's rest)
  change_k(k)      the batch controller's choice: the input at the new step batch (a watchdog phase of
                   its own), the step traced for K once and kept; the course goes on at the new batch
  set_compression  --compression_start reached (PowerSGD from that step on), or the controller's
                   choice between the plain and the compressed exchange (auto): one variable the traced
                   steps read, so no retrace

The loop (training/loop.py) runs one stretch at a time; a transition due after a step ends the
stretch (loop.RESIZED) and Run.train goes on at the new shape in the same process. What stays the
same across every transition (tests/training/test_shape.py drives every pair of them): no example
trained twice in an epoch, tau continuous, each step's LR r x the schedule at tau with 1 <= r <= S,
every rank in the same shape, and the position a restart reads is the one trained to.
"""
import dataclasses
import functools
import os
import time
from typing import Callable

import tensorflow as tf

from optimizers import adascale, schedules
from progress import Progress
from training import hooks, ledger as ledger_lib, loop as loop_lib, modes, step as step_lib
from training.trainer import NONE, POWERSGD, Trainer
from training.adaptive import batch_control



@dataclasses.dataclass(frozen=True)
class Transition:
  """A change of shape due after a step: the K and the compression to go on at, and why."""
  k: int
  compression: str
  why: str = "controller"  # or "compression start"


@dataclasses.dataclass
class Parts:
  """What a run is made of, built once before its first world (train.py). use_powersgd: the variable
  the traced steps read to choose PowerSGD's exchange or the plain one (None: no PowerSGD);
  evaluator(data) -> the loop's evaluate; average_statistics(): BatchNorm's statistics averaged over ranks;
  input_for(config, world) -> this rank's input; rechoose(world, current) -> the compression for a new world
  (--compression=auto under --elastic: comm.exchange.choose_auto), or None to keep start-up's;
  ledger: the run's time ledger (training/ledger.py)."""
  hvd: object
  model: object
  optimizer: object
  loss_scale: object
  compression: object
  saver: object
  step_var: object
  watchdog: object
  stop_request: object
  noise: object
  controller: object
  evaluator: Callable
  average_statistics: Callable
  input_for: Callable
  log: Callable
  clock: Callable
  use_powersgd: object = None
  rechoose: Callable | None = None
  writers: dict = dataclasses.field(default_factory=dict)
  ledger: ledger_lib.Ledger = dataclasses.field(default_factory=ledger_lib.Ledger)


def controller_for(config, noise, log, decide):
  """The run's batch controller (training/adaptive/batch_control.py), or None: under --batch_policy=adaptive it
  chooses K and, under --compression=auto, the exchange too; under auto alone, the exchange at the
  fixed K. decide(value) -> rank 0's value on every rank (one broadcast a decision)."""
  compression = config.comm.compression
  if not (config.data.adaptive or compression == "auto"):
    return None
  compressions = {"auto": (NONE, POWERSGD), "powersgd": (POWERSGD,)}.get(compression, (NONE,))
  return batch_control.Controller(config.data.batch_size, config.optim.base_batch, config.data.decide_every,
                                  noise or Unmeasured(), decide=decide, log=log, compressions=compressions)


class Unmeasured:
  """The noise scale of a run that does not measure it (--noise_scale=false with --compression=auto at a
  fixed K): no B_simple, so the controller keeps K and chooses the exchange alone (r is the same either way)."""
  b_simple = None

  def b_simple_range(self):
    return None


class Run:
  """One world of a run, stretch after stretch: Run(parts, world, config, data, course).train().
  later: not the run's first world (--elastic's next), whose compression auto chooses again."""

  def __init__(self, parts: Parts, world, config, data, course, later: bool = False):
    self.parts, self.world, self.config, self.data, self.course, self.later = parts, world, config, data, course, later
    self.started = False  # past --compression_start
    self.eval_batch = config.data.global_batch  # --eval_every's steps: of the world's batch as the flags set it
    self.stretches = 0

  # ------------------------------------------------------------ transitions --
  def begin(self) -> None:
    """A world begins (the module docstring)."""
    p, world, config = self.parts, self.world, self.config
    p.ledger.enter(f"{self._opening()}.begin")  # the exchange, its probes, auto's choice, the controller's prior
    if world.is_chief:
      p.saver.writer()
      p.writers.setdefault("tb", tf.summary.create_file_writer(os.path.join(config.run.model_dir, "tb")))
    if p.noise:  # the estimates of the checkpoint or commit this world starts from, alike on every rank
      p.noise.restore(self.course.position.noise)
    if p.rechoose and (self.later or not p.compression.chosen):  # auto: this world's links, priced (collectives)
      p.compression = p.rechoose(world, p.compression)
    self.trainer = self.trainer_for(world, config)  # the exchange for this world's links (hybrid probes them)
    self.started = int(p.step_var) >= config.comm.compression_start
    k, compression = config.data.accumulation_steps, self._flag_compression()
    if p.controller:
      p.controller.offer((NONE, POWERSGD) if self.started else (NONE,))  # PowerSGD from --compression_start on
      p.controller.new_world(world.size, config.data.k_range(world.size) if config.data.adaptive else (k, k),
                             self.trainer.prior(config, self.data.info))
      if self.later:  # a world of a size it trained in before: the exchange it had there, unless the model moves it
        compression = p.controller.compression_in(world.size, compression)
      k, compression = p.controller.start(k, self.course.position.global_batch, compression, self.course.step)
    self.set_compression(compression)
    if k != config.data.accumulation_steps:
      self.change_k(k)

  def change_k(self, k: int) -> None:
    """The config and input at K accumulation steps; the course goes on at the new step batch (the
    epoch's rest dealt to it, input/sharding.dealings)."""
    p, start = self.parts, time.perf_counter()
    p.ledger.enter("resize.input")
    p.watchdog.mark("resize")  # a dataset built and traced again: first-time work, then its own kind's limit
    self.config = dataclasses.replace(self.config, data=self.config.data.with_accumulation(k, self.world.size))
    self.data = p.input_for(self.config, self.world)
    self.course.resized(self.config.data, getattr(self.data, "readers", 0))
    p.watchdog.progress(self.course.step, "resize", timed=False)
    if p.controller:
      p.controller.change_seconds += time.perf_counter() - start

  def set_compression(self, compression: str) -> None:
    """Steps from here send PowerSGD's P and Q (POWERSGD) or every gradient whole (NONE)."""
    self.trainer.set_compression(compression)

  def _flag_compression(self) -> str:
    """What the flags say a step sends now: PowerSGD from --compression_start on, where it was chosen."""
    p = self.parts
    return POWERSGD if p.compression.powersgd is not None and p.compression.compress and self.started else NONE

  def reshape(self, step: int) -> Transition | None:
    """After update `step` (the loop's hook, every rank after the same updates): the transition due,
    if any. --compression_start is one (the next step may compress: PowerSGD where it was chosen, and
    the controller may choose it from then on); a controller's choice another."""
    p = self.parts
    if p.compression.powersgd is not None and not self.started and step + 1 >= self.config.comm.compression_start:
      self.started = True
      if p.controller:
        p.controller.offer((NONE, POWERSGD))
      if p.compression.compress:
        return Transition(self.config.data.accumulation_steps, POWERSGD, "compression start")
    if p.controller:
      choice = p.controller.resize(step)
      if choice is not None:
        return Transition(*choice)
    return None

  # -------------------------------------------------------------- the world --
  def train(self) -> modes.WorldRun:
    """Stretch after stretch in this world until the run (or the world) ends."""
    self.begin()
    while True:
      ending = self._stretch()
      self.stretches += 1
      if ending.cause != loop_lib.RESIZED:
        break
      change = ending.resize_to
      if self.parts.controller:
        self.parts.controller.stretch(change.k, change.compression)
      if change.why != "controller":
        self.parts.log("compression: PowerSGD from step %d (--compression_start)", self.course.step)
      self.set_compression(change.compression)
      if change.k != self.config.data.accumulation_steps:
        self.change_k(change.k)
    return modes.WorldRun(self.world, self.config, ending, self.trainer.exchange.plan)

  def trainer_for(self, world, config) -> Trainer:
    """This world's trainer (training/trainer.py)."""
    return Trainer(self.parts, world, config)

  def _save(self, course, step: int) -> bool:
    """The loop's save: checkpoint `step` with the course's position (training/persist/saving.py)."""
    return self.parts.saver.save(step, course.position)

  def _opening(self) -> str:
    """The ledger's group of this stretch's opening work (its first input, a first trace): the run's
    first stretch is start-up, a later world's first a world change, any other a resize."""
    return "resize" if self.stretches else "world_change" if self.later else "startup"

  def _stretch(self) -> loop_lib.Ending:
    """The loop at one shape: its LR schedule, the progress lines, the noise scale's sizes."""
    p, world, config, data, course = self.parts, self.world, self.config, self.data, self.course
    spe = data.steps_per_epoch
    gain = None
    if config.optim.adascale_base:  # the base batch's schedule read at tau, times r (optimizers/adascale.py)
      gain = adascale.Gain(config.optim.base_batch, config.data.global_batch, lambda: p.noise.b_simple)
      schedule = schedules.for_run(config.optim, gain.base_batch, config.run.epochs, course.per_epoch(spe))
      p.log("adascale: the schedule is written for base batch %d (LR peak %.4f, %d warmup and %d steps of it, %d "
            "an epoch); each update's LR is r x it at tau, and tau moves on by r, r from the noise scale between 1 "
            "and S = %.2f (now %.2f); --epochs counts base-batch epochs", gain.base_batch, schedule.peak_lr,
            schedule.warmup_steps, schedule.total_steps, course.per_epoch(spe), gain.scale, gain())
    else:
      schedule = schedules.for_run(config.optim, config.data.global_batch, config.run.epochs, spe)
      p.log("%s", schedules.describe(schedule, config.optim.optimizer, config.optim.base_lr, config.data.global_batch))
    _, measuring = hooks.Measuring.for_world(p.noise, world.size, config.data, p.log, keep=course.keep_noise)
    progress = Progress(world.is_chief, config.data.global_batch, config.data.step_batch, course.nominal_step(spe),
                        course.last_step(spe), course.per_epoch(spe), config.run.log_every,
                        p.writers.get("tb") if world.is_chief else None, noise=p.noise if measuring else None,
                        adascale=gain and (lambda: (gain(), gain.scale, course.position.tau,
                                                    course.position.images / data.info.num_train)))
    p.log("training %s %d..%d (%d per epoch, %.1f epochs)", "base-batch steps" if gain else "steps",
          course.nominal_step(spe), course.last_step(spe), course.per_epoch(spe),
          course.last_step(spe) / course.per_epoch(spe))
    traced = config.data.accumulation_steps not in self.trainer.steps  # its first step traces it
    train_step = step_lib.host_step(self.trainer.step_for(config.data.accumulation_steps, config,
                                                          data.info.num_classes))
    timing = hooks.Timing(p.ledger, config.data.global_batch, self._opening(), traced=traced,
                          writer=p.writers.get("tb") if world.is_chief else None)
    work = loop_lib.Work(evaluate=p.evaluator(data), save=functools.partial(self._save, course), schedule=schedule,
                         stop_code=p.stop_request.asked, record=p.saver.record_evaluation,
                         average_statistics=p.ledger.timed("statistics", p.average_statistics),
                         resize=self.reshape, clock=p.clock, gain=gain)
    loop = loop_lib.Loop(
        course, data, train_step, work=work, policy=loop_lib.Policy.of(config, self.eval_batch),
        hooks=[timing, hooks.StepVariable(p.step_var), hooks.Watching(p.watchdog), *filter(None, [measuring]),
               *([p.controller] if p.controller else []), hooks.Reporting(progress, by_updates=gain is not None)])
    return loop.run()
