"""--lr_scaling=adascale in the real Loop and Course (fakes for the step and the data, as
test_loop.py): each step's LR is r x the base batch's schedule at tau, tau moves by r, the run
ends when tau has counted --epochs of base-batch steps (floor(N / B0) an epoch, whatever the batch),
the data's epochs run on under it; tau and the noise scale's estimates survive a checkpoint."""
import types

import pytest

from optimizers import adascale
from test_loop import Data, Recorder
from training import course, loop
from training.ending import outcome
from training.state import Position, RunState
from training.loop import Loop, Policy, Work
from training.adaptive.noise_scale import NoiseScale
from training.step import StepOut

ONE = types.SimpleNamespace(size=1)
B0, B = 8, 64  # S = 8


def gain_of(b_simple: float) -> float:
  return (1 + b_simple / B0) / (1 + b_simple / B)


class AdaRun:
  """The Loop with a gain whose B_simple comes from `noise(updates so far)`; `lrs` holds each step's LR."""

  def __init__(self, noise, spe=4, epochs=2.0, max_steps=0, tau=0.0, nonfinite=(), policy=Policy()):
    self.noise, self.nonfinite, self.lrs, self.events = noise, set(nonfinite), [], []
    data_config = types.SimpleNamespace(step_batch=B, global_batch=B)
    self.course = course.Course(RunState.at(Position(tau=tau)), types.SimpleNamespace(epochs=epochs, max_steps=max_steps),
                                ONE, data_config, base_batch=B0, num_train=spe * B)
    self.gain = adascale.Gain(B0, B, lambda: self.noise(self.course.step))
    work = Work(evaluate=self.evaluate, save=lambda step: True, schedule=lambda s: 0.5 + s, stop_code=lambda: 0,
                gain=self.gain)
    self.loop = Loop(self.course, Data(spe), self.step, work=work, policy=policy, hooks=[Recorder(self.events)])

  def step(self, images, labels, lr, stop):
    self.lrs.append(lr)
    return StepOut(loss=1.0, correct=2.0, finite=self.course.step + 1 not in self.nonfinite, stop=stop,
                   sq_small=0.0, sq_big=0.0)

  def evaluate(self, on_batch):
    return None

  def run(self):
    return self.loop.run(), [e for e in self.events if e[0] in ("save", "eval")]


def test_the_lr_is_r_times_the_base_schedule_at_tau_and_the_run_ends_when_tau_counted_the_epochs():
  r = gain_of(40.0)  # 3.69 of S = 8
  run = AdaRun(lambda updates: 40.0, spe=4, epochs=2)
  ending, events = run.run()
  # 2 epochs of 4 steps of B are 64 base-batch steps: tau >= 64 after ceil(64 / r) = 18 updates.
  updates = 18
  assert (updates - 1) * r < 64 <= updates * r
  assert ending.step == updates and ending.tau == pytest.approx(updates * r) and ending.gain == pytest.approx(r)
  want = [r * (0.5 + k * r) for k in range(updates)]
  assert run.lrs == pytest.approx(want, rel=1e-12)
  # The data's epochs (4 steps each) end at 4, 8, 12, 16, each saved and evaluated; the run's end at 18.
  assert events == [(kind, s) for s in (4, 8, 12, 16, 18) for kind in ("save", "eval")]
  assert (ending.status, ending.cause) == (outcome.OK, loop.FINISHED)
  assert ending.epochs == pytest.approx(updates * r / 32) and ending.images == updates * B


def test_the_gain_is_1_until_the_noise_scale_is_measured_then_follows_it():
  noise = lambda updates: None if updates < 3 else 10.0 * updates  # B_simple grows, as in training
  run = AdaRun(noise, spe=100, epochs=1, max_steps=8)
  ending, _ = run.run()
  gains = [1.0 if u < 3 else gain_of(10.0 * u) for u in range(8)]
  taus = [sum(gains[:k]) for k in range(8)]  # tau before each update
  assert run.lrs == pytest.approx([g * (0.5 + t) for g, t in zip(gains, taus)], rel=1e-12)
  assert ending.tau == pytest.approx(sum(gains)) and ending.step == 8  # --max_steps counts updates
  assert gains[-1] > gains[3] > 1.0


def test_an_fp16_step_skipped_for_an_overflow_does_not_move_the_clock():
  run = AdaRun(lambda u: 40.0, spe=100, epochs=1, max_steps=3, nonfinite={2}, policy=Policy(fp16=True))
  ending, _ = run.run()
  assert ending.step == 3 and ending.tau == pytest.approx(2 * gain_of(40.0))


def through_a_checkpoint(directory, step, position):
  """The position a resumed run reads: saved inside checkpoint `step` and restored in another saver."""
  import tensorflow as tf
  from training.persist.saving import Saver
  savers = [Saver(tf.train.Checkpoint(step=tf.Variable(0)), str(directory), 3, lambda *a: None, []) for _ in "ab"]
  savers[0].writer()
  assert savers[0].save(step, position=position)
  assert savers[1].writer().restore_newest() == step
  return savers[1].restored_position(step)


def test_tau_and_the_noise_estimates_survive_the_checkpoint_and_the_run_goes_on_from_them(tmp_path):
  noise = NoiseScale()
  for sq_small, sq_big in [(3.0, 1.9), (2.5, 1.4), (2.8, 1.7)]:
    noise.update(sq_small, sq_big, 32, 64)
  position = Position(epoch=1, images=640, step=10, tau=37.25, noise=noise.state())
  back = through_a_checkpoint(tmp_path, 10, position)
  assert back == position
  again = NoiseScale()
  again.restore(back.noise)
  assert (again.b_simple, again.grad_sq, again.trace_sigma, again.steps) == \
      (noise.b_simple, noise.grad_sq, noise.trace_sigma, noise.steps)
  noise.update(2.2, 1.1, 32, 64)
  again.update(2.2, 1.1, 32, 64)
  assert again.b_simple == noise.b_simple  # the same next estimate: every rank's gain alike
  # A run resumed from it reads the base batch's schedule at tau = 37.25.
  run = AdaRun(lambda u: 40.0, spe=100, epochs=1, max_steps=11, tau=back.tau)
  run.course.state.position = back
  run.run()
  assert run.lrs[0] == pytest.approx(gain_of(40.0) * (0.5 + 37.25))


def test_the_schedule_is_the_base_batchs_whatever_the_batch_and_a_change_of_batch_moves_no_lr():
  # Fashion-MNIST, B0 = 64, S = 32: read in the batch's own steps (floor(60000 / 2048) = 29 an epoch,
  # tau x 64 / 2048 of them) the run ended at tau 928 rather than 937, and the LR jumped at a change of
  # batch (each batch's floor rounds another way). In base-batch steps both are exact.
  from optimizers import schedules
  optim = types.SimpleNamespace(base_lr=0.8, warmup_epochs=0.25, warmup_start_lr=0.1, lr_schedule="cosine",
                                decay_epochs=())
  ends = []
  for batch in (64, 2048, 4096):
    c = course.Course(RunState.at(Position(tau=0.0)), types.SimpleNamespace(epochs=1, max_steps=0), ONE,
                      types.SimpleNamespace(step_batch=batch, global_batch=batch), base_batch=64, num_train=60000)
    spe = 60000 // batch
    assert c.per_epoch(spe) == 937 and c.last_step(spe) == 937
    c.state.position = Position(tau=936.9)
    assert not c.finished(spe)
    c.state.position = Position(tau=937.0)
    ends.append(c.finished(spe))
  assert ends == [True] * 3
  base = schedules.for_run(optim, 64, 1, 937)  # what train.py reads at tau, times r
  assert (base.warmup_steps, base.total_steps, base.peak_lr) == (234, 937, 0.8 * 64 / 256)
  # Nothing in the LR depends on the batch but r: the warmup's start is multiplied by r like the peak.
  assert base(0) == 0.1


def test_a_position_written_before_adascale_reads_as_tau_0_and_no_estimates():
  old = {"epoch": 2, "history": [], "current": None, "images": 128, "step": 4}
  assert (Position.from_json(old).tau, Position.from_json(old).noise) == (0.0, None)
  fresh = NoiseScale()
  fresh.restore(None)
  assert fresh.b_simple is None and fresh.steps == 0
