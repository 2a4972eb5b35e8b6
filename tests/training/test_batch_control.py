"""training/batch_control.py: the adaptive policy's controller, on a fake clock and a fake noise
scale, through the loop's hooks: what it times, when it decides, what it chooses and says."""
import types

import pytest

from training import batch_control, goodput
from training.batch_control import Controller


class Clock:
  """A clock each update of K micro-batches moves by exchange + K x micro seconds."""

  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def noise(b_simple, spread=0.1):
  return types.SimpleNamespace(b_simple=b_simple,
                               b_simple_range=lambda: (b_simple * (1 - spread), b_simple * (1 + spread)))


def controller(b_simple=1e6, every=10, agree=lambda k: k, lines=None, ranks=2, k_range=(1, 8), exchange=0.5):
  clock = Clock()
  c = Controller(micro_batch=32, base_batch=32, every=every, noise=noise(b_simple), agree=agree,
                 log=lambda fmt, *args: (lines if lines is not None else []).append(fmt % args), clock=clock)
  c.new_world(ranks, k_range, exchange)
  return c, clock


def train(c, clock, updates, first=1, exchange=0.5, micro=0.1):
  """Updates first..first+updates-1 at the controller's K, as the loop tells them; the first
  K change the controller asks for (or None)."""
  for step in range(first, first + updates):
    c.before("step", step - 1)
    clock.now += exchange + c.k * micro
    c.after_step(step, step, None, 0.1)
    k = c.resize(step)
    if k:
      return step, k
  return None


def test_the_first_updates_of_a_stretch_are_not_timed_and_evaluations_are_not_steps():
  c, clock = controller()
  c.stretch(1)
  train(c, clock, batch_control.WARMUP + 3)
  assert c.times == {1: [pytest.approx(0.6)] * 3}
  c.before("eval", 5)  # an evaluation between two steps is not an update's time
  clock.now += 100
  c.after_step(6, 6, None, 0.1)
  assert len(c.times[1]) == 3


def test_it_decides_every_n_updates_once_the_current_k_is_timed():
  asked = []
  c, clock = controller(every=10, agree=lambda k: asked.append(k) or k)
  c.stretch(1)
  # Exchange-bound (0.5 s against 0.1 s a micro-batch) with B_simple far above any batch: r = S,
  # so the largest K makes the most progress a second.
  assert train(c, clock, 12) == (10, 8)
  assert asked == [8]  # one broadcast, at update 10


def train_all(c, clock, updates, exchange=0.5, micro=0.1):
  """Updates 1..updates, each K change taken at once as train.py takes it: [(update, new K, probe)]."""
  changes, step = [], 1
  while step <= updates:
    got = train(c, clock, updates - step + 1, first=step, exchange=exchange, micro=micro)
    if not got:
      break
    changes.append((got[0], got[1], c.changes[-1].probe))
    c.stretch(got[1])
    step = got[0] + 1
  return changes


@pytest.mark.parametrize("b_simple, exchange, want", [
    # Perfect scaling, the exchange dominates: the largest batch at the first decision.
    (1e6, 0.5, [(10, 8, False)]),
    # B_simple far below the batch: the model says stay; it tries K=2 once (one K timed), and the
    # two-K fit sends it back.
    (5.0, 0.5, [(10, 2, True), (20, 1, False)]),
    # Nothing to amortise: K x the time for at most K x the progress; after the try, every K is
    # within the 5% that moves it, so it stays where it is.
    (1e6, 0.0, [(10, 2, True)]),
])
def test_it_grows_the_batch_only_where_the_noise_scale_and_the_exchange_pay_for_it(b_simple, exchange, want):
  c, clock = controller(b_simple=b_simple, exchange=exchange)
  c.stretch(1)
  assert train_all(c, clock, 60, exchange=exchange) == want


def test_a_probe_fits_the_fixed_cost_the_exchange_timed_alone_misses():
  # The exchange alone takes 0.05 s, the update's other fixed costs 0.45 s more: with one K the
  # model under-rates larger batches and stays (B_simple 200); the try at K=2 shows the fixed cost,
  # and it grows to the best K of the true t(K) = 0.5 + 0.1 K.
  c, clock = controller(b_simple=200.0, exchange=0.05)
  c.stretch(1)
  assert train_all(c, clock, 60, exchange=0.5) == [(10, 2, True), (20, 4, False)]
  truth = goodput.StepTime(0.5, 0.1)
  assert max(range(1, 9), key=lambda k: goodput.goodput(k, truth, 200.0, 32, 32, 2)) == 4
  assert c.model().exchange == pytest.approx(0.5) and c.model().micro == pytest.approx(0.1)


def test_a_gain_within_the_estimates_spread_does_not_move_it():
  # B_simple 60 at a global batch of 64: K=2 gains about 13% at 60, but the spread reaches 6, where
  # it would lose: under the 5% that moves it at the estimate's worst (both K's timed: no try).
  c, clock = controller(b_simple=60.0, exchange=0.5)
  c.noise = noise(60.0, spread=0.9)
  c.times = {1: [0.6] * 5, 2: [0.7] * 5}
  c.stretch(1)
  assert train_all(c, clock, 30) == []


def test_rank_0s_choice_is_every_ranks_and_each_change_is_one_line_and_a_summary_row():
  lines = []
  c, clock = controller(agree=lambda k: 4, lines=lines)  # rank 0 chose 4
  c.stretch(1)
  assert train(c, clock, 12) == (10, 4)
  assert len(lines) == 1 and lines[0].startswith("batch: K 1 -> 4 (global batch 64 -> 256) at update 10: ")
  assert "update time model 0.500 + 0.100 K s" in lines[0]
  c.stretch(4)
  summary = c.summary()
  assert summary["k_final"] == 4 and summary["k_range"] == [1, 8]
  # its own time, on this process's clock (not the fake one): the hooks and the decisions ran
  assert 0 < summary["own_seconds"] < 5 and summary["change_seconds"] == 0.0
  assert summary["changes"] == [{"step": 10, "k_from": 1, "k_to": 4, "global_from": 64, "global_to": 256,
                                 "gain": pytest.approx(summary["changes"][0]["gain"]), "b_simple": 1e6,
                                 "probe": False}]
  assert summary["changes"][0]["gain"] > 1.05


def test_after_two_ks_the_model_is_fitted_to_both():
  c, clock = controller(b_simple=1e6, exchange=0.0)  # the prior says: no exchange
  c.stretch(1)
  train(c, clock, 8, exchange=0.3)
  c.stretch(2)
  train(c, clock, 8, first=9, exchange=0.3)
  model = c.model()
  assert model.exchange == pytest.approx(0.3) and model.micro == pytest.approx(0.1)


def test_a_new_world_keeps_the_micro_batch_time_and_starts_near_the_last_global_batch():
  c, clock = controller(b_simple=1e6, exchange=0.5, k_range=(1, 8))
  c.stretch(1)
  train(c, clock, 8)
  c.stretch(c.k)
  # One rank now: K from 2; the global batch 64 of 2 x 32 is kept by K = 2.
  c.new_world(1, (2, 16), exchange_seconds=0.0)
  assert c.micro_seconds == pytest.approx(0.1)
  assert c.start_k(k_flag=1, global_batch=64) == 2
  assert c.start_k(k_flag=1, global_batch=0) == 2  # the flag's, within the range
  assert c.start_k(k_flag=1, global_batch=32 * 40) == 16
  c.stretch(2)
  # No exchange on one rank: with the kept micro-batch time the first choice stays at 2.
  assert c.first_choice(step=8) == 2
  c.new_world(2, (1, 8), exchange_seconds=2.0)  # a slow link now: the first choice grows at once
  c.stretch(1)
  assert c.first_choice(step=8) == 8


def test_the_controllers_rule_is_goodputs():
  # What it chooses is goodput.choose on its fitted model: one rule for the planner and the run.
  c, clock = controller(b_simple=300.0, exchange=0.2)
  c.stretch(1)
  got = train(c, clock, 20, exchange=0.2)
  want = goodput.choose(1, 8, goodput.StepTime(0.2, 0.1), 300.0, (270.0, 330.0), 32, 32, 2)
  assert (got[1] if got else 1) == want.k


def test_every_rank_makes_the_decisions_collective_at_the_same_updates():
  # A decision is a broadcast: a rank that skipped one would hang the others (found in the elastic
  # launch: a joining rank, with no last world's time, skipped the world's first choice).
  calls = {"survivor": [], "joiner": []}
  rank0 = {"k": 1}  # what rank 0 chose: the survivor is rank 0
  survivor, clock = controller(agree=lambda k: calls["survivor"].append(k) or rank0.update(k=k) or k)
  survivor.stretch(1)
  train(survivor, clock, 8)
  survivor.new_world(2, (1, 8), 0.5)
  joiner, joiner_clock = controller(agree=lambda k: calls["joiner"].append(k) or rank0["k"])
  for c in (survivor, joiner):
    c.stretch(1)
    c.stretch(c.first_choice(step=8))
  assert len(calls["survivor"]) == len(calls["joiner"]) == 1
  assert joiner.micro_seconds is None and survivor.micro_seconds is not None
  assert joiner.k == survivor.k == 8  # the joiner takes rank 0's
  # Then each asks after the same updates, however long its own took (rank 0's K stays here).
  rank0["k"] = 8
  survivor.agree = lambda k: calls["survivor"].append(k) or 8
  for c, clk, slow in ((survivor, clock, 0.0), (joiner, joiner_clock, 5.0)):
    c.stretch(8)
    assert train(c, clk, 30, first=9, exchange=0.5 + slow) is None
  # The first choice, then updates 20 and 30 (at 10 the stretch has had 2, its untimed warm-up).
  assert len(calls["survivor"]) == len(calls["joiner"]) == 3


def test_times_of_a_k_left_long_ago_are_not_compared_with_todays():
  # K=2 was timed at updates 13-20 on a fast machine (0.3 s); K=1 now takes 0.9 s on a slower one.
  # Compared, the two read as a large fixed cost and call for the largest batch; once K=2's times
  # are STALE decisions old, K=1 is modelled alone with the exchange timed alone: it stays at 1.
  def slowed(first):
    c, clock = controller(b_simple=200.0, exchange=0.05)
    c.times, c._timed_at, c._probed, c._now = {2: [0.3] * 8}, {2: 20}, True, 20
    c.stretch(1)
    return train(c, clock, 40, first=first, exchange=0.6, micro=0.3)
  assert slowed(first=21) == (30, 8)  # fresh: the drift misread
  assert slowed(first=21 + batch_control.STALE * 10) is None
