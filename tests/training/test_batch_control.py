"""training/adaptive/batch_control.py: the adaptive policy's controller of (K, c), on a fake clock and a fake
noise scale, through the loop's hooks: what it times, when it decides, what it chooses and says,
and that it settles where the true update time says it should."""
import pytest

from optimizers import adascale
from training.adaptive import batch_control, goodput
from training.adaptive.batch_control import Controller
from training.adaptive.goodput import Prior


class Clock:
  """A clock the tests move by each update's true time."""

  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


class Noise:
  """A noise scale whose B_simple the test sets, its range +-spread around it."""

  def __init__(self, b_simple, spread=0.1):
    self.b_simple, self.spread = b_simple, spread

  def b_simple_range(self):
    return None if self.b_simple is None else (self.b_simple * (1 - self.spread), self.b_simple * (1 + self.spread))


def line(fixed=0.5, micro=0.1):
  """The true update time fixed + K x micro, whatever c."""
  return lambda k, c: fixed + k * micro


PRIOR = Prior(micro=0.1, exchange={"none": 0.5})


def controller(b_simple=1e6, every=10, decide=lambda pair: pair, lines=None, ranks=2, k_range=(1, 8), prior=PRIOR,
               compressions=("none",)):
  clock = Clock()
  c = Controller(micro_batch=32, base_batch=32, every=every, noise=Noise(b_simple), decide=decide,
                 log=lambda fmt, *args: (lines if lines is not None else []).append(fmt % args), clock=clock,
                 compressions=compressions)
  c.new_world(ranks, k_range, prior)
  return c, clock


def train(c, clock, updates, first=1, truth=line(), b_simple=lambda step: None):
  """Updates first..first+updates-1 at the controller's pair, as the loop tells them (B_simple set
  before each when b_simple gives one); the first change the controller asks for (or None)."""
  for step in range(first, first + updates):
    c.noise.b_simple = b_simple(step) or c.noise.b_simple
    c.before("step", step - 1)
    clock.now += truth(c.k, c.c)
    c.after_step(step, step, None, 0.1)
    pair = c.resize(step)
    if pair:
      return step, pair
  return None


def train_all(c, clock, updates, truth=line(), b_simple=lambda step: None):
  """Updates 1..updates, each change taken at once as train.py takes it: [(update, K, c, kind)],
  kind 'try', 'return' (a try's end, back) or '' (a choice)."""
  changes, step = [], 1
  while step <= updates:
    got = train(c, clock, updates - step + 1, first=step, truth=truth, b_simple=b_simple)
    if not got:
      break
    last = c.changes[-1]
    changes.append((got[0], *got[1], "try" if last.probe else "return" if last.ends_try else ""))
    c.stretch(*got[1])
    step = got[0] + 1
  return changes


def best_k(truth, b_simple, k_range=(1, 8), c="none", ranks=2):
  """The K of most true goodput, r(B_K) / t(K), at b_simple: what the controller should reach."""
  return max(range(k_range[0], k_range[1] + 1),
             key=lambda k: adascale.gain(b_simple, 32, k * 32 * ranks) / truth(k, c))


def test_the_first_updates_of_a_stretch_are_not_timed_and_evaluations_are_not_steps():
  c, clock = controller()
  c.stretch(1, "none")
  train(c, clock, batch_control.WARMUP + 3)
  assert c.times == {(1, "none"): [pytest.approx(0.6)] * 3}
  c.before("eval", 5)  # an evaluation between two steps is not an update's time
  clock.now += 100
  c.after_step(6, 6, None, 0.1)
  assert len(c.times[(1, "none")]) == 3


def test_it_decides_every_n_updates_once_the_current_pair_is_timed():
  asked = []
  c, clock = controller(every=10, decide=lambda pair: asked.append(pair) or pair)
  c.stretch(1, "none")
  # Exchange-bound (0.5 s against 0.1 s a micro-batch) with B_simple far above any batch: r = S,
  # so the largest K makes the most progress a second.
  assert train(c, clock, 12) == (10, (8, "none"))
  assert asked == [(8, "none")]  # one broadcast, at update 10


@pytest.mark.parametrize("b_simple, truth, want", [
    # Perfect scaling, the exchange dominates: the largest batch at the first decision; with K 1 and
    # 8 timed, the micro-batch time is fitted and no try follows.
    (1e6, line(0.5), [(10, 8, "none", "")]),
    # B_simple far below the batch: the model says stay; with no fit on two K's yet it tries K=2
    # once, whose times send it back.
    (5.0, line(0.5), [(10, 2, "none", "try"), (20, 1, "none", "return")]),
    # Little to amortise (one host, 0.02 s fixed): K=2 is 2.9% better at B_simple 1,000, under the
    # 5% of a choice; the try times it faster, and the faster of the two pairs stays.
    (1000.0, line(0.02), [(10, 2, "none", "try")]),
])
def test_it_grows_the_batch_only_where_the_noise_scale_and_the_exchange_pay_for_it(b_simple, truth, want):
  c, clock = controller(b_simple=b_simple)
  c.stretch(1, "none")
  assert train_all(c, clock, 60, truth=truth) == want


def test_issue_38s_fake_clock_grows_k_with_b_simple_and_never_shrinks_it():
  # The issue's case: true t(K) = 0.5 + 0.1 K, the exchange timed alone 0.1 s, decisions every 50
  # updates, B_simple rising from 40 to 3,040 over 3,000 updates. The old controller went K 1 -> 2
  # -> 4 -> 2 -> 6 -> 3 -> 8 -> 3 -> 8 -> 4 -> 8, each shrink a predicted +10-12% whose truth was
  # 0.77-0.83: with one K fresh it modelled the fixed cost as the exchange timed alone.
  lines = []
  c, clock = controller(b_simple=40.0, every=50, lines=lines, prior=Prior(micro=0.1, exchange={"none": 0.1}))
  c.stretch(*c.start(1, 0, "none"))
  changes = train_all(c, clock, 3000, truth=line(0.5, 0.1), b_simple=lambda step: 40.0 + step)
  assert changes == [(50, 3, "none", ""), (300, 5, "none", ""), (850, 8, "none", "")]  # up, never back down
  assert c.k == best_k(line(0.5, 0.1), 3040.0) == 8
  for change in c.changes:  # each gain logged is the true one (the issue's said +10-12% for 0.77-0.83)
    def true(k):
      return adascale.gain(change.b_simple, 32, k * 64) / line(0.5, 0.1)(k, "none")
    assert change.gain == pytest.approx(true(change.k_to) / true(change.k_from))
  # Settled for 2,150 updates: the model is still the truth, its micro-batch time the last fit's,
  # kept with its age, not the exchange timed alone.
  model = c.model()
  assert model.fixed["none"] == pytest.approx(0.5) and model.micro == pytest.approx(0.1)
  assert c.fit.ks == (5, 8) and 3000 - c.fit.at > batch_control.STALE * 50
  assert "update time model 0.500 + 0.100 K s (micro-batch time fit on K 3, 5, 550 updates ago)" in lines[-1]


def test_a_try_fits_the_micro_batch_time_the_prior_timed_too_high():
  # The compute timed alone at 0.45 s a micro-batch, 0.1 s in the step: the model under-rates every
  # larger batch and says stay; the one try of a second K fits the truth, and it moves to its best.
  c, clock = controller(b_simple=200.0, prior=Prior(micro=0.45, exchange={"none": 0.05}))
  c.stretch(1, "none")
  assert train_all(c, clock, 60) == [(10, 2, "none", "try"), (20, 4, "none", "")]
  assert best_k(line(), 200.0) == 4
  assert c.model().fixed["none"] == pytest.approx(0.5) and c.model().micro == pytest.approx(0.1)


def test_a_try_whose_times_fit_no_slope_is_not_made_again_and_again():
  # Update times that do not grow with K (compute under the timing's noise): the try's two K's fit
  # no micro-batch time, so no fit exists after it. A try whatever it predicts is made once a world;
  # later ones only when predicted within the threshold (K=2 here: -13.5%), so none.
  c, clock = controller(b_simple=5.0)
  c.stretch(1, "none")
  assert train_all(c, clock, 300, truth=line(0.5, 0.0)) == [(10, 2, "none", "try"), (20, 1, "none", "return")]
  assert c.fit is None
  # A fit kept from update 0 is refreshed once it is older than REFIT decisions, by a try predicted
  # within the threshold (K=2 at B_simple 32: +0.0%); its times fit nothing, the fit stays as old,
  # and the next try waits REFIT decisions again (without that wait: a try every other decision).
  c, clock = controller(b_simple=32.0)
  c.fit = batch_control.Fit(0.1, (1, 2), 0, 1)
  c.stretch(1, "none")
  assert train_all(c, clock, 300, truth=line(0.5, 0.0)) == [
      (90, 2, "none", "try"), (100, 1, "none", "return"), (180, 2, "none", "try"), (190, 1, "none", "return"),
      (270, 2, "none", "try"), (280, 1, "none", "return")]


SLOW_LINK = line(0.8, 0.05)  # 20 Mbit/s: the exchange 0.8 s an update, a micro-batch 0.05 s


def test_a_first_world_prices_compute_from_its_start():
  # Issue 38: over a 20 Mbit/s link the first world's model was 0.806 + 0.000 K s and jumped K 1 ->
  # 8; the cap is 7.9% slower than the best here. The prior's micro-batch time prices compute.
  cap = adascale.gain(60.0, 32, 8 * 64) / SLOW_LINK(8, "none")
  best = adascale.gain(60.0, 32, best_k(SLOW_LINK, 60.0) * 64) / SLOW_LINK(best_k(SLOW_LINK, 60.0), "none")
  assert best_k(SLOW_LINK, 60.0) == 4 and cap < best / 1.05
  # No estimate at the start (a fresh run): K stays; the first decision's model, the prior's micro
  # and the fixed part K = 1's times leave, is the truth: its best.
  c, clock = controller(b_simple=None, prior=Prior(micro=0.05, exchange={"none": 0.806}))
  assert c.start(1, 0, "none") == (1, "none")
  c.stretch(1, "none")
  assert train(c, clock, 12, truth=SLOW_LINK, b_simple=lambda step: 60.0) == (10, (4, "none"))
  # With an estimate at the start (a resumed run), from the prior alone (two thirds of the
  # exchange exposed, 0.54 + 0.05 K): within the threshold of the best, not the cap.
  c, clock = controller(b_simple=60.0, prior=Prior(micro=0.05, exchange={"none": 0.806}))
  k, _ = c.start(1, 0, "none")
  assert adascale.gain(60.0, 32, k * 64) / SLOW_LINK(k, "none") > best / 1.05 and k < 8


def test_a_gain_within_the_estimates_spread_does_not_move_it():
  # B_simple 60 at a global batch of 64: K=2 gains about 13% at 60, but the spread reaches 6, where
  # it would lose: under the 5% that moves it at the estimate's worst (both K's timed: no try).
  c, clock = controller(b_simple=60.0)
  c.noise.spread = 0.9
  c.times, c._timed_at = {(1, "none"): [0.6] * 5, (2, "none"): [0.7] * 5}, {(1, "none"): 0, (2, "none"): 0}
  c.stretch(1, "none")
  assert train_all(c, clock, 30) == []


def test_rank_0s_choice_is_every_ranks_and_each_change_is_one_line_and_a_summary_row():
  lines = []
  c, clock = controller(decide=lambda pair: (4, "none"), lines=lines)  # rank 0 chose 4
  c.stretch(1, "none")
  assert train(c, clock, 12) == (10, (4, "none"))
  assert len(lines) == 1 and lines[0].startswith("batch: K 1 -> 4 (global batch 64 -> 256) at update 10: ")
  assert "update time model 0.500 + 0.100 K s (micro-batch time the one timed alone at the world's start)" in lines[0]
  c.stretch(4, "none")
  summary = c.summary()
  assert (summary["k_final"], summary["c_final"], summary["k_range"], summary["compressions"]) == (4, "none", [1, 8],
                                                                                                  ["none"])
  # its own time, on this process's clock (not the fake one): the hooks and the decisions ran
  assert 0 < summary["own_seconds"] < 5 and summary["change_seconds"] == 0.0
  assert summary["changes"] == [{"step": 10, "k_from": 1, "k_to": 4, "c_from": "none", "c_to": "none",
                                 "global_from": 64, "global_to": 256, "gain": pytest.approx(summary["changes"][0]["gain"]),
                                 "b_simple": 1e6, "probe": False, "ends_try": False}]
  assert summary["changes"][0]["gain"] > 1.05


def test_after_two_ks_the_model_is_fitted_to_both():
  c, clock = controller(prior=Prior(micro=0.3, exchange={"none": 0.0}))  # the prior: no exchange, slow compute
  c.stretch(1, "none")
  train(c, clock, 8, truth=line(0.3))
  c.stretch(2, "none")
  train(c, clock, 8, first=9, truth=line(0.3))
  model = c.model()
  assert model.fixed["none"] == pytest.approx(0.3) and model.micro == pytest.approx(0.1) and c.fit.ks == (1, 2)


def test_a_new_world_keeps_the_fit_and_starts_near_the_last_global_batch():
  lines = []
  c, clock = controller(lines=lines)
  c.stretch(1, "none")
  train(c, clock, 8)
  c.stretch(2, "none")
  train(c, clock, 8, first=9)
  # One rank now, its compute timed alone at 0.3 s: the fit of the last world (0.1) is the one used.
  c.new_world(1, (2, 16), Prior(micro=0.3, exchange={"none": 0.0}))
  assert c.model().micro == pytest.approx(0.1) and c.times == {}
  assert c.start_k(k_flag=1, global_batch=64) == 2  # the global batch 64 of 2 x 32 is kept by K = 2
  assert c.start_k(k_flag=1, global_batch=0) == 2   # the flag's, within the range
  assert c.start_k(k_flag=1, global_batch=32 * 40) == 16
  # No exchange on one rank: the first pair stays at 2, with one line (the flag said 1).
  assert c.start(k_flag=1, global_batch=64, c_flag="none", step=16) == (2, "none")
  assert lines[-1] == ("batch: this world starts at K 2, compression none (global batch 64): the nearest K to the "
                       "global batch trained last (64) within K 2..16")
  c.new_world(2, (1, 8), Prior(micro=0.3, exchange={"none": 3.0}))  # a slow link now: the first pair grows at once
  assert c.start(k_flag=1, global_batch=64, c_flag="none", step=16) == (8, "none")
  assert "fit on K 1, 2 in an earlier world" in lines[-1] and c.changes[-1].step == 16


def test_the_controllers_rule_is_goodputs():
  # What it chooses is goodput.choose on its model: one rule for the planner and the run.
  c, clock = controller(b_simple=300.0)
  c.stretch(1, "none")
  got = train(c, clock, 20, truth=line(0.2))
  want = goodput.choose((1, "none"), goodput.Model(0.1, {"none": 0.2}, {"none": "timed"}), (1, 8), 300.0,
                        (270.0, 330.0), 32, 32, 2)
  assert got == (10, (want.k, want.c)) and want.changes


def test_every_rank_makes_the_decisions_collective_at_the_same_updates():
  # A decision is a broadcast: a rank that skipped one would hang the others (found in the elastic
  # launch: a joining rank, with no last world's time, skipped the world's first choice; and a
  # survivor that counted its last world's updates decided at the new world's first due update, alone:
  # make faults' elastic-adaptive-powersgd row stalled 310 s at update 50 until the watchdog ended it).
  calls = {"survivor": [], "joiner": []}
  rank0 = {"pair": (1, "none")}  # what rank 0 chose: the survivor is rank 0
  survivor, clock = controller(decide=lambda pair: calls["survivor"].append(pair) or rank0.update(pair=pair) or pair)
  survivor.stretch(1, "none")
  train(survivor, clock, 8)
  survivor.stretch(2, "none")
  train(survivor, clock, 8, first=9)
  survivor.new_world(2, (1, 8), PRIOR)
  joiner, joiner_clock = controller(decide=lambda pair: calls["joiner"].append(pair) or rank0["pair"])
  for c in (survivor, joiner):  # as training/shape.Run.begin: start, no stretch (the survivor's count was 14)
    c.start(1, 128, "none", step=16)
  assert len(calls["survivor"]) == len(calls["joiner"]) == 1
  assert joiner.fit is None and survivor.fit is not None
  assert joiner.k == survivor.k == 8  # the joiner takes rank 0's
  # Then each asks after the same updates, however long its own took (rank 0's pair stays here).
  survivor.decide = lambda pair: calls["survivor"].append(pair) or (8, "none")
  for c, clk, slow in ((survivor, clock, 0.0), (joiner, joiner_clock, 5.0)):
    assert train(c, clk, 30, first=17, truth=line(0.5 + slow)) is None
  # The first pair, then updates 30 and 40 (at 20 the stretch has had 4 updates, 2 of them untimed).
  assert len(calls["survivor"]) == len(calls["joiner"]) == 3


def test_times_of_a_k_left_long_ago_are_not_fitted_with_todays():
  # K=2 was timed at updates 13-20 on a host running slower then (1.2 s: 0.6 + 0.3 K); K=1 now takes
  # 0.6 s. Fitted together, the two read as compute of 0.6 s a micro-batch and no fixed cost: K=1
  # stays. Once K=2's times are STALE decisions old the model leaves them out, takes the prior's
  # micro-batch time, and grows to the true best.
  def slowed(first):
    c, clock = controller(b_simple=200.0)
    c.times, c._timed_at, c._now = {(2, "none"): [1.2] * 8}, {(2, "none"): 20}, 20
    c.stretch(1, "none")
    return train(c, clock, 40, first=first)
  assert slowed(first=21) is None  # fresh: the drift misread
  assert slowed(first=21 + batch_control.STALE * 10) == (70, (best_k(line(), 200.0), "none"))


BOTH = ("none", "powersgd")
M, U = 0.05, 0.1  # a micro-batch, and the update's other fixed cost (not in the prior)


@pytest.mark.parametrize("e_none, e_psgd, overlap, right, c_flag, tries", [
    # A fast link: PowerSGD's encode costs more than the plain exchange. Started at powersgd, the
    # prior moves it at the start (none wins for any overlap in 0-50%), and nothing is tried.
    (0.05, 0.15, 1 / 3, "none", "none", 0),
    (0.05, 0.15, 1 / 3, "none", "powersgd", 0),
    # Overlap hides half the plain exchange (0.15 s exposed against 0.2): the prior's third calls
    # it a tie, so the other c is tried once; from none the try comes back, from powersgd it stays.
    (0.3, 0.2, 0.5, "none", "none", 1),
    (0.3, 0.2, 0.5, "none", "powersgd", 1),
    # A slow link: PowerSGD wins for any overlap: taken at the start, nothing tried.
    (1.0, 0.2, 1 / 3, "powersgd", "none", 0),
    (1.0, 0.2, 1 / 3, "powersgd", "powersgd", 0),
    # Nothing hidden (the adaptive step's exchange waits for its accumulation loop): 0.3 s against
    # 0.25, where the prior's third says none; tried once, either way.
    (0.3, 0.25, 0.0, "powersgd", "none", 1),
    (0.3, 0.25, 0.0, "powersgd", "powersgd", 1),
])
def test_it_ends_on_the_right_compression_changing_it_at_most_once(e_none, e_psgd, overlap, right, c_flag, tries):
  def truth(k, c):
    return k * M + U + ((1 - overlap) * e_none if c == "none" else e_psgd)
  assert (min(truth(k, "none") for k in range(1, 9)) < min(truth(k, "powersgd") for k in range(1, 9))) == (right == "none")
  c, clock = controller(b_simple=200.0, compressions=BOTH, prior=Prior(micro=M, exchange={"none": e_none,
                                                                                         "powersgd": e_psgd}))
  c.stretch(*c.start(1, 0, c_flag))
  changes = train_all(c, clock, 200, truth=truth)
  assert c.c == right, (c.changes, changes)
  moved = [ch for ch in c.changes if ch.c_from != ch.c_to]
  tried = [ch for ch in moved if ch.probe]
  assert len(tried) == tries  # at most once a world, and only where the prior's overlap decides it
  assert len(moved) - 2 * sum(ch.ends_try for ch in moved) <= 1  # a try and its way back are no change


def test_the_first_pair_is_one_line_and_a_run_without_a_choice_of_compression_keeps_its_own():
  lines = []
  c, clock = controller(b_simple=None, lines=lines, compressions=("powersgd",),
                        prior=Prior(micro=0.1, exchange={"powersgd": 0.2}))
  assert c.start(1, 0, "none") == (1, "powersgd")  # --compression=powersgd: no other c to choose
  assert lines == ["batch: this world starts at K 1, compression powersgd (global batch 64): none is not among this "
                   "run's compressions ('powersgd',)"]
  with pytest.raises(ValueError, match="no exchange time for \\['powersgd'\\]"):
    c.new_world(2, (1, 8), Prior(micro=0.1, exchange={"none": 0.2}))
  with pytest.raises(ValueError, match="compressions"):
    Controller(32, 32, 10, Noise(None), lambda pair: pair, print, compressions=("fp16",))


def test_a_world_that_comes_back_starts_from_the_compression_it_had():
  both = Prior(micro=M, exchange={"none": 0.3, "powersgd": 0.2})  # tied for some overlaps: start() keeps c_flag
  c, clock = controller(b_simple=200.0, compressions=BOTH, prior=both)
  assert c.compression_in(2, "none") == "none"  # no world of 2 yet: the flags' (or the run's first)
  c.stretch(*c.start(1, 0, "none"))
  c.stretch(2, "powersgd")  # the controller moved to PowerSGD in this world
  c.new_world(1, (2, 16), Prior(micro=M, exchange={"none": 0.0, "powersgd": 0.05}))
  c.stretch(*c.start(1, 64, c.compression_in(1, "none")))
  assert c.c == "none" and c.compression_in(2, "none") == "powersgd"  # one rank: nothing to compress
  c.new_world(2, (1, 8), both)  # the host is back: the world of 2 starts where it was
  assert c.start(1, 64, c.compression_in(2, "none"))[1] == "powersgd"  # from "none" it would stay "none" here
