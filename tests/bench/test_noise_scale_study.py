"""bench/noise_scale (make noise-scale): the study's LR policy and search, and its report, on literal runs."""
import math

import pytest

from bench.noise_scale import __main__ as main_module, cost, report, study
from training.adaptive import noise_scale


@pytest.mark.parametrize("batch, want", [
    (64, 0.05),                  # the anchor: make time-to-accuracy's batch-64 LR
    (128, 0.0943),               # nearly linear below B_GUESS ...
    (1024, 0.4206),
    (4096, 0.6683),              # ... saturating above it (the linear rule would say 3.2)
])
def test_start_lr_follows_the_optimal_lr_curve(batch, want):
  assert study.start_lr(batch) == pytest.approx(want, abs=5e-4)


def test_start_lr_carries_the_previous_batchs_best_along_the_curve():
  # The search found 0.2 best at 64 (4x the anchor): 128 starts at 4x the curve's 0.0943.
  assert study.start_lr(128, (64, 0.2)) == pytest.approx(4 * study.start_lr(128))
  assert study.start_lr(512, (256, 0.68)) == pytest.approx(0.68 * (1 + 1000 / 256) / (1 + 1000 / 512))


@pytest.mark.parametrize("batch, warmup, every", [(64, 0.25, 117), (512, 0.25, 15), (4096, 1.3653, 2)])
def test_warmup_and_evaluation_spacing(batch, warmup, every):
  assert study.warmup_epochs(batch) == pytest.approx(warmup, abs=1e-4)
  assert study.eval_every(batch) == every


def test_train_args_hold_the_batch_lr_and_cap():
  flags = study.train_args(4096, 0.6683, study.Budget(), "runs/x", max_steps=120)
  assert "--global_batch_size=4096" in flags and "--accumulation_steps=64" in flags
  assert "--base_lr=0.0417688" in flags  # per 256 images: 0.6683 x 256 / 4096
  assert "--lr_schedule=step" in flags and "--decay_epochs=1000" in flags  # constant after warmup
  assert flags[-1] == "--max_steps=120" and "--noise_scale=true" in flags


def fake(batch: int, steps_by_factor: dict):
  """attempt(lr, cap) answering from a table of LR / start_lr -> steps to the target (absent: not
  reached); a run past its cap has not reached it. Its calls, as (factor, cap)."""
  calls, lr0 = [], study.start_lr(batch)

  def attempt(lr, cap):
    factor = round(lr / lr0, 4)
    calls.append((factor, cap))
    steps = steps_by_factor.get(factor)
    reached = steps is not None and (cap is None or steps <= cap)
    return {"peak_lr": lr, "reached": reached, "target_step": steps if reached else None,
            "steps": steps if reached else cap or 999, "status": "reached" if reached else "finished"}
  return attempt, calls


def test_search_doubles_while_doubling_wins_and_caps_each_later_run():
  attempt, calls = fake(64, {1: 900, 2: 700, 4: 650, 8: 600})
  runs = study.search(64, attempt, study.start_lr(64))
  assert calls == [(1, None), (2, 900), (4, 700)]  # MAX_TRIES: no fourth
  assert study.best_of(runs)["peak_lr"] == pytest.approx(4 * study.start_lr(64))


def test_search_stops_when_doubling_does_not_win():
  attempt, calls = fake(1024, {1: 300, 2: 320, 0.5: 250})
  runs = study.search(1024, attempt, study.start_lr(1024))
  assert calls == [(1, None), (2, 300)]  # a start that reached: no halving
  assert study.best_of(runs)["target_step"] == 300


def test_search_halves_when_nothing_reaches_the_target():
  attempt, calls = fake(4096, {0.5: 90})
  runs = study.search(4096, attempt, study.start_lr(4096))
  assert calls == [(1, None), (2, None), (0.5, None)]
  assert study.best_of(runs)["target_step"] == 90


def run(batch, lr, steps, b_simple, reached=True):
  return {"batch": batch, "accumulation": batch // 64, "peak_lr": lr, "cap": None, "status": "reached",
          "reached": reached, "target_step": steps if reached else None, "steps": steps,
          "b_simple_at_target": b_simple, "images_per_sec": 400.0, "noise_curve": [], "command": "python train.py"}


def test_the_report_fits_b_crit_and_sets_it_beside_b_simple():
  # Steps from S = S_min + E_min / B with S_min 100 and E_min 100,000 (B_crit 1,000), exactly.
  s_min, e_min = 100.0, 100_000.0
  by_batch = {b: [run(b, 0.1, noise_scale.steps_at(b, s_min, e_min), 500.0)] for b in (64, 256, 1024, 4096)}
  by_batch[256].append(run(256, 0.2, 900, 400.0, reached=False))
  s = report.summarize(by_batch)
  assert s["fit"]["b_crit"] == pytest.approx(1000, rel=1e-4) and s["b_simple"]["median"] == 500
  assert s["ratio"] == pytest.approx(2.0, rel=1e-4)
  # B_simple's curve has the wrong bend (500 against 1,000), so it misses by a stated margin.
  assert 0.1 < s["prediction"]["rms_log"] < 0.5
  text = report.findings(s, study.Budget())
  assert "B_crit / B_simple = 2.00" in text and "fell 13.4x" in text
  assert "| 256 (4) | 0.1: 490.625, 0.2: not by 900 |" in report.table(s["rows"])


def test_b_simple_is_taken_from_runs_long_enough_for_its_average_to_settle():
  by_batch = {64: [run(64, 0.1, 900, 300.0)], 128: [run(128, 0.1, 500, 250.0)], 1024: [run(1024, 0.1, 150, 90.0)]}
  b = report.summarize(by_batch)["b_simple"]
  assert (b["median"], b["batches"], b["settled"]) == (275.0, [64, 128], True)
  assert "over batch 64, 128, the runs of 400+ steps" in report.findings(report.summarize(by_batch), study.Budget())
  short = report.summarize({1024: [run(1024, 0.1, 150, 90.0)], 2048: [run(2048, 0.1, 120, 70.0)]})["b_simple"]
  assert (short["median"], short["settled"]) == (80.0, False)


def test_simple_prediction_recovers_the_scale_of_an_exact_curve():
  points = [(b, 50 * (1 + 800 / b)) for b in (64, 512, 4096)]
  assert report.simple_prediction(points, 800) == pytest.approx(50)


def test_the_cost_paragraph_says_which_way_it_went():
  assert "+2.0%" in cost.text(64, 3, 102.0, 100.0) and "-7.3%" in cost.text(64, 3, 97.0, 104.6)
  assert math.isclose(1 + 0.02, 102.0 / 100.0)


def test_a_search_cut_by_the_budget_or_started_by_hand_is_stated():
  by_batch = {64: [run(64, 0.2, 800, 170.0)], 2048: [run(2048, 2.2, 200, 90.0)]}
  s = report.summarize(by_batch, tries={2048: 1}, starts={2048: 2.2})
  assert [r["best_at_edge"] for r in s["rows"]] == [False, True]
  text = report.findings(s, study.Budget())
  assert "cut to fit the time budget (--tries): 1 run at batch 2,048" in text
  assert "First LR set by hand (--lr) instead of carried along the curve: 2.2 at batch 2,048" in text


def test_a_search_of_one_try_takes_one_run():
  attempt, calls = fake(2048, {1: 200, 2: 150})
  study.search(2048, attempt, study.start_lr(2048), tries=1)
  assert calls == [(1, None)]


@pytest.mark.parametrize("argv, message", [
    (["--tries=4096"], "--tries=4096: pass BATCH:VALUE pairs"),
    (["--lr=4096:-1"], "--lr=4096:-1: values must be positive"),
])
def test_bad_budget_flags_name_the_flag(argv, message, capsys):
  with pytest.raises(SystemExit):
    main_module.parse_args(argv)
  assert message in capsys.readouterr().err
