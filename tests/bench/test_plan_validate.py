"""bench/plan/validate.py: each measured batch against the fit of the others, and B_crit's spread."""
import pytest

from bench.plan import validate
from training.adaptive import noise_scale

# make noise-scale's seven batches (results/noise_scale.md): global batch, steps to 0.85.
STUDY = [(64, 819), (128, 584), (256, 263), (512, 162), (1024, 144), (2048, 202), (4096, 110)]


def on_the_curve(batches, s_min=100.0, e_min=40_000.0):
  return [(b, noise_scale.steps_at(b, s_min, e_min)) for b in batches]


def test_points_on_one_curve_are_predicted_exactly():
  held = validate.leave_one_out(on_the_curve([64, 256, 1024, 4096]))
  assert [h.ratio for h in held] == [pytest.approx(1.0, rel=1e-5)] * 4
  assert [h.b_crit for h in held] == [pytest.approx(400.0, rel=1e-5)] * 4 and all(h.within for h in held)


def test_a_batch_is_predicted_without_itself():
  # The fit of all seven passes near 2,048 (its residual is shared); without it, 2,048 is missed.
  held = {h.batch: h for h in validate.leave_one_out(STUDY)}
  rest = noise_scale.fit_tradeoff([(s, s * b) for b, s in STUDY if b != 2048])
  assert held[2048].predicted == pytest.approx(noise_scale.steps_at(2048, rest.s_min, rest.e_min))
  assert held[2048].b_crit == pytest.approx(rest.b_crit) and held[2048].ratio == pytest.approx(0.58, abs=0.01)
  assert [b for b, h in held.items() if not h.within] == [2048]


@pytest.mark.parametrize("ratio, within", [(1.5, True), (0.67, True), (1.51, False), (0.66, False)])
def test_within_one_and_a_half(ratio, within):
  assert validate.Held(64, 100.0, 100.0 * ratio, 400.0).within == within


def test_bootstrap_holds_the_fit_and_is_repeatable():
  low, high, made = validate.bootstrap(STUDY, draws=200, seed=1)
  assert low < validate.fit(STUDY).b_crit < high and 190 <= made <= 200
  assert validate.bootstrap(STUDY, draws=200, seed=1) == (low, high, made)
  exact = validate.bootstrap(on_the_curve([64, 256, 1024]), draws=50)
  assert exact[:2] == (pytest.approx(400.0, rel=1e-4), pytest.approx(400.0, rel=1e-4))


def test_validate_needs_three_batches():
  assert validate.validate(on_the_curve([64, 256]) * 2) is None
  check = validate.validate(STUDY, draws=100)
  assert check.b_crit == pytest.approx(457, abs=1) and len(check.held) == 7 and check.draws <= 100
  assert check.loo_range == (min(h.b_crit for h in check.held), max(h.b_crit for h in check.held))
