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


@pytest.mark.parametrize("walls, want", [
    ([], (None, None)),
    ([10.0, 20.0], (None, None)),                 # one gap: nothing to compare it with
    ([100.0, 130.0, 160.0, 190.0], (30.0, 1.0)),  # steady epochs
    ([160.0, 100.0, 130.0, 220.0], (60.0, 2.0)),  # an epoch end stalled 30 s (order of the events does not matter)
    ([0.0, 10.0, 20.0, 33.0, 43.0], (13.0, 1.3)),
])
def test_the_largest_gap_between_evaluations_against_the_median_gap(walls, want):
  gap, ratio = ledgers.eval_gaps(walls)
  assert (gap, ratio) == (want[0], pytest.approx(want[1]) if want[1] else None)


def test_on_emulated_hosts_the_worst_launchs_gap_is_held_to_1_3x():
  steady, stalled = [0.0, 10.0, 20.0, 30.0], [0.0, 10.0, 20.0, 34.0]
  groups = {"startup": 10.0, "steps": 85.0, "evaluation": 4.0}
  launches = [ledgers.figures(summary(100.0, groups), walls) for walls in (steady, steady, stalled)]
  medians = ledgers.median_of(launches)
  assert medians["eval_gap_ratio"] == [pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.4)]
  held = ledgers.verdicts("fashion-2hosts", medians, on_hosts=True)
  assert held["no gap between evaluations over 1.3x the run's median"] == (False, pytest.approx(1.4))
  assert held["productive share after start-up >= 0.9"][0] and held["epoch ends <= 5% of step time"][0]
  assert "no gap between evaluations over 1.3x the run's median" not in ledgers.verdicts("fashion", medians)


def test_the_median_and_range_of_three_launches():
  launches = [ledgers.figures(summary(w, {"steps": 50.0})) for w in (100.0, 80.0, 120.0)]
  assert ledgers.median_of(launches)["wall_seconds"] == [100.0, 80.0, 120.0]


def test_the_report_names_the_commit_every_configuration_and_those_not_run():
  launches = [ledgers.figures(summary(100.0, {"startup": 20.0, "steps": 60.0, "evaluation": 20.0}))]
  medians = ledgers.median_of(launches)
  record = {"setup": {"commit": "abc1234", "date": "2026-12-07", "cores": 2, "cpu": "EPYC", "launches": 1,
                      "quick": False},
            "configs": {"train": {"what": "make train", "launches": launches, "median": medians,
                                  "verdicts": {k: list(v) for k, v in ledgers.verdicts("train", medians).items()}}}}
  text = report.markdown(record, ("train", "fashion-2hosts"))
  assert "Commit abc1234" in text and "| train: make train | 100.0 | 60.0 | 20.0 | 0.60 | 0.75 | 33.3% | - |" in text
  assert "train: wall <= 2x step time: met (1.67)" in text
  assert "Not in it: fashion-2hosts (not run at this commit)." in text
