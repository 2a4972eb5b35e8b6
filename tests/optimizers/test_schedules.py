"""LR schedules: tables of (step, expected LR)."""
import pytest

from optimizers import schedules


@pytest.mark.parametrize("base, batch, want", [
    (0.1, 256, 0.1), (0.1, 8192, 3.2),  # Goyal et al.: batch 8k -> LR 3.2
    (0.1, 32, 0.0125), (0.8, 64, 0.2),
])
def test_linear_scaling_rule(base, batch, want):
  assert schedules.scaled_lr(base, batch) == pytest.approx(want)


GOYAL = schedules.from_epochs(base_lr=0.1, global_batch=8192, steps_per_epoch=100, epochs=90,
                              warmup_epochs=5, warmup_start_lr=0.1, kind="step",
                              decay_epochs=(30, 60, 80))


@pytest.mark.parametrize("step, want", [
    (0, 0.1), (250, 0.1 + 3.1 * 0.5), (499, 0.1 + 3.1 * 499 / 500),  # warmup 0.1 -> 3.2
    (500, 3.2), (2999, 3.2), (3000, 0.32), (5999, 0.32), (6000, 0.032),
    (8000, 0.0032), (8999, 0.0032),
])
def test_goyal_warmup_then_step(step, want):
  assert GOYAL(step) == pytest.approx(want)


COSINE = schedules.from_epochs(base_lr=0.8, global_batch=64, steps_per_epoch=10, epochs=12,
                               warmup_epochs=2, warmup_start_lr=0.0, kind="cosine")


@pytest.mark.parametrize("step, want", [
    (0, 0.0), (10, 0.1), (20, 0.2), (70, 0.1), (120, 0.0), (200, 0.0),
])
def test_cosine_after_warmup(step, want):
  assert COSINE(step) == pytest.approx(want, abs=1e-12)


def test_durations_are_converted_once_to_steps():
  assert (GOYAL.total_steps, GOYAL.warmup_steps, GOYAL.decay_steps) == (9000, 500, (3000, 6000, 8000))


def test_no_warmup_starts_at_peak():
  s = schedules.Schedule(peak_lr=1.0, total_steps=10, kind="step")
  assert s(0) == 1.0


# MLPerf's LARS schedule: warmup, then (1 - progress)^2 from the peak to 0 at the end.
POLY = schedules.from_epochs(base_lr=10.0, global_batch=256, steps_per_epoch=10, epochs=15,
                             warmup_epochs=5, warmup_start_lr=0.0, kind="poly")


@pytest.mark.parametrize("step, want", [
    (0, 0.0), (25, 5.0), (50, 10.0), (75, 10.0 * 0.75 ** 2), (100, 10.0 * 0.5 ** 2),
    (149, 10.0 * (1 / 100) ** 2), (150, 0.0), (400, 0.0),
])
def test_poly_power_two_after_warmup(step, want):
  assert POLY(step) == pytest.approx(want, abs=1e-12)


def test_poly_power_is_a_parameter():
  s = schedules.Schedule(peak_lr=2.0, total_steps=4, kind="poly", power=1.0)
  assert [s(i) for i in range(5)] == pytest.approx([2.0, 1.5, 1.0, 0.5, 0.0])
