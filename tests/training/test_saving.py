"""training/persist/saving.py: the one save path (the loop's checkpoints and the elastic commit's), on a
real tf.train.Checkpoint in one process; any_rank stands in for the other ranks' answer."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.persist import checkpoints
from training.state import Position, RunState
from training.persist.saving import Saver


def run_state():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  step = tf.Variable(0, dtype=tf.int64)
  return model, tf.train.Checkpoint(model=model, step=step)


def saver_for(directory, any_rank=None, writer=True):
  model, checkpoint = run_state()
  saver = Saver(checkpoint, str(directory), keep=3, log=lambda *a: None, floating=model.variables, any_rank=any_rank)
  if writer:
    saver.writer()
  return model, saver


def test_a_save_is_written_once_per_step_with_its_position_inside(tmp_path):
  _, saver = saver_for(tmp_path)
  assert saver.save(5, position=Position(epoch=1, step=5))
  index = tmp_path / "ckpt-5.index"
  first = os.stat(index).st_ino
  assert saver.save(5, position=Position(epoch=9, step=5)) and os.stat(index).st_ino == first  # nothing rewritten
  assert saver.newest == str(tmp_path / "ckpt-5") == checkpoints.newest(str(tmp_path))
  # One file set: no position-N.json to pair with the wrong checkpoint (an elastic rollback rewriting ckpt-N).
  assert not list(tmp_path.glob("position-*"))
  _, again = saver_for(tmp_path)
  assert again.writer().restore_newest() == 5 and again.restored_position(5) == Position(epoch=1, step=5)


def test_a_completed_evaluation_is_recorded_beside_its_checkpoint_and_goes_with_it(tmp_path):
  _, saver = saver_for(tmp_path)
  record = {"step": 5, "top1": 0.5, "top5": 0.9, "loss": 1.2, "count": 300, "reached": None}
  saver.record_evaluation(5, record)  # no checkpoint 5 yet: nothing recorded
  assert not (tmp_path / "eval-5.json").exists()
  saver.save(5, position=Position(epoch=1, step=5))
  saver.record_evaluation(5, record)
  _, again = saver_for(tmp_path)
  again.writer().restore_newest()
  assert again.restored_position(5) == Position(epoch=1, step=5, evaluated=record)
  for step in (6, 7, 8):  # keep=3: checkpoint 5 is dropped, and its record with it
    saver.save(step, position=Position(step=step))
  assert not (tmp_path / "eval-5.json").exists() and not (tmp_path / "ckpt-5.index").exists()


def test_a_checkpoint_written_again_at_a_step_drops_the_older_ones_record(tmp_path):
  _, saver = saver_for(tmp_path)
  saver.save(5, position=Position(step=5))
  saver.record_evaluation(5, {"step": 5, "top1": 0.5})
  _, other = saver_for(tmp_path)  # another process's writer (an elastic world's new rank 0) saves ckpt-5 again
  other.save(5, position=Position(step=5, epoch=1))
  assert not (tmp_path / "eval-5.json").exists()


def test_inf_on_another_rank_refuses_the_save_everywhere(tmp_path):
  asked = []
  _, saver = saver_for(tmp_path, any_rank=lambda bad: asked.append(bad) or True)  # a peer's weights hold NaN
  assert not saver.save(3) and asked == [False]
  assert checkpoints.newest(str(tmp_path)) is None


def test_without_agreement_this_ranks_weights_decide(tmp_path):
  model, saver = saver_for(tmp_path, any_rank=lambda bad: False)
  model.variables[0].assign(np.full(model.variables[0].shape, np.inf, np.float32))
  assert not saver.save(3, agree=False) and checkpoints.newest(str(tmp_path)) is None


def test_finiteness_is_judged_once_by_the_saver_not_again_by_the_writer(tmp_path):
  # A variable outside `floating` (an integer counter in the real run) is not the saver's to judge;
  # Checkpoints.save judged every variable again before, and refused this save.
  model, checkpoint = run_state()
  extra = tf.Variable([np.nan], dtype=tf.float32)
  checkpoint.extra = extra
  saver = Saver(checkpoint, str(tmp_path), 3, lambda *a: None, floating=model.variables)
  saver.writer()
  assert saver.save(7) and checkpoints.newest(str(tmp_path)) == str(tmp_path / "ckpt-7")


def test_a_rank_that_does_not_write_agrees_and_writes_nothing(tmp_path):
  _, saver = saver_for(tmp_path, writer=False)
  assert saver.save(2) and saver.newest is None and not os.listdir(tmp_path)


def test_newest_reads_the_directory_whoever_asks(tmp_path):
  # What the watchdog's and a lost peer's lines name, before any Checkpoints object exists.
  assert checkpoints.newest(str(tmp_path / "missing")) is None
  for n in (3, 12, 7):
    (tmp_path / f"ckpt-{n}.index").write_text("")
  (tmp_path / "ckpt-20.data-00000-of-00001").write_text("")  # data without an index: not a checkpoint
  assert checkpoints.newest(str(tmp_path)) == str(tmp_path / "ckpt-12")


def test_the_fp16_loss_scale_is_checkpointed_and_resumed(tmp_path):
  # A resumed fp16 run restarting at 2^15 could count its first overflow-skipped steps as a divergence.
  import types
  from optimizers import precision
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  optimizer = keras.optimizers.SGD(0.1)
  run = types.SimpleNamespace(model_dir=str(tmp_path), keep_checkpoints=3, background_checkpoints=True)
  scale = precision.DynamicLossScale(True)
  _, saver = Saver.of_model(model, optimizer, run, lambda *a: None, loss_scale=scale)
  scale.scale.assign(256.0)
  scale.good_steps.assign(17)
  saver.writer()
  assert saver.save(3)
  saver.wait()  # written in the background: a restarted process starts after it
  again = precision.DynamicLossScale(True)
  _, restored = Saver.of_model(model, optimizer, run, lambda *a: None, loss_scale=again)
  assert restored.writer().restore_newest() == 3
  assert (float(again.scale), int(again.good_steps)) == (256.0, 17)


def test_an_fp16_run_resumes_from_a_checkpoint_without_a_loss_scale(tmp_path):
  # make faults' diverge-fp16 row resumes an fp32 run with --precision=fp16: once the scale was
  # checkpointed, that checkpoint was refused as "other variables than this model", exit 2.
  import types
  from optimizers import precision
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  optimizer = keras.optimizers.SGD(0.1)
  run = types.SimpleNamespace(model_dir=str(tmp_path), keep_checkpoints=3, background_checkpoints=True)
  saved_step, fp32 = Saver.of_model(model, optimizer, run, lambda *a: None, loss_scale=precision.DynamicLossScale(False))
  fp32.writer()
  saved_step.assign(5)
  assert fp32.save(5)
  fp32.wait()  # written in the background: a restarted process starts after it
  weights = [w.numpy() for w in model.weights]
  for w in model.weights:
    w.assign(tf.zeros_like(w))
  lines = []
  scale = precision.DynamicLossScale(True)
  step, fp16 = Saver.of_model(model, optimizer, run, lambda fmt, *a: lines.append(fmt % a), loss_scale=scale)
  assert fp16.writer().restore_newest() == 5 and int(step) == 5
  assert all(np.array_equal(w.numpy(), want) for w, want in zip(model.weights, weights))
  assert lines == [f"the fp16 loss scale starts again at {float(scale.scale):g}: ckpt-5 holds none (it was written "
                   "at another --precision, or before the scale was kept)"]
  # Its own checkpoints hold the scale again, and a model that differs is still refused.
  assert fp16.save(6)
  fp16.wait()  # written in the background: a restarted process starts after it
  scale.scale.assign(64.0)
  again = precision.DynamicLossScale(True)
  _, later = Saver.of_model(model, optimizer, run, lambda *a: None, loss_scale=again)
  assert later.writer().restore_newest() == 6 and float(again.scale) == float(precision.DynamicLossScale(True).scale)
  other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
  _, wrong = Saver.of_model(other, keras.optimizers.SGD(0.1), run, lambda *a: None,
                            loss_scale=precision.DynamicLossScale(True))
  with pytest.raises(checkpoints.CheckpointError, match="holds other variables than this model"):
    wrong.writer().restore_newest()


def powersgd_run(tmp_path, rank=2, seed=0, average=None, lines=None, loss_scale=None):
  """(step, Saver, model, PowerSGD) of a Dense 6 -> 4 run under --compression=powersgd at `rank`."""
  import types
  from comm.powersgd import PowerSGD
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
  compressor = PowerSGD([v.shape for v in model.trainable_variables], rank=rank, min_ratio=1, seed=seed)
  run = types.SimpleNamespace(model_dir=str(tmp_path), keep_checkpoints=3, background_checkpoints=True)
  log = (lambda fmt, *a: lines.append(fmt % a)) if lines is not None else (lambda *a: None)
  step, saver = Saver.of_model(model, keras.optimizers.SGD(0.1), run, log, any_rank=lambda bad: bad,
                               loss_scale=loss_scale, powersgd=compressor, average=average)
  return step, saver, model, compressor


def test_powersgd_state_is_averaged_over_ranks_checkpointed_and_resumed(tmp_path):
  # The residuals differ per rank; a save averages them on every rank first (here a stand-in for a
  # peer holding zeros: the mean halves them), so rank 0's checkpoint is every rank's.
  averaged = []
  halve = lambda tensors: averaged.append(len(tensors)) or [t / 2 for t in tensors]
  _, saver, _, compressor = powersgd_run(tmp_path, average=halve)
  assert compressor.views == ((6, 4), None) and len(compressor.variables) == 2
  residual = np.arange(24, dtype=np.float32).reshape(6, 4)
  compressor.residuals[0].assign(residual)
  compressor.qs[0].assign(np.ones((4, 2), np.float32))
  saver.writer()
  assert saver.save(4) and averaged == [1]
  saver.wait()  # written in the background: a restarted process starts after it
  np.testing.assert_array_equal(compressor.residuals[0].numpy(), residual / 2)
  _, resumed, _, again = powersgd_run(tmp_path, seed=1)
  assert resumed.writer().restore_newest() == 4
  np.testing.assert_array_equal(again.residuals[0].numpy(), residual / 2)
  np.testing.assert_array_equal(again.qs[0].numpy(), np.ones((4, 2)))


def test_a_checkpoint_without_powersgd_state_loads_and_says_it_starts_afresh(tmp_path):
  # Written before --compression=powersgd (and in fp32): the weights come back, the residuals stay
  # zero, the Qs their seeded draw, one line each for PowerSGD's state and fp16's loss scale.
  import types
  from optimizers import precision
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
  run = types.SimpleNamespace(model_dir=str(tmp_path), keep_checkpoints=3, background_checkpoints=True)
  step, plain = Saver.of_model(model, keras.optimizers.SGD(0.1), run, lambda *a: None)
  step.assign(5)
  plain.writer()
  assert plain.save(5)
  plain.wait()  # written in the background: a restarted process starts after it
  weights = [w.numpy() for w in model.weights]
  lines = []
  step, saver, resumed_model, compressor = powersgd_run(tmp_path, lines=lines, loss_scale=precision.DynamicLossScale(True))
  fresh = [v.numpy() for v in compressor.variables]
  for w in resumed_model.weights:
    w.assign(tf.zeros_like(w))
  assert saver.writer().restore_newest() == 5 and int(step) == 5
  assert all(np.array_equal(w.numpy(), want) for w, want in zip(resumed_model.weights, weights))
  assert all(np.array_equal(v.numpy(), want) for v, want in zip(compressor.variables, fresh))
  assert lines[0].startswith("the fp16 loss scale starts again at 32768: ckpt-5 holds none")
  assert lines[1:] == ["PowerSGD's residuals start at zero and its Qs afresh: ckpt-5 holds none at rank 2 (it was "
                       "written without --compression=powersgd, or at another --powersgd_rank)"]
  # At another --powersgd_rank the shapes differ: the state starts afresh the same way.
  compressor.residuals[0].assign(tf.ones((6, 4)))
  assert saver.save(6)
  saver.wait()  # written in the background: a restarted process starts after it
  lines.clear()
  _, other, _, at_one = powersgd_run(tmp_path, rank=1, lines=lines)
  assert other.writer().restore_newest() == 6 and lines == [
      "PowerSGD's residuals start at zero and its Qs afresh: ckpt-6 holds none at rank 1 (it was written without "
      "--compression=powersgd, or at another --powersgd_rank)"]
  assert not at_one.residuals[0].numpy().any()
