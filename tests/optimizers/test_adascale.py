"""optimizers/adascale.py: the gain against its definition in variances, its bounds, and the
schedule it implies (linear scaling is AdaScale with r = S)."""
import pytest

from optimizers import adascale, schedules


@pytest.mark.parametrize("trace_sigma, grad_sq, base, batch", [
    (50.0, 1.0, 32, 256),      # B_simple 50: between B0 and B
    (5000.0, 0.5, 32, 256),    # B_simple 10,000 >> B: nearly the whole S
    (1.0, 2.0, 32, 256),       # B_simple 0.5 << B0: nearly 1
    (300.0, 3.0, 64, 64),      # S = 1
    (64.0, 1.0, 128, 32),      # an elastic world below B0: S = 1/4
])
def test_the_gain_is_johnson_et_als_ratio_of_variances(trace_sigma, grad_sq, base, batch):
  # Johnson et al. eq. 3 with sigma^2 the variance of a base-batch gradient and mu^2 = |G|^2.
  sigma2, mu2, s = trace_sigma / base, grad_sq, batch / base
  want = (sigma2 + mu2) / (sigma2 / s + mu2)
  assert adascale.gain(trace_sigma / grad_sq, base, batch) == pytest.approx(want, rel=1e-12)
  assert min(1, s) - 1e-12 <= want <= max(1, s) + 1e-12


@pytest.mark.parametrize("b_simple, want", [(None, 1.0), (1e-9, 1.0), (1e12, 8.0)])
def test_the_gain_is_1_unmeasured_and_spans_1_to_s(b_simple, want):
  assert adascale.gain(b_simple, 32, 256) == pytest.approx(want, rel=1e-6)


def test_the_gain_refuses_sizes_and_scales_that_cannot_be():
  with pytest.raises(ValueError, match="positive"):
    adascale.gain(10.0, 0, 256)
  with pytest.raises(ValueError, match="b_simple=-1"):
    adascale.gain(-1.0, 32, 256)


def test_gain_reads_the_noise_scale_each_time():
  now = {"b": None}
  g = adascale.Gain(32, 256, lambda: now["b"])
  assert g.scale == 8 and g() == 1.0
  now["b"] = 224.0
  assert g() == pytest.approx((1 + 224 / 32) / (1 + 224 / 256))


def test_at_r_equal_s_the_base_schedule_read_on_tau_is_the_linear_rule():
  # r = S (pure noise): tau moves S base steps an update, and the paper's LR r x schedule_B0(tau)
  # is the linear rule's schedule for B at the same update, warmup and decay alike.
  spe_base, s = 64, 8
  kw = dict(base_lr=0.1, epochs=4, warmup_epochs=1, warmup_start_lr=0.0, kind="cosine")
  schedule_b = schedules.from_epochs(global_batch=32 * s, steps_per_epoch=spe_base // s, **kw)
  schedule_b0 = schedules.from_epochs(global_batch=32, steps_per_epoch=spe_base, **kw)
  for update in range(4 * spe_base // s):
    assert s * schedule_b0(update * s) == pytest.approx(schedule_b(update), rel=1e-9, abs=1e-12)
