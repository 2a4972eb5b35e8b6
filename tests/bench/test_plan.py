"""The planner (bench/plan/): a summary.json read into a workload, the time to the target at each
(ranks, batch), the answers, the tables and files, and the command line."""
import dataclasses
import json

import pytest

from bench.plan import __main__ as cli
from bench.plan import exchange, predict, report, workload as workloads
from bench.plan.predict import Point

# train.py's summary.json keys the planner reads, as results/time_to_accuracy.json's (a) seed 0 ran.
SUMMARY = {"status": "reached", "images_per_sec": 374.3, "ranks": 2, "global_batch": 64, "per_rank_batch": 32,
           "accumulation_steps": 1, "steps": 1172, "epochs": 1.251, "model": "resnet8", "dataset": "fashion_mnist",
           "target_top1": 0.85, "target_reached": True, "time_to_target_seconds": 273.1, "target_step": 1172,
           "target_epoch": 1.251}
NOISE = {"b_simple": 700.0, "grad_sq": 0.02, "trace_sigma": 14.0, "b_small": 32, "b_big": 64, "steps": 1172,
         "at_target": {"b_simple": 650.0, "grad_sq": 0.02, "trace_sigma": 13.0, "step": 1172}}


@pytest.mark.parametrize("noise, flag, b_simple, note", [
    (NOISE, None, 650.0, "B_simple 650 measured at the target (step 1172)"),
    (dict(NOISE, at_target=None), None, 700.0, "B_simple 700 measured over the run's end (1172 steps measured)"),
    (NOISE, 896.0, 896.0, "B_simple 896 from --b_simple (the summary's: 650)"),
    (None, 896.0, 896.0, "B_simple 896 from --b_simple"),
])
def test_noise_scale_from_the_summary_or_the_flag(noise, flag, b_simple, note):
  w = workloads.from_summary(dict(SUMMARY, noise_scale=noise), flag)
  assert w.b_simple == b_simple and w.notes[0] == note


def test_summary_read_into_a_workload():
  w = workloads.from_summary(SUMMARY, 896.0)
  assert (w.name, w.model, w.dataset, w.train_images, w.epochs, w.batch, w.per_rank_batch) == (
      "resnet8-fashion_mnist", "resnet8", "fashion_mnist", 60_000, 1.251, 64, 32)
  assert w.images_per_sec == pytest.approx(187.15) and w.target == "held-out top-1 0.85"
  assert w.reference == (2, 32, 1, pytest.approx(1.251 * 60_000 / 374.3), "the run's")
  assert workloads.from_summary(dict(SUMMARY, dataset="digits"), 10.0).train_images == 1497


def test_a_run_that_missed_its_target_gives_a_lower_bound():
  w = workloads.from_summary(dict(SUMMARY, target_reached=False, target_epoch=None, epochs=4.0), 896.0)
  assert w.epochs == 4.0 and any("lower bound" in n for n in w.notes)


def test_no_noise_scale_names_the_flag():
  with pytest.raises(ValueError, match="--b_simple"):
    workloads.from_summary(dict(SUMMARY, noise_scale={"b_simple": None, "at_target": None}))


def test_an_unknown_dataset_is_refused():
  with pytest.raises(ValueError, match="'my_images' is none of digits, fashion_mnist, imagenet, synthetic"):
    workloads.from_summary(dict(SUMMARY, dataset="my_images"), 100.0)


def test_stated_resnet50_workload():
  w = workloads.RESNET50_IMAGENET
  assert (w.train_images, w.epochs, w.batch, w.per_rank_batch, w.b_simple) == (1_281_167, 90, 65_536, 32, 32_768)
  assert w.images_per_sec == pytest.approx(90 * 1_281_167 / 396 / 2048)  # ~142 per P40
  replaced = workloads.with_b_simple(w, 10_000)
  assert replaced.b_simple == 10_000 and replaced.notes[0] == "B_simple 10,000 from --b_simple"
  assert not any(n.startswith("B_simple 32,768") for n in replaced.notes)
  assert workloads.with_b_simple(w, None) is w


# The study's baseline: batch 64 to the target in 1.5 epochs of 60,000; B_simple 896 (what (a) and
# (b) imply: tests/training/test_noise_scale.py), 200 images/s per rank.
STUDY = workloads.Workload(name="study", model="resnet8", dataset="fashion_mnist", target="0.85", train_images=60_000,
                           epochs=1.5, batch=64, per_rank_batch=32, images_per_sec=200.0, b_simple=896.0)


@pytest.mark.parametrize("ratio, s_min, e_min", [(1.0, 93.75, 84_000.0), (2.0, 48.49138, 86_896.55)])
def test_tradeoff_through_the_run(ratio, s_min, e_min):
  # E_min = 1.5 x 60,000 / (1 + 64 / B_crit), S_min = E_min / B_crit
  s, e = predict.tradeoff(STUDY, ratio)
  assert (s, e) == (pytest.approx(s_min), pytest.approx(e_min)) and e / s == pytest.approx(896 * ratio)


@pytest.mark.parametrize("batch, epochs", [(64, 1.5), (1024, 3.0), (4096, 7.8), (1, 1.4 * (1 + 1 / 896))])
def test_epochs_at(batch, epochs):
  assert predict.epochs_at(STUDY, batch) == pytest.approx(epochs)


@pytest.mark.parametrize("epochs, batch", [(4.0, 1664.0), (1.5, 64.0), (1.0, 0.0)])
def test_largest_batch_within(epochs, batch):
  assert predict.largest_batch_within(STUDY, epochs) == pytest.approx(batch)


@pytest.mark.parametrize("overlap, exposed", [(True, 0.02), (False, 0.03)])
def test_point(overlap, exposed):
  # 4 ranks x 32 x 2: 64 images a rank at 200/s = 0.32 s; backward 2/3 of 32/200 s; the second
  # bucket is ready at the end of backprop, so its 0.02 s is exposed.
  q = predict.point(STUDY, 4, 32, 2, [100, 100], [0.01, 0.02], 200.0, overlap=overlap)
  assert (q.global_batch, q.epochs, q.steps) == (256, pytest.approx(1.8), pytest.approx(421.875))
  assert (q.compute, q.exchange, q.exposed) == (pytest.approx(0.32), pytest.approx(0.03), pytest.approx(exposed))
  assert q.seconds == pytest.approx(421.875 * (0.32 + exposed)) and q.step == pytest.approx(0.32 + exposed)
  assert q.gpu_hours == pytest.approx(4 * q.seconds / 3600) and q.policy == "32 per rank x 2 accumulated"


def test_grid_leaves_out_batches_over_an_epoch():
  cluster = exchange.cost_model_cluster("100,10,1000,1", 2)
  points = predict.grid(STUDY, cluster, [1 << 20], [1, 2, 4, 1024, 2048], [32, 64], [1, 4], 200.0)
  assert {(q.ranks, q.per_rank_batch, q.accumulation) for q in points if q.ranks >= 1024} == {(1024, 32, 1)}
  assert len(points) == 13 and all(q.global_batch <= 60_000 for q in points)
  assert [q.exchange for q in points if q.ranks == 1] == [0.0] * 4


def at(ranks, seconds, batch=32):
  return Point(ranks=ranks, per_rank_batch=batch, accumulation=1, global_batch=ranks * batch, epochs=1.0,
               steps=100.0, compute=0.1, exchange=0.02, exposed=0.01, seconds=seconds)


TIMES = [at(1, 100.0), at(1, 90.0, 64), at(2, 50.0), at(4, 30.0), at(8, 28.0), at(16, 27.0)]


def test_best_by_ranks_and_knee():
  best = predict.best_by_ranks(TIMES)
  assert [(q.ranks, q.seconds) for q in best] == [(1, 90.0), (2, 50.0), (4, 30.0), (8, 28.0), (16, 27.0)]
  assert predict.knee(best).ranks == 4  # 30 -> 28 s: under 10%
  assert predict.knee(best[:3]) is None and predict.knee(best, gain=0.05).ranks == 8


@pytest.mark.parametrize("seconds, text", [(42, "42 s"), (119, "119 s"), (120, "2.0 min"), (7200, "2.0 h"),
                                           (3 * 86400, "3.0 d")])
def test_duration(seconds, text):
  assert report.duration(seconds) == text


def test_findings():
  lines = report.findings(STUDY, TIMES, 1.0, max_epochs=4.0)
  assert lines[0].startswith("Least time to the target: 16 ranks, global batch 512 (32 per rank): 27 s")
  assert lines[1].startswith("Least GPU-hours: 1 rank, global batch 64 (64 per rank): 90 s")
  assert lines[2].startswith("Least GPU-hours within twice the least time: 2 ranks")
  assert lines[3] == ("Doubling the ranks buys less than 10% from 4 ranks on: 30 s at 4, 28 s at 8 "
                      "(each at its best batch).")
  assert lines[4].startswith("Within 4 epochs the model reaches the target at global batches up to 1,664")
  assert "still cuts" in report.findings(STUDY, TIMES[:4], 1.0)[3]


def test_findings_hold_the_plan_against_a_reference_run():
  reference = dataclasses.replace(STUDY, reference=(8, 32, 1, 14.0, "a run's"))
  assert report.findings(reference, TIMES, 1.0)[-1] == (
      "At 8 ranks x 32 x 1 the plan predicts 28 s against a run's 14 s (2.00x).")
  elsewhere = dataclasses.replace(STUDY, reference=(64, 32, 1, 14.0, "a run's"))
  assert len(report.findings(elsewhere, TIMES, 1.0)) == 4  # not among the points: nothing to hold it against


def test_the_model_beside_measured_epochs():
  lines = report.against(STUDY, 1.0, [(1024, 3.9, True), (4096, 4.0, False), (4096, 9.0, False)])
  assert lines[0] == "At global batch 1,024 the model predicts 3.00 epochs (176 steps); measured 3.90 (0.77x)."
  assert lines[1].endswith("measured not reached within 4 (consistent).")
  assert lines[2].endswith("measured not reached within 9 (the model expected it to).")
  assert report.findings(STUDY, TIMES, 1.0, measured=[(1024, 3.9, True)])[-1] == lines[0]


def test_tables():
  rows = report.best_table(TIMES).splitlines()
  assert len(rows) == 7 and rows[2].startswith("| 1 | 64 (64) |")
  assert rows[3] == "| 2 | 64 (32) | 1.00 | 100 | 100.0 | 20.0 (10.0) | 50 s | 0.03 | 1.80x |"
  epochs = report.epochs_table(STUDY, [at(1, 1.0, 16), at(1, 1.0, 5000)], 1.0).splitlines()
  assert [r.split(" |")[0] for r in epochs[2:]] == ["| 16", "| 64 (the run)", "| 256", "| 1,024", "| 4,096"]
  assert epochs[-1] == "| 4,096 | 7.80 | 114 |"


def test_write(tmp_path):
  cluster = exchange.cost_model_cluster("100,10,1000,1", 2)
  settings = {"name": "t", "command": "python -m bench.plan --x", "ratio": 1.0, "images_per_sec": 200.0,
              "overlap": True, "max_epochs": 4.0}
  text = report.write(STUDY, cluster, TIMES, settings, str(tmp_path))
  assert text.startswith("# Plan: study on cost-model 100,10,1000,1") and report.best_table(TIMES) in text
  assert "B_crit = 1 x B_simple 896 = 896 images; through the run's point E_min = 1.40 epochs, S_min = 94" in text
  data = json.loads((tmp_path / "plan_t.json").read_text())
  assert len(data["points"]) == 6 and data["b_crit"] == 896.0 and data["findings"][0] in text
  assert data["points"][0]["gpu_hours"] == pytest.approx(100 / 3600)
  assert (tmp_path / "plan_t.png").stat().st_size > 0 and (tmp_path / "plan_t.md").read_text() == text


@pytest.mark.parametrize("argv, message", [
    ([], "one of the arguments --summary --workload is required"),
    (["--workload=resnet50-imagenet", "--per_rank_batches=a"], "--per_rank_batches=a"),
    (["--workload=resnet50-imagenet", "--b_simple=-1"], "--b_simple=-1.0 must be positive"),
    (["--workload=resnet50-imagenet", "--cost_model=1,2"], "--cost_model=1,2"),
    (["--summary=/nonexistent/summary.json"], "--summary=/nonexistent/summary.json"),
    (["--workload=resnet50-imagenet", "--measured=4096"], "--measured=4096: pass BATCH:EPOCHS pairs"),
    (["--workload=resnet50-imagenet", "--measured=0:1"], "must be positive"),
])
def test_bad_arguments_name_the_flag(argv, message, capsys):
  with pytest.raises(SystemExit):
    cli.main(argv)
  assert message in capsys.readouterr().err


def test_a_summary_without_noise_scale_asks_for_the_flag(tmp_path, capsys):
  path = tmp_path / "summary.json"
  path.write_text(json.dumps(SUMMARY))
  with pytest.raises(SystemExit):
    cli.main([f"--summary={path}"])
  assert "pass --b_simple=N" in capsys.readouterr().err


def test_a_model_train_py_does_not_build_is_refused(tmp_path, capsys):
  path = tmp_path / "summary.json"
  path.write_text(json.dumps(dict(SUMMARY, model="vgg16")))
  with pytest.raises(SystemExit):
    cli.main([f"--summary={path}", "--b_simple=100"])
  assert "model 'vgg16' is not one train.py builds" in capsys.readouterr().err


def test_plan_of_a_summary(tmp_path, capsys):
  path = tmp_path / "summary.json"
  path.write_text(json.dumps(dict(SUMMARY, noise_scale=NOISE)))
  cli.main([f"--summary={path}", "--cost_model=2645,0.707,3741,0.0696", "--ranks_per_node=2", "--max_ranks=64",
            "--accumulation=1", f"--out_dir={tmp_path}"])
  data = json.loads((tmp_path / "plan_resnet8-fashion_mnist_cost-model.json").read_text())
  assert data["settings"]["ranks"] == [1, 2, 4, 8, 16, 32, 64] and data["settings"]["per_rank_batches"] == [32, 64, 128]
  assert data["b_crit"] == 650.0 and len(data["points"]) == 21
  assert "# Plan: resnet8-fashion_mnist on cost-model" in capsys.readouterr().out
