"""training/ending/outcome.py: the run's verdict after a step, as a table."""
import pytest

from training.ending import outcome
from training.ending.outcome import DIVERGED, OK, STOPPED, TARGET_REACHED


@pytest.mark.parametrize("finite, stop, skipped, fp16, want", [
    (True, 0, 0, False, (OK, 0)),
    (True, 15, 0, False, (STOPPED, 0)),            # a stop after a good step: checkpoint and stop
    (False, 0, 0, False, (DIVERGED, 1)),           # fp32/bf16: one non-finite step is divergence
    (False, 15, 0, False, (DIVERGED, 1)),          # divergence wins over a stop request
    (False, 0, 0, True, (OK, 1)),                  # fp16: an overflow lowers the scale and goes on
    (False, 0, 8, True, (OK, 9)),
    (False, 0, 9, True, (DIVERGED, 10)),           # the 10th in a row: the scale cannot recover
    (True, 0, 9, True, (OK, 0)),                   # a finite step resets the count
    (False, 10, 3, True, (STOPPED, 4)),            # fp16 skip + stop: weights unchanged, so resumable
])
def test_after_step(finite, stop, skipped, fp16, want):
  verdict = outcome.after_step(finite, stop, skipped, fp16, max_skipped=10)
  assert (verdict.status, verdict.skipped) == want


@pytest.mark.parametrize("top1, top5, target_top1, target_top5, want", [
    (0.75, 0.92, 0.0, 0.0, OK),              # no target: evaluations never end the run
    (0.75, 0.92, 0.759, 0.0, OK),            # MLPerf ResNet-50's 75.9% not yet
    (0.759, 0.92, 0.759, 0.0, TARGET_REACHED),  # reached at equality
    (0.80, 0.92, 0.759, 0.0, TARGET_REACHED),
    (0.50, 0.92, 0.0, 0.90, TARGET_REACHED),  # top-5 alone
    (0.80, 0.89, 0.759, 0.90, OK),           # both given: both must be met
    (0.80, 0.90, 0.759, 0.90, TARGET_REACHED),
    (None, None, 0.5, 0.0, OK),              # no held-out split: never reached
])
def test_after_eval(top1, top5, target_top1, target_top5, want):
  verdict = outcome.after_eval(top1, top5, target_top1, target_top5, skipped=2)
  assert (verdict.status, verdict.skipped) == (want, 2)


@pytest.mark.parametrize("status, want", [(OK, 0), (TARGET_REACHED, 0), (DIVERGED, 3), (STOPPED, 75)])
def test_exit_status(status, want):
  assert outcome.exit_status(status) == want
