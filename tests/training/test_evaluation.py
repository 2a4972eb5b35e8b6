"""training/evaluation.py on one process: global sums divided once, and the target's lines."""
import pytest
import tensorflow as tf

from flags.config import EvalConfig
from training import evaluation
from training.ending import outcome


@pytest.mark.parametrize("batches, want", [
    # [loss sum, top-1 hits, top-5 hits, count] per batch -> (top1, top5, loss, count)
    ([[30.0, 285, 299, 300]], (0.95, 299 / 300, 0.1, 300)),   # exactly 0.95, not float32's 0.94999999
    ([[8.0, 4, 4, 4], [2.0, 0, 1, 1]], (0.8, 1.0, 2.0, 5)),    # a short last batch weighs 1 of 5
])
def test_held_out_divides_the_sums_once(batches, want):
  dataset = [(tf.constant(b), None) for b in batches]
  held = evaluation.held_out(lambda sums, _: sums, dataset, lambda totals: totals)
  assert (held.top1, held.top5, held.loss, held.count) == pytest.approx(want)
  assert held.top1 == want[0]  # exact: what the target is compared with


def test_a_target_of_0_95_is_reached_by_285_of_300():
  held = evaluation.held_out(lambda sums, _: sums, [(tf.constant([1.0, 285, 300, 300]), None)], lambda t: t)
  assert outcome.after_eval(held.top1, held.top5, 0.95, 0.0, 0).status == outcome.TARGET_REACHED


@pytest.mark.parametrize("batches, seconds, runs", [
    # each agreement's batches: 1 before any is timed, then about AGREE_SECONDS of them, at most MAX_BETWEEN
    (10, 0.25, [1, 4, 4, 1]),
    (3, 2.0, [1, 1, 1]),                      # a batch over a second: an agreement before each
    (200, 0.001, [1, 64, 64, 64, 7]),
    (1, 0.1, [1]),
])
def test_the_ranks_agree_about_once_a_second_not_every_batch(batches, seconds, runs):
  clock, agreed, ran = [0.0], [], []

  def step(sums, _):
    clock[0] += seconds
    ran[-1] += 1
    return sums

  def agree(codes):  # one rank: the max over ranks is its own
    agreed.append(codes.numpy().tolist())
    ran.append(0)
    return codes

  data = [(tf.constant([1.0, 1, 1, 1]), None)] * batches
  held = evaluation.held_out(step, data, lambda t: t, agree=agree, clock=lambda: clock[0])
  assert held.count == batches
  assert ran[:-1] == runs and ran[-1] == 0  # the last agreement finds no batch left anywhere
  assert [more for _, more, _ in agreed] == [1] * len(runs) + [0]


def test_a_stop_is_seen_at_the_next_agreement():
  clock, done = [0.0], []

  def step(sums, _):
    clock[0] += 0.1
    done.append(1)
    return sums

  with pytest.raises(evaluation.Stopped) as stop:
    evaluation.held_out(step, [(tf.constant([1.0, 1, 1, 1]), None)] * 100, lambda t: t, agree=lambda c: c,
                        stop_code=lambda: 15 if clock[0] >= 0.35 else 0, clock=lambda: clock[0])
  assert stop.value.code == 15 and len(done) == 11  # asked during batch 4: seen after the second agreement's 10


@pytest.mark.parametrize("targets, reached, want", [
    (EvalConfig(0, 0.95, 0.0), {"seconds": 107.7, "step": 95, "epoch": 4.13},
     "target reached: --target_top1=0.95 at step 95 (epoch 4.13), 107.7 s after start-up; "
     "eval top1 0.9567 top5 1.0000"),
    (EvalConfig(5, 0.99, 0.999), {},
     "target not reached: --target_top1=0.99 and --target_top5=0.999 by the end, step 276 (epoch 12.00); "
     "eval top1 0.9567 top5 1.0000"),
])
def test_target_line(targets, reached, want):
  held = evaluation.HeldOut(top1=0.95667, top5=1.0, loss=0.1, count=300)
  assert evaluation.target_line(targets, reached, held, 276, 12.0) == want
  summary = evaluation.target_summary(targets, reached)
  assert summary["target_reached"] is bool(reached) and summary["target_step"] == reached.get("step")
