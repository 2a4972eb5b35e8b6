"""bench/overhead's figures and verdicts from time blocks (training/ledger.block's shape), and its report."""
import pytest

from bench.overhead import ledgers, report


def summary(wall, groups, epochs=4.0):
  return {"epochs": epochs, "time": {"wall_seconds": wall, "groups": groups}}


def test_figures_read_the_shares_off_the_groups():
  f = ledgers.figures(summary(100.0, {"startup": 20.0, "steps": 72.0, "epoch_input": 1.0, "evaluation": 4.0,
                                      "statistics": 0.5, "checkpoint": 1.5, "export": 1.0}))
  assert f["productive_share"] == pytest.approx(0.72)
  assert f["productive_share_after_startup"] == pytest.approx(0.9)     # 72 of the 80 s after start-up
  assert f["epoch_end_share_of_steps"] == pytest.approx(7.0 / 72.0)    # export is not an epoch end's
  assert f["wall_over_steps"] == pytest.approx(100.0 / 72.0)


@pytest.mark.parametrize("name, groups, want", [
    ("train", {"steps": 40.0}, {"wall <= 2x step time": False}),           # 100 s wall, 40 s of steps
    ("train", {"steps": 60.0}, {"wall <= 2x step time": True}),
    ("fashion", {"startup": 10.0, "steps": 85.0, "evaluation": 4.0},
     {"productive share after start-up >= 0.9": True, "epoch ends <= 5% of step time": True}),
    ("fashion", {"startup": 10.0, "steps": 80.0, "evaluation": 10.0},
     {"productive share after start-up >= 0.9": False, "epoch ends <= 5% of step time": False}),
    ("resnet50", {"steps": 10.0}, {}),
])
def test_each_configuration_is_held_to_its_targets(name, groups, want):
  medians = ledgers.median_of([ledgers.figures(summary(100.0, groups))])
  assert {k: met for k, (met, _) in ledgers.verdicts(name, medians).items()} == want


def test_the_median_and_range_of_three_launches():
  launches = [ledgers.figures(summary(w, {"steps": 50.0})) for w in (100.0, 80.0, 120.0)]
  assert ledgers.median_of(launches)["wall_seconds"] == [100.0, 80.0, 120.0]


def test_the_report_names_the_commit_every_configuration_and_what_is_not_in_it():
  launches = [ledgers.figures(summary(100.0, {"startup": 20.0, "steps": 60.0, "evaluation": 20.0}))]
  medians = ledgers.median_of(launches)
  record = {"setup": {"commit": "abc1234", "date": "2026-12-07", "cores": 2, "cpu": "EPYC", "launches": 1,
                      "quick": False},
            "configs": {"train": {"what": "make train", "launches": launches, "median": medians,
                                  "verdicts": {k: list(v) for k, v in ledgers.verdicts("train", medians).items()}}}}
  text = report.markdown(record)
  assert "Commit abc1234" in text and "| train: make train | 100.0 | 60.0 | 20.0 | 0.60 | 0.75 | 33.3% |" in text
  assert "train: wall <= 2x step time: met (1.67)" in text and "emulated hosts" in text
