"""make slow-links (bench/slow_links/): the arms' flags, the summary's ratio, stock's best batch, the
targets' verdicts and the report, from a small fixture of run records (no launch)."""
import json
import math

import pytest

from bench.slow_links import arms, limits, report, summary

COMMAND = "horovodrun --gloo -np 2 python train.py"


def run(arm, rate, hosts, seed, t, top1=0.851, per_rank=None, **more):
  """A run record as bench/slow_links/launch.py keeps it (t None: not reached)."""
  return {"name": arms.name(arm, rate, hosts, seed, per_rank), "part": "target", "arm": arm, "rate": rate,
          "link_mbit": arms.link_mbit(rate), "hosts": hosts, "seed": seed, "per_rank": per_rank,
          "reached": t is not None, "time_to_target_seconds": t, "target_step": 300 if t else None,
          "final_top1": top1, "images_trained": 40_000, "steps": 600, "link_mb_per_host": 120.0,
          "changes": [], "compression_chose": None, "status": "target_reached" if t else "finished",
          "wall_seconds": t or 900.0, "command": COMMAND, **more}


CHANGE = {"step": 50, "k_from": 1, "k_to": 2, "c_from": "powersgd", "c_to": "powersgd", "global_from": 64,
          "global_to": 128, "gain": 1.2, "b_simple": 150.0, "probe": True, "ends_try": False}
# 20 Mbit/s, 2 hosts: stock at 128 a rank is best (median 200 s); 32 a rank is faster in seed 0 but
# missed the target in seed 1, so its median is infinite. The joint arm takes 80 and 120 s.
FIXTURE = json.dumps({
    "setup": {"model": "resnet8", "micro_batch": 32, "base_lr_per_256": 0.8, "warmup_epochs": 0.25, "target": 0.85,
              "max_epochs": 4.0, "eval_images": 7500, "stock_per_rank": [32, 128, 512], "ours": "flat",
              "compression_start": 0, "budget_epochs": 2.0, "rates": ["20mbit", "none"], "hosts": [2], "seeds": [0, 1],
              "quick": False, "cores": 2, "cpu": "test CPU", "transport": "gloo", "date": "2026-12-10 00:00 UTC"},
    "runs": [run("stock", "20mbit", 2, 0, 150.0, per_rank=32), run("stock", "20mbit", 2, 1, None, 0.84, per_rank=32),
             run("stock", "20mbit", 2, 0, 190.0, 0.852, per_rank=128),
             run("stock", "20mbit", 2, 1, 210.0, 0.856, per_rank=128),
             run("stock", "20mbit", 2, 0, 400.0, per_rank=512), run("stock", "20mbit", 2, 1, 420.0, per_rank=512),
             run("auto", "20mbit", 2, 0, 150.0, per_rank=128, compression_chose="powersgd"),
             run("joint", "20mbit", 2, 0, 80.0, 0.850, compression_chose="powersgd", changes=[CHANGE]),
             run("joint", "20mbit", 2, 1, 120.0, 0.851),
             run("lost", "20mbit", 2, 0, 100.0, loss={"lost_at_s": 27.0, "lose_planned_s": 26.7, "back_at_s": 55.0,
                                                      "back_planned_s": 53.3}, elastic={"worlds": [2, 1, 2]}),
             run("stock", "none", 2, 0, 100.0, per_rank=32), run("stock", "none", 2, 1, 110.0, per_rank=32),
             run("joint", "none", 2, 0, 120.0, 0.84), run("joint", "none", 2, 1, 130.0, 0.842),
             dict(run("stock", "20mbit", 2, 0, None, 0.88, per_rank=128), part="budget",
                  name="budget-20mbit-h2-stock-b128-s0")],
})


@pytest.fixture
def result():
  r = json.loads(FIXTURE)
  r["summary"], r["verdicts"] = summary.of_runs(r["runs"])
  return r


def entry(result, rate):
  return next(e for e in result["summary"] if e["rate"] == rate)


def test_stock_best_is_the_lowest_median_and_a_missed_seed_rules_a_batch_out(result):
  assert summary.best_stock(result["runs"], "20mbit", 2) == 128  # 32's seed 1 missed: its median is infinite
  assert summary.best_stock(result["runs"], "none", 2) == 32
  assert summary.best_stock(result["runs"], "20mbit", 4) is None


def test_every_batch_missing_goes_to_the_best_top1():
  runs = [run("stock", "20mbit", 2, 0, None, 0.80, per_rank=32), run("stock", "20mbit", 2, 0, None, 0.83, per_rank=128)]
  assert summary.best_stock(runs, "20mbit", 2) == 128


def test_ratio_to_stock_is_the_joint_median_over_the_best_batch_median_with_the_seeds_spread(result):
  slow, fast = entry(result, "20mbit"), entry(result, "none")
  assert slow["link_mbit"] == 20.0 and fast["link_mbit"] is None and slow["hosts"] == 2
  assert slow["stock_best"]["median_s"] == 200.0 and slow["joint"]["median_s"] == 100.0
  assert slow["ratio_to_stock"] == pytest.approx(0.5)
  assert slow["ratio_range"] == pytest.approx((80 / 190, 120 / 210))  # seed by seed
  assert fast["ratio_to_stock"] == pytest.approx(125 / 105)
  assert slow["lost"]["ratio_to_joint"] == pytest.approx(1.0)  # 100 s against the joint median 100 s
  assert slow["auto"]["ratio_to_stock"] == pytest.approx(0.75) and slow["auto"]["per_rank"] == [128]
  assert slow["top1_points"] == pytest.approx(100 * (0.8505 - 0.854))
  assert [e["rate"] for e in result["summary"]] == ["20mbit", "none"]  # slowest first; the budget run is apart


def test_a_run_that_missed_is_infinitely_slow_and_the_ratio_says_so():
  runs = [run("stock", "20mbit", 2, 0, 100.0, per_rank=32), run("joint", "20mbit", 2, 0, None)]
  e = summary.configuration(runs, "20mbit", 2)
  assert math.isinf(e["ratio_to_stock"])
  v = [x for x in summary.verdicts([e]) if x["target"] == "time, slow link (floor)"]
  assert v[0]["met"] is False


def verdict(result, target, rate):
  return next(v for v in result["verdicts"] if v["target"] == target and v["rate"] == rate)


def test_the_verdicts_name_each_target_met_or_not(result):
  assert verdict(result, "time, slow link", "20mbit")["met"] is True  # 0.50 <= 0.5
  assert verdict(result, "time, slow link (floor)", "20mbit")["met"] is True
  assert verdict(result, "time, fast link", "none")["met"] is False  # 1.19x: slower than stock
  assert verdict(result, "final top-1", "20mbit")["met"] is True     # -0.35 points
  assert verdict(result, "final top-1", "none")["met"] is False      # -1.4 points
  assert verdict(result, "lost host", "20mbit")["met"] is True
  assert verdict(result, "lost host", "none")["met"] is None          # not run there
  assert "seeds 0.42-0.57" in verdict(result, "time, slow link", "20mbit")["why"]


@pytest.mark.parametrize("r, target, floor", [(0.45, True, True), (0.7, False, True), (0.9, False, False)])
def test_slow_link_target_and_floor(r, target, floor):
  e = {"rate": "20mbit", "link_mbit": 20.0, "hosts": 2, "ratio_to_stock": r, "ratio_range": None, "ratio_seeds": 0,
       "top1_points": 0.0, "lost": {"ratio_to_joint": None, "ratio_to_joint_range": None, "ratio_to_joint_seeds": 0}}
  got = {v["target"]: v["met"] for v in summary.verdicts([e])}
  assert got["time, slow link"] is target and got["time, slow link (floor)"] is floor


def test_the_report_renders_the_summary_the_verdicts_and_the_traces(result, tmp_path):
  text = report.write(result, str(tmp_path))
  assert "| 20 Mbit/s | 2 | 128 | 200 | 100 | **0.50 (0.42-0.57)** |" in text
  assert "| unshaped | 2 | 32 | 105 | 125 | **1.19 (1.18-1.20)** |" in text
  assert "time, fast link, unshaped, 2 hosts: **not met**" in text
  assert "lost host, unshaped, 2 hosts: not measured" in text
  assert "| stock Horovod | 32 | 1/2 | not reached (seeds: 150, not reached) |" in text
  assert "| stock Horovod (best) | 128 | 2/2 | 200 (190-210) |" in text
  assert "- joint seed 0: K1 powersgd; u50 K1->2 (try)" in text
  assert "host lost at 27 s (planned 26.7)" in text and "worlds [2, 1, 2]" in text
  assert "A lost host did not rejoin in 1 of 1 lost-host runs" in text  # listed again, no rejoined_at_s
  assert "| stock Horovod, linear rule | 20 Mbit/s | 2 | 128 | 0.8800 |" in text  # the budget part
  saved = json.loads((tmp_path / "slow_links.json").read_text())  # strict JSON: infinities as null
  assert saved["summary"][0]["ratio_to_stock"] == pytest.approx(0.5)
  assert (tmp_path / "slow_links.png").stat().st_size > 0


def test_the_report_is_rendered_again_from_its_json(result, tmp_path):
  first = report.write(result, str(tmp_path))
  report.main([f"--out_dir={tmp_path}"])
  assert (tmp_path / "slow_links.md").read_text() == first


def flag(flags, name):
  return [f.split("=", 1)[1] for f in flags if f.startswith(f"--{name}=")]


def test_every_arm_shares_the_recipe_and_evaluates_every_so_many_images():
  b = arms.Budget()
  runs = {arm: arms.flags(arm, 2, 1, b, cores=2, per_rank=128) for arm in arms.ARMS}
  for f in runs.values():
    assert flag(f, "base_lr") == ["0.8"] and flag(f, "warmup_epochs") == ["0.25"] and flag(f, "batch_size") == ["32"]
    assert flag(f, "target_top1") == ["0.85"] and flag(f, "seed") == ["1"] and flag(f, "threads") == ["1"]
  assert flag(runs["stock"], "accumulation_steps") == ["4"] and flag(runs["stock"], "allreduce") == ["horovod"]
  assert flag(runs["stock"], "compression") == ["none"] and not flag(runs["stock"], "lr_scaling")
  assert flag(runs["auto"], "compression") == ["auto"] and flag(runs["auto"], "allreduce") == ["flat"]
  assert flag(runs["stock"], "eval_every") == ["29"]  # 7,500 images at global batch 256
  assert flag(runs["joint"], "eval_every") == ["117"]  # at the start's 64
  for arm in ("adaptive", "joint", "lost"):
    assert flag(runs[arm], "base_batch") == ["64"] and flag(runs[arm], "max_global_batch") == ["1024"]
    assert flag(runs[arm], "batch_policy") == ["adaptive"] and flag(runs[arm], "lr_scaling") == ["adascale"]
  assert flag(runs["adaptive"], "compression") == ["none"]
  assert flag(runs["joint"], "compression_start") == ["0"]
  assert "--elastic" in runs["lost"] and "--elastic" not in runs["joint"]
  assert [f for f in runs["lost"] if "elastic" not in f] == runs["joint"]


def test_the_budget_part_drops_the_target_and_decays_to_zero():
  f = arms.budget_flags("joint", 2, 0, arms.Budget(), cores=2)
  assert not flag(f, "target_top1") and not flag(f, "eval_every")
  assert flag(f, "epochs") == ["2"] and flag(f, "lr_schedule") == ["cosine"]


def test_rates_and_the_lose_schedule():
  assert arms.link_mbit("20mbit") == 20.0 and arms.link_mbit("1gbit") == 1000.0 and arms.link_mbit("none") is None
  with pytest.raises(ValueError):
    arms.link_mbit("fast")
  assert arms.lose_schedule(90.0) == (30.0, 60.0)
  assert arms.eval_every(64, arms.Budget()) == 117 and arms.eval_every(2048, arms.Budget()) == 4


def test_a_second_seed_may_leave_out_a_stock_batch_but_not_invent_one(capsys):
  from bench.slow_links.__main__ import parse_args
  assert parse_args([]).stock == [32, 128, 512]
  assert parse_args(["--stock=32,128", "--seeds=1"]).stock == [32, 128]
  with pytest.raises(SystemExit):
    parse_args(["--stock=64"])
  assert "the stock batches are 32,128,512" in capsys.readouterr().err


def test_the_setup_names_every_configuration_the_record_holds_not_only_the_last_invocations(result, tmp_path,
                                                                                           monkeypatch):
  from bench.slow_links import __main__ as study_main
  from bench.slow_links.__main__ import Study, parse_args
  monkeypatch.setattr(study_main, "cpu_model", lambda: "test CPU")  # the machine's, not the test's to read
  with open(tmp_path / "slow_links.json", "w") as fh:
    json.dump(result, fh)
  study = Study(parse_args(["--rates=none", "--hosts=4", "--seeds=1", f"--out_dir={tmp_path}",
                            f"--runs_dir={tmp_path}"]))
  setup = study.result()["setup"]
  assert (setup["rates"], setup["hosts"], setup["seeds"]) == (["20mbit", "none"], [2], [0, 1])


def test_a_stall_is_a_gap_between_evaluations_well_over_the_runs_median_and_its_epoch_end_is_found():
  # stock at 512 a rank on 2 hosts: 58 updates an epoch; evaluations every 7 updates, 8 s apart,
  # but 30 s across the epoch's end at 58, and a shorter last gap (the target) that is no stall
  curve = [[8.0 * i, 7 * i, 0.5] for i in range(1, 9)] + [[94.0, 59, 0.6], [102.0, 66, 0.7], [105.0, 68, 0.86]]
  stalled = run("stock", "20mbit", 2, 0, 105.0, per_rank=512, curve=curve)
  steady = run("joint", "20mbit", 2, 0, 40.0, curve=[[10.0 * i, 50 * i, 0.5] for i in range(1, 5)])
  short = run("joint", "none", 2, 0, 20.0, curve=[[10.0, 50, 0.5], [20.0, 100, 0.86]])
  st = limits.stalls([stalled, steady, short])
  assert (st["runs"], st["counted"], st["fixed"], st["at_epoch_end"]) == (1, 2, 1, 1)
  assert st["longest"] == pytest.approx(30.0 - 8.0) and st["where"] == ["20mbit-h2-stock-b512-s0 updates 56-59"]


def test_the_arms_run_at_fewer_seeds_are_named(result):
  assert limits.coverage(result["runs"]) == (
      "- **Not every arm ran at every seed**: auto at seed 0; lost at seed 0 only (the rest at seeds 0, 1); "
      "an arm's median over one seed has no spread.")
  assert limits.coverage([r for r in result["runs"] if r["arm"] in ("joint", "stock")]) == ""
