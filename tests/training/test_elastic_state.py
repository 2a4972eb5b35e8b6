"""Elastic training's pure parts: the Position a commit keeps, the courses train.py's loop asks,
and the positions kept beside checkpoints (multi-process runs: tests/multiprocess/test_elastic.py)."""
import json
import os
import types

import pytest

from input.sharding import Generation
from training import course, elastic
from training.elastic import Position


def test_a_position_counts_steps_worlds_and_epochs():
  p = Position()
  for _ in range(3):
    p = p.after_step(size=4, step_batch=8, global_batch=32)
  assert (p.step, p.images, p.current, p.history) == (3, 96, Generation(4, 8, 3), ())
  p = p.world_changed()  # the three steps of the 4-rank world join the epoch's history
  assert (p.current, p.history) == (None, (Generation(4, 8, 3),))
  p = p.after_step(size=2, step_batch=8, global_batch=16).world_changed()
  assert p.history == (Generation(4, 8, 3), Generation(2, 8, 1)) and p.images == 112
  assert p.world_changed() == p  # a world that trained no step leaves no generation
  n = p.next_epoch()
  assert (n.epoch, n.history, n.current, n.step) == (1, (), None, 4)
  assert Position.from_json(json.loads(json.dumps(p.to_json()))) == p


class FakeState:
  """What course.Elastic reads of a TrainingState: a position, save, check_host_updates."""

  def __init__(self, position):
    self.position, self.saves, self.checks = position, 0, 0

  def save(self):
    self.saves += 1

  def check_host_updates(self):
    self.checks += 1


RUN = types.SimpleNamespace(epochs=2.0, max_steps=0)


def test_the_elastic_course_counts_epochs_in_images_whatever_the_batch():
  state = FakeState(Position(epoch=1, history=(Generation(4, 8, 10),)))  # 320 of 1,000 images
  c = course.Elastic(state, commit_every=5, run=RUN, num_train=1000, world=None, data_config=None)
  assert c.epochs(31) == pytest.approx(1.32)
  assert c.nominal_step(31) == round(1.32 * 31) and c.last_step(31) == 62
  assert c.into_epoch(31) == round(1.32 * 31) - 31
  assert not c.finished(31)
  c.epoch_ended(1)
  assert c.finished(31) and state.position.epoch == 2


def test_the_elastic_course_commits_every_n_steps_and_at_checkpoints():
  state = FakeState(Position())
  c = course.Elastic(state, commit_every=5, run=RUN, num_train=1000, world=None, data_config=None)
  committed = [step for step in range(1, 12) if c.commit(step)]
  assert c.commit(12, force=True) and committed == [5, 10]
  assert state.saves == state.checks == 3 and len(c.commit_seconds) == 3  # steps 5, 10 and the checkpoint


def test_max_steps_ends_an_elastic_run_at_that_many_updates():
  state = FakeState(Position(step=7))
  c = course.Elastic(state, commit_every=5, run=types.SimpleNamespace(epochs=90.0, max_steps=9), num_train=1000,
                     world=None, data_config=None)
  assert not c.finished(10) and c.last_step(10) == c.nominal_step(10) + 2
  state.position = Position(step=9)
  assert c.finished(10)


def test_the_steps_course_is_the_plain_run():
  c = course.Steps(5, types.SimpleNamespace(epochs=1.5, max_steps=0))
  assert (c.last_step(10), c.epochs(10), c.into_epoch(10), c.nominal_step(10)) == (15, 0.5, 5, 5)
  c.after_step()
  assert c.step == 6 and not c.finished(10)
  assert course.Steps(15, types.SimpleNamespace(epochs=1.5, max_steps=0)).finished(10)
  assert course.Steps(3, types.SimpleNamespace(epochs=9.0, max_steps=3)).finished(10)


def test_positions_live_beside_their_checkpoints(tmp_path):
  d = str(tmp_path)
  for step in (10, 20):
    open(os.path.join(d, f"ckpt-{step}.index"), "w").close()
    elastic.write_position(d, step, Position(epoch=step // 10, step=step))
  os.remove(os.path.join(d, "ckpt-10.index"))  # the manager dropped checkpoint 10
  elastic.write_position(d, 30, Position(epoch=3, step=30))
  assert sorted(os.listdir(d)) == ["ckpt-20.index", "position-20.json", "position-30.json"]
  lines = []
  assert elastic.read_position(d, 20, 10, lines.append) == Position(epoch=2, step=20)
  # A checkpoint of a run without --elastic: its epoch starts again, and the log says so.
  assert elastic.read_position(d, 25, 10, lambda *a: lines.append(a)) == Position(epoch=2, step=25)
  assert lines and "starts again" in lines[0][0]
