"""training/shape.py: every pair of a run's transitions, driven in one process on simulated ranks,
and after each the invariants a run rests on (issue 38 item 4):

  no example trained twice in an epoch      the real input (digits), each simulated rank its share
  tau continuous                            each stretch and world starts where the last left off
  each step's LR r x the schedule at tau    AdaScale's gain between 1 and S
  every rank in the same shape              K, the compression and the step, rank by rank
  the position a restart reads              saved in a real checkpoint and read back

Transitions: K (the batch controller's K 1 -> 2), C (its choice between PowerSGD's exchange and the
plain one), W (a host lost: the ranks roll back to the last commit and a world of one rank goes on,
as --elastic), R (a stop, then a restart on one rank from the checkpoint, as a Slurm requeue onto
fewer nodes). The step is a fake that records what it is given (the multi-process tests train for
real); the rest is the run's own: shape.Run, the loop, the course, the input and the saver.
"""
import dataclasses
import functools
import itertools
import types
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf

from comm.topology import World
from flags.config import (CommConfig, Config, DataConfig, EvalConfig, FaultConfig, ModelConfig, OptimConfig, RunConfig,
                          Source)
from input import pipeline
from input.datasets import DIGITS
from optimizers import schedules
from training import course as course_lib, loop, modes, shape, trainer as trainer_lib
from training.state import Position, RunState
from training.evaluation import HeldOut
from training.persist.saving import Saver
from training.step import StepOut
from training.ending.watchdog import Watchdog

PER_RANK, B0, STEPS = 100, 100, 14  # 2 ranks: global batch 200, 7 steps an epoch (3 at K = 2): epochs end often
AT = (4, 9)  # the steps the pair's two transitions come after
KINDS = ("K", "C", "W", "R")


class LostHost(Exception):
  """What Horovod raises on the survivors when a host is lost (here: the fake step, at its step)."""


@dataclasses.dataclass(frozen=True)
class Plan:
  """Which transitions come after which steps: {step: kind}. Pure, so every simulated rank reads the same."""
  at: dict

  def pair(self, step: int, ranks: int) -> tuple[int, str]:
    """(K, compression) the controller has chosen by the end of `step` on `ranks` ranks: a K transition
    doubles the global batch, to 400."""
    done = [kind for at, kind in self.at.items() if at <= step]
    return (max(1, 400 // (PER_RANK * ranks)) if "K" in done else 1), (shape.POWERSGD if done.count("C") % 2 else shape.NONE)

  def step_of(self, kind: str) -> int | None:
    return next((at for at, k in self.at.items() if k == kind), None)


class Controller:
  """The batch controller's part, scripted by the plan: its choices, every rank's alike."""
  change_seconds = 0.0

  def __init__(self, plan: Plan):
    self.plan, self.ranks, self.k = plan, 2, 1

  def new_world(self, ranks, k_range, prior):
    self.ranks = ranks

  def start(self, k_flag, global_batch, c_flag, step=0):
    """The K nearest the global batch trained last (batch_control's rule), the plan's compression."""
    self.k = max(1, round(global_batch / (PER_RANK * self.ranks))) if global_batch else k_flag
    return self.k, self.plan.pair(step, self.ranks)[1]

  def stretch(self, k, c):
    self.k = k

  def offer(self, compressions):
    pass

  def compression_in(self, ranks, default):
    return default  # the plan says the compression (start)

  def resize(self, step):
    kind = self.plan.at.get(step)
    if kind not in ("K", "C"):
      return None
    k, c = self.plan.pair(step, self.ranks)
    return (k if kind == "K" else self.k), c

  def summary(self):
    return {}

  def __getattr__(self, name):  # the loop's hooks: nothing to time here
    if name in ("before", "after_step", "after_eval", "after_eval_batch", "after_save", "before_commit",
                "after_commit", "after_epoch", "evaluated_before"):
      return lambda *args: None
    raise AttributeError(name)


class Record:
  """What every simulated rank trained and was told, step by step."""

  def __init__(self):
    self.examples = []   # (step, epoch, image bytes)
    self.lrs = []        # (step, tau before it, its LR, S)
    self.shapes = {}     # step -> {(ranks, K, compressing)} over the ranks that took it

  def rolled_back(self, to: int) -> None:
    """A lost host: the steps after the commit at `to` are trained again (their updates were dropped)."""
    self.examples = [e for e in self.examples if e[0] <= to]
    self.lrs = [e for e in self.lrs if e[0] <= to]
    self.shapes = {step: shapes for step, shapes in self.shapes.items() if step <= to}


class FakeTrainer(trainer_lib.Trainer):
  """The trainer with the fake step, and no prior to time (the exchange's and the compute's are a real run's)."""

  def __init__(self, run):
    self.run, self.parts, self.world, self.steps, self.compressing = run, run.parts, run.world, {}, shape.NONE
    self.exchange = types.SimpleNamespace(plan=[])

  def step_for(self, k, config, num_classes):
    run = self.run
    record, plan, course = run.parts.record, run.parts.plan, run.course

    def step(images, labels, lr, stop):
      taking = course.step + 1
      if plan.step_of("W") is not None and taking == plan.step_of("W") + 1 and run.world.size == 2:
        raise LostHost(f"a host lost during step {taking}")
      record.examples += [(taking, course.position.epoch, image.tobytes()) for image in images.numpy()]
      record.lrs.append((taking, course.position.tau, float(lr), run.config.data.global_batch / B0))
      record.shapes.setdefault(taking, set()).add(
          (run.world.size, run.config.data.accumulation_steps, bool(run.parts.use_powersgd.numpy())))
      stopping = plan.step_of("R") is not None and taking == plan.step_of("R") and run.world.size == 2
      return StepOut(loss=1.0, correct=0.0, finite=True, stop=15 if stopping else 0, sq_small=0.0, sq_big=0.0)
    return step

  def prior(self, config, info):
    return None


class FakeRun(shape.Run):
  """shape.Run with the fake trainer."""

  def trainer_for(self, world, config):
    return FakeTrainer(self)


INPUTS = {}  # the inputs the pairs build, kept: an Input deals each epoch afresh, so it can serve again


def built(data_config, world):
  """This simulated rank's input (pipeline.build, as train.py's), built once per shape and data set."""
  key = (data_config.data_dir, data_config.batch_size, data_config.accumulation_steps, world.size, world.rank)
  if key not in INPUTS:
    INPUTS[key] = pipeline.build(data_config, world, 1, elastic=True)
  return INPUTS[key]


def parts_for(tmp, rank: int, plan: Plan, record: Record) -> shape.Parts:
  saver = Saver(tf.train.Checkpoint(step=tf.Variable(0)), tmp, keep=2, log=lambda *a: None, floating=[])
  parts = shape.Parts(
      hvd=None, model=None, optimizer=None, loss_scale=None,
      compression=types.SimpleNamespace(powersgd=object(), compress=True, cost=None), saver=saver,
      step_var=tf.Variable(0, dtype=tf.int64), watchdog=Watchdog(rank, 2, 0, tmp),  # floor 0: never fires
      stop_request=types.SimpleNamespace(code=0, asked=lambda: 0), noise=types.SimpleNamespace(b_simple=400.0, restore=lambda s: None),
      controller=Controller(plan), evaluator=lambda data: lambda on_batch: HeldOut(0.5, 0.9, 1.0, 300),
      average_statistics=lambda: None, input_for=lambda config, world: built(config.data, world),
      log=lambda *a: None, clock=lambda: 1.0, use_powersgd=tf.Variable(False))
  parts.record, parts.plan = record, plan
  return parts


class Noise:
  """The noise scale's part: B_simple 400 (r = 1.6 at S = 2 over B0 = 100, 2.29 at S = 4)."""
  b_simple, grad_sq, trace_sigma, steps = 400.0, 1.0, 400.0, 1

  def update(self, *args):
    return True

  def state(self):
    return {}

  def restore(self, state):
    pass


def config_for(tmp, ranks: int) -> types.SimpleNamespace:
  """A run of --lr_scaling=adascale --batch_policy=adaptive --compression=powersgd on `ranks` ranks."""
  data = DataConfig(dataset=DIGITS, source=Source.DIGITS, tfds_name="", image_size=8, skip_corrupt=False,
                    data_dir=tmp["data"], create_data_dir=False, batch_size=PER_RANK, global_batch=PER_RANK * ranks,
                    eval_batch_size=100, shuffle_buffer=10_000, batch_policy="adaptive",
                    max_global_batch=8 * PER_RANK * ranks)
  optim = OptimConfig("sgd", 0.8, 0.9, 0.0, 0.5, 0.0, "cosine", (), 0.001, 0.0, True, "fp32", lr_scaling="adascale",
                      base_batch=B0)
  return Config(
      world=world_of(ranks, 0), model=ModelConfig("resnet8", True),
      run=RunConfig(model_dir=tmp["run"], epochs=40, max_steps=STEPS, seed=1, log_every=100, checkpoint_every=0,
                    keep_checkpoints=2, threads=1, export=False),
      data=data, optim=optim, comm=CommConfig(compression="powersgd", compression_start=0),
      faults=FaultConfig(stall_timeout=0, max_skipped_steps=10), evaluation=EvalConfig(0, 0.0, 0.0))


def world_of(size: int, rank: int) -> World:
  return World(size=size, rank=rank, local_size=size, local_rank=rank, cross_size=1)


class State:
  """An elastic RunState's part (training/state.py): the position a commit keeps."""

  def __init__(self, position):
    self.position = self.committed = position

  def save(self):
    self.committed = self.position

  def check_host_updates(self):
    pass


def run_pair(tmp, first: str, second: str):
  """The run of one pair: 2 ranks from the start, the pair's transitions after steps AT; (record, the
  ranks' final positions, the checkpoint's position as a restart reads it, rank 0's)."""
  plan, record = Plan(dict(zip(AT, (first, second)))), Record()
  parts = [parts_for(tmp["run"], rank, plan, record) for rank in range(2)]
  for p in parts:
    p.noise = Noise()
  states = [State(Position()) for _ in range(2)]
  size, later = 2, False
  while True:
    endings, finals = [], {}  # the ranks of the last world
    for rank in range(size):
      config, world = config_for(tmp, size), world_of(size, rank)
      data = built(config.data, world)
      state = states[rank]
      state.position = modes.Fixed(None, world)._for_world(state.position, config, data) if not later else \
          state.committed.world_changed()
      course = course_lib.Course(state, config.run, world, config.data, data.readers, B0, DIGITS.num_train,
                                 commit_every=3)
      parts[rank].step_var.assign(state.position.step)
      try:
        endings.append(FakeRun(parts[rank], world, config, data, course, later=later).train().ending)
      except LostHost:
        endings.append(None)
      finals[rank] = state.position
    if all(e is None for e in endings):  # the host with rank 1 lost: rank 0 goes on alone from the commit
      size, later, states = 1, True, states[:1]
      record.rolled_back(states[0].committed.step)
      continue
    if endings[0].status == 75 and size == 2:  # stopped: restarted on one rank from rank 0's checkpoint
      restarted = parts_for(tmp["run"], 0, plan, record)
      restarted.noise = Noise()
      restarted.saver.writer().restore_newest()
      states = [State(restarted.saver.restored_position(int(restarted.saver.newest.rsplit("-", 1)[1])))]
      parts, size, later = [restarted], 1, False
      continue
    break
  saver = Saver(tf.train.Checkpoint(step=tf.Variable(0)), tmp["run"], keep=2, log=lambda *a: None, floating=[])
  saver.writer().restore_newest()
  return record, [finals[r] for r in sorted(finals)], saver.restored_position(finals[0].step)


@functools.cache
def training_split(data_dir) -> Counter:
  """Every training example's pixels as the pipeline gives them, as a multiset (one rank, batch 1);
  read once per data set (1.6-2.6 s each, and every pair reads the same one)."""
  one = dataclasses.replace(config_for({"data": data_dir, "run": ""}, 1).data, batch_size=1, global_batch=1)
  return Counter(image.tobytes() for images, _ in pipeline.build(one, world_of(1, 0), 1).train_epoch(0)
                 for image in images.numpy())


@pytest.fixture(scope="module")
def tmp_data(tmp_path_factory):
  from input import digits
  path = str(tmp_path_factory.mktemp("digits"))
  digits.write(path)
  return path


@pytest.mark.parametrize("first, second", list(itertools.product(KINDS, KINDS)))
def test_every_pair_of_transitions_keeps_the_runs_invariants(tmp_data, tmp_path, first, second):
  tmp = {"data": tmp_data, "run": str(tmp_path)}
  record, finals, restart = run_pair(tmp, first, second)
  # No example trained twice in an epoch (against the split's own duplicates: digits has a few).
  split = training_split(tmp_data)
  for epoch in {e for _, e, _ in record.examples}:
    counts = Counter(image for _, e, image in record.examples if e == epoch)
    assert all(counts[image] <= split[image] for image in counts), (first, second, epoch)
  # tau continuous: each step's tau is the last's plus its r (a rollback goes back to a commit's, which it held).
  taus = [tau for _, tau, _, _ in sorted(record.lrs)]
  assert all(b > a for a, b in zip(taus, taus[1:]) if b != a) and taus == sorted(taus), taus
  # Each LR is r x the base batch's schedule at tau, 1 <= r <= S.
  schedule = schedules.for_run(config_for(tmp, 2).optim, B0, 40, DIGITS.num_train // B0)
  for _, tau, lr, scale in record.lrs:
    assert schedule(tau) * (1 - 1e-6) <= lr <= schedule(tau) * scale * (1 + 1e-6), (tau, lr, scale)
  # Every rank that took a step took it in the same shape.
  assert all(len(shapes) == 1 for shapes in record.shapes.values()), record.shapes
  # The plan's transitions happened: global batch 400 after a K (kept by a new world), PowerSGD on after one
  # C, one rank after W or R.
  (ranks, k, compressing), = record.shapes[max(record.shapes)]
  assert PER_RANK * ranks * k == (400 if "K" in (first, second) else 200)
  assert compressing == ((first, second).count("C") == 1)
  assert ranks == (1 if {"W", "R"} & {first, second} else 2)
  # The position a restart reads is the one trained to (rank 0's), and every rank's is the same.
  assert restart == finals[0] and all(f == finals[0] for f in finals), (restart, finals)
  assert finals[0].step == STEPS


def test_auto_prices_each_later_world_again_and_the_first_by_its_start_up_choice(tmp_data, tmp_path):
  # --elastic with --compression=auto: a new world's links and ranks are another's, so its choice is
  # made again there (comm.exchange.choose_auto, a collective of that world); the first world's is start-up's.
  tmp = {"data": tmp_data, "run": str(tmp_path)}
  parts = parts_for(str(tmp_path), 0, Plan({}), Record())
  parts.noise, asked = Noise(), []
  parts.rechoose = lambda world, current: asked.append(world.size) or current
  parts.compression.chosen = True
  for later in (False, True):
    config, world = config_for(tmp, 1), world_of(1, 0)
    data = pipeline.build(config.data, world, 1, elastic=True)
    course = course_lib.Course(RunState.at(Position()), config.run, world, config.data, data.readers, B0,
                               DIGITS.num_train)
    FakeRun(parts, world, config, data, course, later=later).begin()
  assert asked == [1]
  # --elastic: no choice at start-up (no collective before the elastic loop), so the first world chooses too.
  parts.compression.chosen = False
  FakeRun(parts, world, config, data, course, later=False).begin()
  assert asked == [1, 1]
