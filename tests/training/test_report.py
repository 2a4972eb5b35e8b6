"""training/ending/report.py: the stop and divergence sentences as tables (test_faults, test_slurm and
make faults parse them), and the line a run ends with."""
import dataclasses
import types

import pytest

from training import loop
from training.ending import outcome, report
from training.evaluation import HeldOut


@pytest.mark.parametrize("reason, code, checkpoint, want", [
    ("SIGTERM received", 15, "runs/a/ckpt-35",
     "stopped: SIGTERM received at step 35 (epoch 0.76); checkpoint runs/a/ckpt-35; run the same command to "
     "resume (exit 75)"),
    ("", 10, None,  # the request came from another rank: the agreed code names it
     "stopped: SIGUSR1 on another rank at step 35 (epoch 0.76); checkpoint written by rank 0; run the same command "
     "to resume (exit 75)"),
    ("the launcher's process 41 (mpirun) is gone", 1, "d/ckpt-35",
     "stopped: the launcher's process 41 (mpirun) is gone at step 35 (epoch 0.76); checkpoint d/ckpt-35; run the "
     "same command to resume (exit 75)"),
])
def test_stop_line(reason, code, checkpoint, want):
  assert report.stop_line(reason, code, 35, 0.761, checkpoint) == want


@pytest.mark.parametrize("cause, skipped, newest, want", [
    (loop.NONFINITE_STEP, 0, None,
     "diverged: non-finite loss or gradient at step 4 (lr 1.2467e+05); the update was not applied; no checkpoint "
     "is written; newest good checkpoint none; lower --base_lr or lengthen --warmup_epochs (exit 3)"),
    (loop.NONFINITE_STEP, 10, "d/ckpt-20",  # fp16: the loss scale could not recover
     "diverged: non-finite loss or gradient at step 4 (lr 1.2467e+05, 10 overflow-skipped steps in a row); the "
     "update was not applied; no checkpoint is written; newest good checkpoint d/ckpt-20; lower --base_lr or "
     "lengthen --warmup_epochs (exit 3)"),
    (loop.NONFINITE_WEIGHTS, 0, "d/ckpt-20",
     "diverged: inf/NaN in the weights or BatchNorm statistics at step 3 (lr 1.2467e+05), found before "
     "checkpointing; no checkpoint is written; newest good checkpoint d/ckpt-20; lower --base_lr or lengthen "
     "--warmup_epochs (exit 3)"),
])
def test_divergence_line(cause, skipped, newest, want):
  assert report.divergence_line(cause, 3, 124670.0, skipped, newest) == want


TARGETS = types.SimpleNamespace(has_target=True, target_top1=0.6, target_top5=0.0)
NO_TARGET = types.SimpleNamespace(has_target=False, target_top1=0.0, target_top5=0.0)
HELD = HeldOut(top1=0.79, top5=0.97, loss=1.0, count=300)


@pytest.mark.parametrize("ending, targets, starts", [
    (loop.Ending(outcome.OK, loop.FINISHED, 92, 2.0, 0.1, 0, HELD), NO_TARGET, None),
    (loop.Ending(outcome.STOPPED, loop.SIGNAL, 35, 0.76, 0.1, 0, None, stop_code=15), NO_TARGET, "stopped: "),
    (loop.Ending(outcome.DIVERGED, loop.NONFINITE_STEP, 3, 0.07, 9.0, 0), TARGETS, "diverged: non-finite loss"),
    (loop.Ending(outcome.TARGET_REACHED, loop.TARGET, 56, 1.22, 0.1, 0, HELD, loop.Reached(12.8, 56, 1.217)),
     TARGETS, "target reached: --target_top1=0.6 at step 56 (epoch 1.22), 12.8 s after start-up"),
    (loop.Ending(outcome.OK, loop.FINISHED, 92, 2.0, 0.1, 0, HELD), TARGETS, "target not reached: --target_top1=0.6"),
])
def test_final_line(ending, targets, starts):
  line = report.final_line(ending, "", "d/ckpt-35", targets)
  assert line == starts if starts is None else line.startswith(starts), line


def test_adascale_keys_give_the_gain_and_both_clocks_in_passes_over_the_split():
  ending = loop.Ending(status=outcome.OK, cause=loop.FINISHED, step=100, epochs=1.02, lr=0.1, skipped=0,
                       images=6400, gain=3.0, tau=40.0)
  config = types.SimpleNamespace(optim=types.SimpleNamespace(base_batch=16), data=types.SimpleNamespace(global_batch=64))
  info = types.SimpleNamespace(num_train=640)
  assert report.adascale_keys(ending, config, info) == {"adascale": {
      "base_batch": 16, "scale": 4.0, "gain": 3.0, "tau": 40.0, "base_epochs": 1.0, "data_epochs": 10.0}}
  linear = dataclasses.replace(ending, gain=None, tau=0.0)
  assert report.adascale_keys(linear, config, info) == {}
