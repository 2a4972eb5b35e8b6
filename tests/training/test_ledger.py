"""training/ledger.py: the parts of a run's wall time, from tables of fake clocks, and the real Loop
with the Timing hook charging a fake run whose step, evaluation and save take known seconds."""
import types

import pytest

from input.sharding import Generation
from training import course, ledger, loop
from training.state import Position, RunState
from training.evaluation import HeldOut
from training.hooks import Timing
from training.step import StepOut


class Clock:
  """Seconds that move only when told."""

  def __init__(self, now=100.0):
    self.t = now

  def __call__(self):
    return self.t

  def advance(self, seconds):
    self.t += seconds


def moved(moves) -> ledger.Ledger:
  """A ledger started in startup.imports on a fake clock, after moves: (seconds that pass, the part
  entered after them)."""
  clock = Clock()
  book = ledger.Ledger(start=clock(), clock=clock, part="startup.imports")
  for seconds, part in moves:
    clock.advance(seconds)
    book.enter(part)
  return book


@pytest.mark.parametrize("moves, expected", [
    ([], {"startup.imports": 0.0}),
    ([(3.0, "startup.init")], {"startup.imports": 3.0, "startup.init": 0.0}),
    ([(3.0, "steps.compute"), (1.0, "evaluation"), (2.0, "steps.compute")],
     {"startup.imports": 3.0, "steps.compute": 1.0, "evaluation": 2.0}),
    ([(1.0, "unaccounted"), (0.5, "checkpoint"), (0.25, "unaccounted")],
     {"startup.imports": 1.0, "unaccounted": 0.5, "checkpoint": 0.25}),
])
def test_each_interval_goes_to_the_part_it_was_spent_in(moves, expected):
  book = moved(moves)
  parts = book.now()
  assert parts == pytest.approx(expected)
  assert sum(parts.values()) == pytest.approx(book.wall())  # the parts sum to the wall, always


def test_the_seconds_before_the_ledger_was_made_count_from_its_start():
  clock = Clock(50.0)
  book = ledger.Ledger(start=42.0, clock=clock, part="startup.imports")  # the process began at 42
  assert book.now() == {"startup.imports": 8.0} and book.wall() == 8.0


def test_during_goes_back_to_the_part_before_it_also_when_the_call_raises():
  clock = Clock()
  book = ledger.Ledger(start=clock(), clock=clock, part="steps.compute")

  def statistics():
    clock.advance(2.0)
    raise RuntimeError("a peer was lost")

  with pytest.raises(RuntimeError):
    book.during("statistics", statistics)
  clock.advance(1.0)
  assert book.part == "steps.compute"
  assert book.now() == {"steps.compute": 1.0, "statistics": 2.0}
  assert book.timed("statistics", lambda x: x + 1)(1) == 2


def test_groups_follow_the_documented_order_and_unknown_ones_come_last():
  parts = {"unaccounted": 1, "steps.input_wait": 2, "startup.imports": 3, "steps.compute": 4, "zzz": 5,
           "startup.data": 6}
  assert list(ledger.by_group(parts).items()) == [("startup", 9), ("steps", 6), ("unaccounted", 1), ("zzz", 5)]


@pytest.mark.parametrize("ranks, expected", [
    ([], {}),
    ([{"checkpoint": 2.0}], {}),
    # rank 0 writes (2 s), rank 1 waits for it in the evaluation's first collective
    ([{"checkpoint": 2.0, "evaluation": 1.0}, {"checkpoint": 0.1, "evaluation": 3.0}],
     {"evaluation": {"rank": 1, "seconds": 3.0, "rank0_seconds": 1.0}}),
    ([{"evaluation": 1.0}, {"evaluation": 1.04}], {}),                  # within 5%: alike
    ([{"evaluation": 0.0}, {"evaluation": 0.05}], {}),                  # under 0.1 s: alike
    ([{"steps.compute": 1.0}, {"steps.compute": 1.0}, {"steps.compute": 1.5, "steps.input_wait": 1.0}],
     {"steps": {"rank": 2, "seconds": 2.5, "rank0_seconds": 1.0}}),
])
def test_the_slowest_rank_is_named_where_it_differs_from_rank_0(ranks, expected):
  assert ledger.slowest_parts(ranks) == expected


def test_the_block_reads_the_productive_share_and_both_rates_off_the_parts():
  parts = {"startup.imports": 10.0, "steps.compute": 18.0, "steps.input_wait": 2.0, "evaluation": 15.0,
           "epoch_input": 5.0}
  block = ledger.block(parts, wall=50.0, images=2000, step_images=1800)
  assert block["productive_share"] == 0.4
  assert block["images_per_step_second"] == 90.0   # 1,800 images in 20 s of steps
  assert block["images_per_wall_second"] == 40.0    # 2,000 in 50 s
  assert block["groups"] == {"startup": 10.0, "steps": 20.0, "epoch_input": 5.0, "evaluation": 15.0}
  assert sum(block["parts"].values()) == pytest.approx(block["wall_seconds"])
  assert "resumed" not in block["clock"] and "slowest" not in block
  assert "resumed at step 300" in ledger.block(parts, 50.0, 0, 0, resumed_step=300)["clock"]
  line = ledger.line(block)
  assert "productive share 0.40" in line
  assert "evaluation 15.0 s, start-up 10.0 s, epoch input 5.0 s" in line


@pytest.mark.parametrize("moves, changes", [
    ([(1.0, "steps.compute"), (2.0, "evaluation")], []),  # no world change
    # a loss, then a return: each change its own, from its first world_change part to the next step
    ([(1.0, "steps.compute"), (2.0, "world_change.checkpoint"), (0.5, "world_change.reinit"),
      (4.0, "world_change.first_step"), (3.0, "steps.compute"), (5.0, "world_change.checkpoint"),
      (0.25, "world_change.reinit"), (2.0, "steps.compute")],
     [{"checkpoint": 0.5, "reinit": 4.0, "first_step": 3.0}, {"checkpoint": 0.25, "reinit": 2.0}]),
    # another group inside a change (BatchNorm's statistics) is not the change's, and does not split it
    ([(1.0, "steps.compute"), (1.0, "world_change.reinit"), (1.0, "statistics"), (1.0, "world_change.setup"),
      (1.0, "steps.compute")], [{"reinit": 1.0, "setup": 1.0}]),
    # a failure during a change's re-init starts no second change: the next world_change part is the same one's
    ([(1.0, "steps.compute"), (1.0, "world_change.reinit"), (2.0, "world_change.checkpoint"),
      (1.0, "world_change.reinit"), (3.0, "steps.compute")], [{"reinit": 5.0, "checkpoint": 1.0}]),
])
def test_each_world_change_keeps_its_own_parts(moves, changes):
  book = moved(moves)
  assert book.changes == [pytest.approx(c) for c in changes]
  block = ledger.block(book.now(), book.wall(), 0, 0, changes=book.changes)
  assert [c["seconds"] for c in block.get("world_changes", [])] == pytest.approx([sum(c.values()) for c in changes])


class Data:
  def __init__(self, steps_per_epoch):
    self.steps_per_epoch = steps_per_epoch
    self.info = types.SimpleNamespace(num_train=steps_per_epoch)

  def train_epoch(self, epoch, first_step=0, count=None, plan=None):
    first = plan if plan is not None else first_step
    return [((epoch, first + i), None) for i in range(self.steps_per_epoch - first)]


def fake_run(clock, hooks, spe=4, epochs=2.0):
  """The real Loop over a fake world of one rank: a step takes 1 s, an evaluation 2 s, a save 0.5 s,
  BatchNorm's averaging 0.25 s (through ledger.timed, as training/shape.py passes it)."""
  position = Position(epoch=0, current=None, images=0, step=0)
  run = course.Course(RunState.at(position), types.SimpleNamespace(epochs=epochs, max_steps=0),
                      types.SimpleNamespace(size=1), types.SimpleNamespace(step_batch=1, global_batch=1))

  def step(images, labels, lr, stop):
    clock.advance(1.0)
    return StepOut(loss=1.0, correct=1.0, finite=True, stop=0, sq_small=0.0, sq_big=0.0)

  def evaluate(on_batch):
    clock.advance(2.0)
    return HeldOut(top1=0.5, top5=0.9, loss=1.0, count=10)

  def save(step):
    clock.advance(0.5)
    return True

  book = hooks[0].ledger
  work = loop.Work(evaluate=evaluate, save=save, schedule=lambda s: 0.1, stop_code=lambda: 0, clock=clock,
                   average_statistics=book.timed("statistics", lambda: clock.advance(0.25)))
  return loop.Loop(run, Data(spe), step, work=work, policy=loop.Policy(), hooks=hooks).run()


@pytest.mark.parametrize("traced, first_step, compute", [(True, 1.0, 7.0), (False, 0.0, 8.0)])
def test_the_loop_charges_each_phase_to_its_part(traced, first_step, compute):
  clock = Clock()
  book = ledger.Ledger(start=clock(), clock=clock, part="startup.imports")
  clock.advance(3.0)
  ending = fake_run(clock, [Timing(book, images=1, opening="startup", traced=traced)])
  assert ending.cause == loop.FINISHED and ending.step == 8
  parts = book.now()
  # 2 epochs of 4 steps: saves and evaluations at epoch 1's end and the run's (the statistics averaged once before each)
  assert parts.get("startup.first_step", 0.0) == first_step
  assert parts["steps.compute"] == compute
  assert parts["evaluation"] == 4.0 and parts["checkpoint"] == 1.0 and parts["statistics"] == 0.5
  assert parts["startup.imports"] == 3.0
  assert sum(parts.values()) == pytest.approx(book.wall())
  assert book.images == 8 and book.step_images == 8 - first_step


def test_a_later_stretch_charges_its_opening_to_its_own_group():
  clock = Clock()
  book = ledger.Ledger(start=clock(), clock=clock)
  fake_run(clock, [Timing(book, images=1, opening="world_change")], epochs=1.0)
  assert book.now()["world_change.first_step"] == 1.0
  assert "world_change.first_input" in book.now() and not any(p.startswith("startup") for p in book.now())


def test_each_epoch_end_writes_the_epochs_groups_to_tensorboard(tmp_path):
  import tensorflow as tf
  clock = Clock()
  book = ledger.Ledger(start=clock(), clock=clock)
  writer = tf.summary.create_file_writer(str(tmp_path))
  fake_run(clock, [Timing(book, images=1, opening="startup", writer=writer)], epochs=3.0)
  scalars = {}
  for path in tmp_path.iterdir():
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        scalars.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
  # epochs 1 and 2 end inside the loop (the run's last end is the summary's): 4 steps each, one
  # evaluation; epoch 1 also holds the first trace
  assert scalars["time/evaluation"] == {1: 2.0, 2: 2.0}
  assert scalars["time/steps"] == {1: 3.0, 2: 4.0}
  assert scalars["time/startup"][1] == 1.0
