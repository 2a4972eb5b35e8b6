"""Elastic training's pure parts: the Position a commit keeps, the courses train.py's loop asks,
and the positions kept beside checkpoints (multi-process runs: tests/multiprocess/test_elastic.py)."""
import collections
import json
import os
import types

import pytest

from input.sharding import Generation
from training import course, modes, state
from training.state import Position, RunState


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


def test_a_position_of_another_worlds_batch_moves_on_one_step_a_step():
  # Requeued from 1 rank (global batch 32) at its odd step 71 onto 2 ranks (64): 35.5 steps of the new
  # batch are trained; rounded down, then one a step (half-to-even rounding read 36, 36: an evaluation twice).
  held = RunState.at(Position(epoch=0, current=Generation(1, 32, 71), images=71 * 32, step=71).world_changed())
  c = course.Course(held, types.SimpleNamespace(epochs=2, max_steps=0), types.SimpleNamespace(size=2),
                    types.SimpleNamespace(step_batch=32, global_batch=64))
  seen = []
  for _ in range(4):
    seen.append((c.nominal_step(46), c.into_epoch(46)))
    c.after_step()
  assert seen == [(35, 35), (36, 36), (37, 37), (38, 38)]
  assert course.whole(2.3 * 10) == 23 and course.whole(0.5 * 23) == 11


class FakeState:
  """What a committing course.Course reads of a RunState: a position, save, check_host_updates."""

  def __init__(self, position):
    self.position, self.saves, self.checks = position, 0, 0

  def save(self):
    self.saves += 1

  def check_host_updates(self):
    self.checks += 1


RUN = types.SimpleNamespace(epochs=2.0, max_steps=0)
LINEAR = types.SimpleNamespace(adascale_base=0)  # OptimConfig under the linear rule


def batch(global_batch, step_batch=8):
  return types.SimpleNamespace(global_batch=global_batch, step_batch=step_batch, adaptive=False)


def world(size):
  return types.SimpleNamespace(size=size, is_chief=True)


def test_the_course_counts_epochs_in_images_whatever_the_batch():
  # 320 images of epoch 1 trained at global batch 32; this world's global batch is 16, 31 steps an epoch.
  state = FakeState(Position(epoch=1, history=(Generation(4, 8, 10),)))
  c = course.Course(state, RUN, world(2), batch(16), commit_every=5)
  assert c.nominal_step(31) == 31 + 20 and c.epochs(31) == pytest.approx(51 / 31)
  assert c.into_epoch(31) == 20 and c.last_step(31) == 62
  assert not c.finished(31)
  c.epoch_ended(1)
  assert c.finished(31) and state.position.epoch == 2


def test_the_course_commits_every_n_steps_and_at_checkpoints():
  state = FakeState(Position())
  c = course.Course(state, RUN, world(2), batch(16), commit_every=5)
  committed = [step for step in range(1, 12) if c.commit(step)]
  assert c.commit(12, force=True) and committed == [5, 10]
  assert state.saves == state.checks == 3 and len(c.commit_seconds) == 3  # steps 5, 10 and the checkpoint
  assert c.commit(13, force=True, final=True) and state.checks == 3  # the run's last: no world change asked


def test_max_steps_ends_a_run_at_that_many_updates():
  state = FakeState(Position(step=7))
  c = course.Course(state, types.SimpleNamespace(epochs=90.0, max_steps=9), world(2), batch(16), commit_every=5)
  assert not c.finished(10) and c.last_step(10) == c.nominal_step(10) + 2
  state.position = Position(step=9)
  assert c.finished(10)


def test_a_fixed_run_is_the_one_world_case():
  # Step 5 of 10 an epoch, 1.5 epochs: what the step alone said before progress was counted in images.
  held = RunState.at(Position(current=Generation(1, 8, 5), images=40, step=5))
  c = course.Course(held, types.SimpleNamespace(epochs=1.5, max_steps=0), world(1), batch(8))
  assert (c.last_step(10), c.epochs(10), c.into_epoch(10), c.nominal_step(10)) == (15, 0.5, 5, 5)
  assert not c.commit_due(10, force=True) and not c.commit(10, force=True)  # nothing to roll back to
  c.after_step()
  assert c.step == 6 and not c.finished(10) and held.position.images == 48
  for _ in range(4):
    c.after_step()
  assert c.into_epoch(10) == 0 and c.nominal_step(10) == 10  # the epoch's last step: its end evaluates
  c.epoch_ended(0)
  for _ in range(5):
    c.after_step()
  assert c.finished(10)


class Data:
  steps_per_epoch = 23
  readers = 1


DIGITS_DATA = types.SimpleNamespace(steps_per_epoch=46, readers=1, info=types.SimpleNamespace(num_train=1497))


class Told:
  """The ledger and the watchdog, as the one path tells them."""

  def __init__(self):
    self.told = []

  def enter(self, part):
    self.told.append(part)

  def new_world(self):
    self.told.append("new world")


def test_a_fixed_run_takes_the_one_path_once_and_never_commits():
  config = types.SimpleNamespace(run=types.SimpleNamespace(epochs=1.0, max_steps=0), data=batch(16, step_batch=8),
                                 optim=LINEAR)
  data = types.SimpleNamespace(steps_per_epoch=10, readers=1, info=types.SimpleNamespace(num_train=160))
  held = RunState.at(Position(current=Generation(2, 8, 3, 1), step=3, images=48))
  courses, told = [], Told()

  def run_world(w, c, d, the_course):
    courses.append(the_course)
    return "ended"

  one_world = collections.namedtuple("World", "size is_chief")(2, True)  # comm.World is hashable too
  ended = modes.Fixed(None, one_world).run(run_world, config, data, held, saver=None, rebuild=None, watchdog=told,
                                          ledger=told)
  assert ended == "ended" and told.told == ["startup.world", "new world"] and len(courses) == 1
  c = courses[0]
  assert (c.commit_every, c.readers, c.position.current) == (0, 1, Generation(2, 8, 3, 1))  # the same world goes on
  assert not c.commit(10, force=True)


def test_a_run_resumed_on_half_the_ranks_goes_on_at_the_epoch_and_schedule_it_reached(tmp_path):
  # Issue 23: `--epochs=4 --max_steps=46` on 2 ranks (global batch 64, 23 steps an epoch on 1,497
  # digits) stopped at the end of epoch 2; resumed on one rank (global batch 32, 46 steps an epoch)
  # it had read step 46 as epoch 1.0, warmed up again and trained 5 epochs for 4.
  p = Position()
  for _ in range(23):
    p = p.after_step(2, 32, 64, readers=1)
  p = p.next_epoch()
  for _ in range(23):
    p = p.after_step(2, 32, 64, readers=1)
  config = types.SimpleNamespace(run=types.SimpleNamespace(model_dir=str(tmp_path), epochs=4.0, max_steps=0),
                                 data=batch(32, step_batch=32), optim=LINEAR)
  mode = modes.Fixed(None, world(1))
  lines = []
  mode.log = lambda fmt, *args: lines.append(fmt % args)
  data = DIGITS_DATA
  restored = mode.restored("D/ckpt-46", 46, p, config, data)
  assert "global batch was 64 on 2 ranks and is 32 on 1 now" in lines[0]
  assert "epoch 2.00, 2,944 images trained" in lines[0] and "step 92 of 184" in lines[0]
  c = course.Course(RunState.at(mode._for_world(restored, config, data)), config.run, world(1), config.data)
  assert (c.epochs(46), c.nominal_step(46), c.last_step(46), c.step) == (2.0, 92, 184, 46)
  # The epoch's last step was trained: nothing of it is left, so its end (save, evaluation) comes first.
  assert c.into_epoch(46) == 0 and not c.fresh_epoch()


def test_under_adascale_a_resumed_run_goes_on_at_its_tau_and_says_the_gain_follows_the_batch(tmp_path):
  # 46 updates at global batch 64 with gains of 1.5 (S = 2 over B0 = 32): tau 69 base-batch steps
  # (1,497 // 32 = 46 an epoch): epoch 1.50 of the schedule, whatever this world's batch.
  p = Position()
  for _ in range(46):
    p = p.after_step(2, 32, 64, readers=1, tau=1.5)
  config = types.SimpleNamespace(run=types.SimpleNamespace(model_dir=str(tmp_path), epochs=4.0, max_steps=0),
                                 data=batch(32, step_batch=32), optim=types.SimpleNamespace(adascale_base=32))
  mode = modes.Fixed(None, world(1))
  lines = []
  mode.log = lambda fmt, *args: lines.append(fmt % args)
  mode.restored("D/ckpt-46", 46, p, config, DIGITS_DATA)
  assert "epoch 1.50, 2,944 images trained (AdaScale: tau 69.0 base-batch steps)" in lines[0], lines
  assert "step 69 of 184 base-batch steps) and AdaScale's gain follows the new global batch" in lines[0], lines


def test_a_run_resumed_mid_epoch_on_another_world_deals_the_rest_of_the_epoch_to_it():
  p = Position(epoch=1, current=Generation(2, 32, 10, 1), images=2112, step=33, ranks=2, global_batch=64)
  config = types.SimpleNamespace(run=types.SimpleNamespace(epochs=4.0, max_steps=0), data=batch(32, step_batch=32))
  mode = modes.Fixed(None, world(1))
  same = modes.Fixed(None, world(2))
  data = types.SimpleNamespace(steps_per_epoch=46, readers=1)
  moved = mode._for_world(p, config, data)
  assert moved.history == (Generation(2, 32, 10, 1),) and moved.current is None  # replayed, the rest dealt again
  c = course.Course(RunState.at(moved), config.run, world(1), config.data)
  assert (c.nominal_step(46), c.into_epoch(46)) == (46 + 20, 20)
  config2 = types.SimpleNamespace(run=config.run, data=batch(64, step_batch=32))
  assert same._for_world(p, config2, data) == p  # the same world: the step within the epoch says where


def test_a_checkpoint_written_before_positions_moved_inside_it_is_read_from_its_file(tmp_path):
  (tmp_path / "position-20.json").write_text(json.dumps(Position(epoch=2, step=20).to_json()))
  assert state.read_legacy(str(tmp_path), 20) == Position(epoch=2, step=20)
  assert state.read_legacy(str(tmp_path), 25) is None  # a checkpoint written before positions were kept
  assert state.legacy_files(str(tmp_path)) == [str(tmp_path / "position-20.json")]


class LostPeerHvd:
  """A Horovod whose broadcasts fail as a survivor's did when a joining host died during its set-up
  (comm.sync.broadcast_state's op, Horovod's in-place broadcast over resource handles)."""
  error = RuntimeError("[/tmp/pip/gloo/transport/tcp/pair.cc:598] Connection reset by peer")

  def __init__(self):
    self.mpi_ops = types.SimpleNamespace(MPI_LIB=types.SimpleNamespace(horovod_broadcast_inplace_resource=self.fail))

  def fail(self, handles, **kwargs):
    raise self.error

  def rank(self):
    return 0

  def broadcast_object(self, obj, root_rank, name):
    raise AssertionError("not reached")


def test_a_peer_lost_during_the_states_sync_rolls_back_instead_of_ending_the_survivors():
  # Horovod's run_fn calls state.sync() outside the function it recovers; only HorovodInternalError
  # is answered there by restore() and a new world.
  import tensorflow as tf
  from horovod.common.exceptions import HorovodInternalError
  state = RunState(LostPeerHvd(), [tf.Variable(1.0)], Position(step=4))
  with pytest.raises(HorovodInternalError):
    state.sync()


def test_other_errors_in_the_sync_are_not_taken_for_a_lost_peer():
  import tensorflow as tf

  class Broken(LostPeerHvd):
    error = ValueError("a bug")
  with pytest.raises(ValueError, match="a bug"):
    RunState(Broken(), [tf.Variable(1.0)], Position()).sync()


def test_under_the_adaptive_policy_a_resumed_run_keeps_tau_and_goes_on_near_its_batch(tmp_path):
  # 20 updates at K = 4 on 2 ranks (global batch 256) with gains of 3: the checkpoint's position has
  # tau 60 and the global batch; resumed with --accumulation_steps=1, the run says where it goes on
  # and its controller starts at the K of that batch (training/batch_control.Controller.start_k).
  from training.adaptive import goodput
  from training.adaptive.batch_control import Controller
  p = Position()
  for _ in range(20):
    p = p.after_step(2, 128, 256, readers=1, tau=3.0)
  data_config = types.SimpleNamespace(global_batch=64, step_batch=32, adaptive=True)
  config = types.SimpleNamespace(run=types.SimpleNamespace(model_dir=str(tmp_path), epochs=4.0, max_steps=0),
                                 data=data_config, optim=types.SimpleNamespace(adascale_base=32))
  mode = modes.Fixed(None, world(2))
  lines = []
  mode.log = lambda fmt, *args: lines.append(fmt % args)
  restored = mode.restored("D/ckpt-20", 20, p, config, types.SimpleNamespace(steps_per_epoch=23, readers=1,
                                                                   info=types.SimpleNamespace(num_train=1497)))
  assert restored.tau == 60.0 and restored.global_batch == 256
  assert "tau 60.0 base-batch steps" in lines[0] and "goes on near its global batch 256" in lines[0], lines
  assert "the global batch was" not in lines[0]  # it is not changing to the flags' 64
  c = Controller(micro_batch=32, base_batch=32, every=50, noise=None, decide=lambda k: k, log=print)
  c.new_world(2, (1, 8), goodput.Prior(micro=0.05, exchange={"none": 0.01}))
  assert c.start_k(1, restored.global_batch) == 4


class MaxHvd:
  """Horovod's Max allreduce over this rank and a peer whose stop request is `peer`."""
  Max = "max"

  def __init__(self, peer: int):
    self.peer, self.names = peer, []

  def allreduce(self, tensor, op, name):
    import tensorflow as tf
    assert op == self.Max
    self.names.append(name)
    return tf.maximum(tensor, self.peer)


@pytest.mark.parametrize("mine, peer, want", [(0, 0, 0), (10, 0, 10), (0, 15, 15)])
def test_a_stop_asked_during_start_ups_data_checks_is_agreed_at_the_inputs_barrier(mine, peer, want):
  # A notice during start-up (ImageNet's files scanned, a data set written) waited for the first step,
  # after tracing it (minutes for ResNet-50), past Slurm's --signal=B:USR1@120 window.
  hvd = MaxHvd(peer)
  data_config = types.SimpleNamespace(source=None)
  assert modes.Fixed(hvd, types.SimpleNamespace(local_rank=0)).prepare_input(data_config, mine) == want
  assert hvd.names == ["stop_input_ready"]  # the one collective: the barrier the node's writer is waited at
  # --elastic: no collective before the elastic loop (a joining rank would meet none): the first step agrees it.
  assert modes.Elastic(hvd, types.SimpleNamespace(local_rank=0), 0).prepare_input(data_config, mine) == 0
  assert hvd.names == ["stop_input_ready"]
