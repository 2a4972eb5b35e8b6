"""bench/time_to_accuracy/'s pure parts (no training): the settings' train.py flags, the curve from
TensorBoard points, the report; stats.py's aggregation over seeds, table and findings; and
bench/harness/train_runs.py's record of a finished run that --reuse reads back. The exchange at the
papers' scale (scale.py): tests/bench/test_time_to_accuracy_scale.py."""
import json

import pytest

from bench.harness import train_runs
from bench.time_to_accuracy import __main__ as cli, recipe as tta, report, runs, stats as ts

FULL = tta.Budget(target=0.88, max_epochs=6)
QUICK = tta.Budget(target=0.5, max_epochs=6, quick=True)


@pytest.mark.parametrize("key, budget, present, absent", [
    ("a", FULL, ["--global_batch_size=64", "--base_lr=0.2", "--warmup_epochs=0", "--optimizer=sgd",
                 "--eval_every=235", "--target_top1=0.88", "--epochs=6", "--dataset=fashion_mnist",
                 "--model=resnet8"],
     ["--warmup_start_lr", "--lars_eta", "--accumulation_steps", "--max_steps"]),
    ("b", FULL, ["--global_batch_size=1024", "--warmup_epochs=1", "--warmup_start_lr=0.05", "--eval_every=15",
                 "--lr_schedule=cosine"], ["--lars_eta", "--accumulation_steps"]),
    ("c", FULL, ["--optimizer=lars", "--base_lr=4", "--lars_eta=0.001", "--lr_schedule=poly", "--precision=fp32"],
     ["--accumulation_steps"]),
    ("d", FULL, ["--optimizer=lars", "--precision=bf16"], []),
    ("e", FULL, ["--global_batch_size=4096", "--accumulation_steps=8", "--base_lr=2", "--warmup_epochs=2",
                 "--eval_every=4"], ["--max_steps"]),
    ("a", QUICK, ["--max_steps=40", "--eval_every=20", "--target_top1=0.5"], []),
    ("e", QUICK, ["--max_steps=2", "--eval_every=1"], []),
])
def test_train_args(key, budget, present, absent):
  flags = tta.train_args(tta.SETTINGS[key], 1, budget, "runs/x")
  assert flags[0] == "--model_dir=runs/x" and "--seed=1" in flags and "--eval_batch_size=250" in flags
  assert set(present) <= set(flags)
  assert not [f for f in flags for a in absent if f.startswith(a)]


@pytest.mark.parametrize("key, per_rank, steps, every", [
    ("a", 32, 937, 235), ("b", 512, 58, 15), ("d", 512, 58, 15), ("e", 256, 14, 4)])
def test_batches_and_evaluation_spacing(key, per_rank, steps, every):
  s = tta.SETTINGS[key]
  assert (s.per_rank_batch, tta.steps_per_epoch(s), tta.eval_every(s, FULL)) == (per_rank, steps, every)
  assert s.per_rank_batch * s.ranks * s.accumulation_steps == s.global_batch


def test_eval_curve_takes_the_evaluations_in_step_order():
  points = [(105.0, 20, "eval/top1", 0.5), (105.0, 20, "eval/top5", 0.9), (101.0, 10, "train/loss", 2.0),
            (103.0, 10, "eval/top1", 0.3), (103.0, 10, "eval/top5", 0.7),
            (110.0, 20, "eval/top1", 0.6), (110.0, 20, "eval/top5", 0.95)]  # a later write of step 20 wins
  assert train_runs.eval_curve(points, 100.0, 40) == [
      {"seconds": 3.0, "step": 10, "epoch": 0.25, "top1": 0.3, "top5": 0.7},
      {"seconds": 10.0, "step": 20, "epoch": 0.5, "top1": 0.6, "top5": 0.95}]
  assert train_runs.eval_curve([(1.0, 5, "train/top1", 0.9)], 0.0, 10) == []


def summary(reached, seconds=None, epoch=None, ips=100.0, top1=0.9, status="reached"):
  return {"status": status, "target_reached": reached, "time_to_target_seconds": seconds, "target_epoch": epoch,
          "target_step": None, "images_per_sec": ips, "final_top1": top1, "final_top5": 0.99, "epochs": epoch or 6,
          "steps": 10}


def a_run(key, seed, s, curve=(), wall=60.0):
  return runs.run_record(key, seed, ["--seed=%d" % seed], s, [{"top1": t} for t in curve], wall)


RUNS = [a_run("a", 0, summary(True, 100.0, 1.0, ips=200.0)), a_run("a", 1, summary(True, 140.0, 1.4, ips=180.0)),
        a_run("c", 0, summary(True, 50.0, 2.0, ips=800.0)),
        a_run("c", 1, summary(False, ips=820.0, top1=0.8, status="finished"), curve=(0.7, 0.86, 0.8)),
        a_run("d", 0, summary(True, 60.0, 2.5, ips=400.0)),
        a_run("e", 0, summary(False, ips=1200.0, top1=0.84, status="finished"), curve=(0.85, 0.84)),
        a_run("e", 1, summary(False, ips=1000.0, top1=None, status="diverged"))]


def test_aggregate_over_seeds():
  stats = {s["config"]: s for s in ts.aggregate(RUNS)}
  assert list(stats) == ["a", "c", "d", "e"]
  a, c, e = stats["a"], stats["c"], stats["e"]
  assert (a["reached"], a["seeds"], a["time_to_target_seconds"], a["epochs_to_target"]) == (
      2, [0, 1], {"median": 120.0, "mean": 120.0}, {"median": 1.2, "mean": 1.2})
  assert a["images_per_sec"] == {"median": 190.0, "mean": 190.0}
  # to target: over the seeds that reached it; the rest over every seed
  assert (c["reached"], c["time_to_target_seconds"]["median"], c["images_per_sec"]["median"]) == (1, 50.0, 810.0)
  assert c["best_top1"] == 0.9 and c["final_top1"]["mean"] == pytest.approx(0.85)
  assert e["reached"] == 0 and e["time_to_target_seconds"] == {"median": None, "mean": None}
  assert e["best_top1"] == 0.85 and e["final_top1"]["mean"] == 0.84  # the diverged seed has none
  assert (e["global_batch"], e["per_rank_batch"], e["accumulation_steps"]) == (4096, 256, 8)


def test_table_rows():
  rows = ts.table(ts.aggregate(RUNS)).splitlines()
  assert len(rows) == 6 and all(r.count("|") == 13 for r in rows)
  assert "| 2 of 2 | 120 (120) | 1.20 (1.20) | 190 | 90.00 | 99.00 | 90.00 |" in rows[2]
  assert "| 4,096 (256 x 8) | lars, fp32 | 2 (32) | 2, poly | 0 of 2 | - | - | 1100 |" in rows[5]


def test_findings_compare_with_the_baseline():
  text = ts.findings(ts.aggregate(RUNS), FULL)
  assert "(a) batch 64, SGD reached 88% top-1 in a median 120 s, 1.20 epochs, at 190 images/s." in text
  assert ("(c) batch 1,024, LARS + warmup reached 88% top-1 in 1 of 2 seeds in a median 50 s, 2.00 epochs, at 810 "
          "images/s: 0.42x the baseline's time (faster), 1.67x its epochs at 4.26x its images/s.") in text
  assert "(d) batch 1,024, LARS + warmup, bf16 reached 88% top-1 in a median 60 s" in text
  assert "did not reach 88% top-1 in 6.00 epochs (best held-out top-1 85.00%; 1 of 2 seeds diverged)." in text
  assert "Fastest to the target: (c) batch 1,024, LARS + warmup." in text
  assert "bf16 ((d)) trained at 0.49x the images/s of fp32 ((c))." in text
  assert "one exchange per 4,096 images, against one per 1,024) trained at 1.36x (c)'s images/s." in text
  assert "None" not in text


def test_findings_without_a_baseline_state_times_only():
  text = ts.findings(ts.aggregate(RUNS[2:4]), FULL)
  assert "baseline" not in text and "reached 88% top-1 in 1 of 2 seeds in a median 50 s" in text
  assert "Fastest" not in text  # one configuration reached it: nothing to rank


def test_write_report(tmp_path):
  runs = [dict(r, curve=[{"seconds": 10.0, "step": 1, "epoch": 0.1, "top1": 0.7, "top5": 0.9}]) for r in RUNS]
  scale = {"params": {"ranks_per_node": 8}, "exchange": {256: 0.04, 2048: 0.06}}
  text = report.write(runs, QUICK, scale, str(tmp_path), fewer={"d": "no bf16 here", "a": "not fewer"})
  assert text.startswith("# Time to accuracy") and "A smoke run" in text and "None" not in text
  assert f"{tta.SETTINGS['d'].name} ran seed 0 only: no bf16 here." in text and "not fewer" not in text
  assert ts.table(ts.aggregate(runs)) in text and "## At the papers' scale" in text
  data = json.loads((tmp_path / "time_to_accuracy.json").read_text())
  assert [s["config"] for s in data["stats"]] == ["a", "c", "d", "e"] and len(data["runs"]) == 7
  assert (tmp_path / "time_to_accuracy.png").stat().st_size > 0


def test_configurations_in_a_precision_the_cpu_lacks_run_one_seed():
  assert cli.slow_precisions("abcde", frozenset({"avx2", "f16c"})).keys() == {"d"}  # (d): bf16
  assert cli.slow_precisions("abcde", frozenset({"avx2", "amx_bf16"})) == {}
  assert cli.slow_precisions("abce", frozenset({"avx2"})) == {}


@pytest.mark.parametrize("argv, message", [
    (["--only=a,z"], "--only=a,z"), (["--seeds=x"], "--seeds=x"), (["--target=1.5"], "--target=1.5"),
    (["--max_epochs=0"], "--max_epochs=0")])
def test_bad_arguments_name_the_flag(argv, message, capsys):
  with pytest.raises(SystemExit):
    cli.parse_args(argv)
  assert message in capsys.readouterr().err


def test_arguments():
  _, keys, seeds, budget = cli.parse_args(["--quick", "--only=a,e", "--seeds=3"])
  assert (keys, seeds, budget) == (["a", "e"], [3], tta.Budget(tta.QUICK_TARGET, tta.MAX_EPOCHS, True))
  assert cli.parse_args([])[3] == tta.Budget(tta.TARGET_TOP1, tta.MAX_EPOCHS)


def test_a_recorded_run_is_reused_only_when_it_matches_and_finished(tmp_path):
  run = {"flags": ["--seed=0"], "final_top1": 0.9}
  train_runs.record(str(tmp_path), run)
  assert train_runs.reused(str(tmp_path), {"flags": ["--seed=0"]}) is None  # no summary.json: not finished
  (tmp_path / "summary.json").write_text("{}")
  assert train_runs.reused(str(tmp_path), {"flags": ["--seed=0"]}) == run
  assert train_runs.reused(str(tmp_path), {"flags": ["--seed=1"]}) is None
  assert train_runs.reused(str(tmp_path / "none"), {}) is None


def test_read_events_of_a_real_writer(tmp_path):
  import tensorflow as tf
  writer = tf.summary.create_file_writer(str(tmp_path / "tb"))  # as progress.Progress writes them
  with writer.as_default():
    tf.summary.scalar("train/loss", 2.0, step=10)
    tf.summary.scalar("eval/top1", 0.25, step=10)
    tf.summary.scalar("eval/top5", 0.75, step=10)
  writer.flush()
  points = train_runs.read_events(str(tmp_path))
  assert [(step, tag, value) for _, step, tag, value in points] == [
      (10, "train/loss", 2.0), (10, "eval/top1", 0.25), (10, "eval/top5", 0.75)]
  curve = train_runs.eval_curve(points, points[0][0] - 1.0, 40)
  assert [(p["step"], p["epoch"], p["top1"], p["top5"]) for p in curve] == [(10, 0.25, 0.25, 0.75)]
  assert 1.0 <= curve[0]["seconds"] < 60
