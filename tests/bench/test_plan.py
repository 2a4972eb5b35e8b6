"""The planner (bench/plan/): a summary.json read into a workload, the time to the target at each
(ranks, batch), the answers, the tables and files, and the command line."""
import dataclasses
import json

import pytest

from bench.plan import __main__ as cli
from bench.plan import exchange, predict, report, workload as workloads
from bench.plan.predict import Point
from training.adaptive import goodput

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
                           epochs=1.5, batch=64, per_rank_batch=32, images_per_sec=200.0, b_simple=896.0, ranks=2)
CONSTANT = predict.Compute(overhead=0.0, per_image=1 / 200.0)


def model(ratio=1.0, compute=CONSTANT):
  return predict.Model(predict.from_ratio(STUDY, ratio), compute, STUDY.train_images)


@pytest.mark.parametrize("ratio, s_min, e_min", [(1.0, 93.75, 84_000.0), (2.0, 48.49138, 86_896.55)])
def test_steps_through_the_run(ratio, s_min, e_min):
  # E_min = 1.5 x 60,000 / (1 + 64 / B_crit), S_min = E_min / B_crit
  s = predict.from_ratio(STUDY, ratio)
  assert (s.s_min, s.e_min) == (pytest.approx(s_min), pytest.approx(e_min)) and s.b_noise == pytest.approx(896 * ratio)
  assert s.at(64) == pytest.approx(1.5 * 60_000 / 64) and s.source.startswith(f"B_crit = {ratio:g} x B_simple 896")


@pytest.mark.parametrize("batch, epochs", [(64, 1.5), (1024, 3.0), (4096, 7.8), (1, 1.4 * (1 + 1 / 896))])
def test_epochs(batch, epochs):
  assert model().epochs(batch) == pytest.approx(epochs)


@pytest.mark.parametrize("epochs, batch", [(4.0, 1664.0), (1.5, 64.0), (1.0, 0.0)])
def test_largest_batch_within(epochs, batch):
  assert predict.from_ratio(STUDY, 1.0).largest_within(epochs * 60_000) == pytest.approx(batch)


# make noise-scale's seven batches (results/noise_scale.md): steps to 0.85 and global images/s.
STUDY_STEPS = [(64, 819), (128, 584), (256, 263), (512, 162), (1024, 144), (2048, 202), (4096, 110)]
STUDY_RATES = [(128, 321.4), (256, 345.5), (512, 380.2), (1024, 733.5), (2048, 755.2), (4096, 654.4)]
NOISE_RUN = dataclasses.replace(STUDY, epochs=819 * 64 / 60_000, images_per_sec=352.5 / 2, b_simple=167.0)


def test_the_fit_uses_every_batch_that_reached_the_target():
  measured = [(b, s * b / 60_000, True) for b, s in STUDY_STEPS[1:]] + [(8192, 12.0, False)]
  points = predict.measured_points(NOISE_RUN, measured)
  assert [b for b, _ in points] == [b for b, _ in STUDY_STEPS] and points[0][1] == pytest.approx(819)
  steps = predict.fitted(NOISE_RUN, points)
  assert steps.b_noise == pytest.approx(457, abs=1) and steps.base_batch == 64  # results/noise_scale.md's fit
  assert "457 images = 2.74 x the run's B_simple 167" in steps.source
  missed = dataclasses.replace(NOISE_RUN, reached=False)
  assert [b for b, _ in predict.measured_points(missed, measured)] == [b for b, _ in STUDY_STEPS[1:]]


def test_compute_fitted_to_the_measured_rates():
  one = predict.fit_compute(STUDY)
  assert (one.overhead, one.per_image) == (0.0, pytest.approx(1 / 200))  # one rate: a speed whatever the batch
  assert predict.update_times(NOISE_RUN, STUDY_RATES)[16] == [pytest.approx(1024 / 733.5)]
  many = predict.fit_compute(NOISE_RUN, STUDY_RATES)
  # 352 images/s at K = 1 and 734 at 16 (2 ranks x 32): a fixed part an update, amortised by K.
  assert many.overhead == pytest.approx(0.1215, abs=1e-4) and many.per_image == pytest.approx(0.0949 / 32, rel=1e-3)
  t = many.step_time(32, 0.01)
  assert (t.exchange, t.micro) == (pytest.approx(many.overhead + 0.01), pytest.approx(32 * many.per_image))


@pytest.mark.parametrize("ranks, per_rank, k, ratio, compute", [
    (4, 32, 2, 1.0, CONSTANT),
    (64, 32, 1, 2.4, predict.Compute(0.12, 0.003)),
    (1, 128, 4, 0.5, predict.Compute(0.05, 0.002)),
])
def test_the_plan_predicts_what_goodput_computes(ranks, per_rank, k, ratio, compute):
  # One model, two users: the planner's time is the base-batch steps over training/goodput's goodput.
  m = model(ratio, compute)
  sizes, seconds = [100, 100], [0.01, 0.02]
  q = predict.point(m, ranks, per_rank, k, sizes, seconds)
  exposed = exchange.exposed(sizes, seconds, exchange.BACKWARD_SHARE * per_rank * compute.per_image)
  step_time = goodput.StepTime(compute.overhead + exposed, per_rank * compute.per_image)
  rate = goodput.goodput(k, step_time, 896.0 * ratio, 64, per_rank, ranks)
  assert q.seconds == pytest.approx(1.5 * 60_000 / 64 / rate)
  assert q.steps == pytest.approx(goodput.updates_to(1.5 * 60_000 / 64, 896.0 * ratio, 64, ranks * per_rank * k))
  assert q.step == pytest.approx(step_time(k)) and q.seconds == pytest.approx(q.steps * q.step)


@pytest.mark.parametrize("overlap, exposed", [(True, 0.02), (False, 0.03)])
def test_point(overlap, exposed):
  # 4 ranks x 32 x 2: 64 images a rank at 200/s = 0.32 s; backward 2/3 of 32/200 s; the second
  # bucket is ready at the end of backprop, so its 0.02 s is exposed.
  q = predict.point(model(), 4, 32, 2, [100, 100], [0.01, 0.02], overlap=overlap)
  assert (q.global_batch, q.epochs, q.steps) == (256, pytest.approx(1.8), pytest.approx(421.875))
  assert (q.compute, q.exchange, q.exposed) == (pytest.approx(0.32), pytest.approx(0.03), pytest.approx(exposed))
  assert q.seconds == pytest.approx(421.875 * (0.32 + exposed)) and q.step == pytest.approx(0.32 + exposed)
  assert q.gpu_hours == pytest.approx(4 * q.seconds / 3600) and q.policy == "32 per rank x 2 accumulated"


def test_an_overhead_favours_more_images_an_update():
  # 0.1 s an update whatever its images: 4 accumulated micro-batches pay it once for 4x the images.
  m = model(compute=predict.Compute(0.1, 1 / 200.0))
  one, four = (predict.point(m, 1, 32, k, [100], [0.0]) for k in (1, 4))
  assert one.step == pytest.approx(0.26) and four.step == pytest.approx(0.74)
  assert 4 * 32 / four.step > 32 / one.step


def test_grid_leaves_out_batches_over_an_epoch():
  cluster = exchange.cost_model_cluster("100,10,1000,1", 2)
  points = predict.grid(model(), cluster, [1 << 20], [1, 2, 4, 1024, 2048], [32, 64], [1, 4])
  assert {(q.ranks, q.per_rank_batch, q.accumulation) for q in points if q.ranks >= 1024} == {(1024, 32, 1)}
  assert len(points) == 13 and all(q.global_batch <= 60_000 for q in points)
  assert [q.exchange for q in points if q.ranks == 1] == [0.0] * 4


def at(ranks, seconds, batch=32, epochs=1.0):
  return Point(ranks=ranks, per_rank_batch=batch, accumulation=1, global_batch=ranks * batch, epochs=epochs,
               steps=100.0, overhead=0.0, compute=0.1, exchange=0.02, exposed=0.01, seconds=seconds)


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
  lines = report.findings(STUDY, model(), TIMES, max_epochs=4.0)
  assert lines[0].startswith("Within 4 epochs the model reaches the target at global batches up to 1,664")
  assert lines[1].startswith("Least time to the target at a measured batch or below (up to 64): 2 ranks, "
                             "global batch 64 (32 per rank): 50 s")
  assert lines[2].startswith("Least time past it, where the model is extrapolated: 16 ranks, global batch 512")
  assert lines[2].endswith("[extrapolated: 8x the largest measured batch, 64].")
  assert lines[3].startswith("Least GPU-hours: 1 rank, global batch 64 (64 per rank): 90 s")
  assert lines[4].startswith("Least GPU-hours within twice the least time: 2 ranks")
  assert lines[5] == ("Doubling the ranks buys less than 10% from 4 ranks on: 30 s at 4, 28 s at 8 "
                      "(each at its best batch) [extrapolated: 4x the largest measured batch, 64].")
  assert "still cuts" in report.findings(STUDY, model(), TIMES[:4])[4]


def test_the_answers_keep_to_the_epoch_limit():
  # The fastest point needs 9 epochs: over a limit of 4 it is no answer (results/plan_noise_scale.md
  # had recommended 62 epochs beside a 12-epoch limit).
  times = TIMES[:-1] + [at(16, 27.0, epochs=9.0)]
  lines = report.findings(STUDY, model(), times, max_epochs=4.0)
  assert "16 ranks" not in " ".join(lines) and "8 ranks, global batch 256 (32 per rank): 28 s" in lines[2]
  assert report.within(times, 4.0) == times[:-1] and report.within(times, None) == times
  none = report.findings(STUDY, model(), [at(1, 9.0, epochs=9.0)], max_epochs=4.0)
  assert none[1].startswith("No planned configuration reaches the target within the epoch limit")


def test_findings_hold_the_plan_against_a_reference_run():
  reference = dataclasses.replace(STUDY, reference=(8, 32, 1, 14.0, "a run's"))
  assert report.findings(reference, model(), TIMES)[-1] == (
      "At 8 ranks x 32 x 1 the plan predicts 28 s against a run's 14 s (2.00x).")
  elsewhere = dataclasses.replace(STUDY, reference=(64, 32, 1, 14.0, "a run's"))
  assert len(report.findings(elsewhere, model(), TIMES)) == 5  # not among the points: nothing to hold it against


def test_a_measured_batch_extends_what_is_supported():
  measured = [(256, 1.0, True), (4096, 4.0, False)]
  assert report.support(STUDY, measured) == 256 and report.support(STUDY, ()) == 64
  lines = report.findings(STUDY, model(), TIMES, measured=measured)
  assert lines[0].startswith("Least time to the target at a measured batch or below (up to 256): 8 ranks")


def test_a_run_that_did_not_reach_is_a_bound():
  lines = report.bounds(model(), [(1024, 3.9, True), (4096, 4.0, False), (4096, 9.0, False)])
  assert lines == ["At global batch 4,096 the model predicts 7.80 epochs; measured not reached within 4 (consistent).",
                   "At global batch 4,096 the model predicts 7.80 epochs; measured not reached within 9 "
                   "(the model expected it to)."]


def test_tables():
  rows = report.best_table(TIMES, 64).splitlines()
  assert len(rows) == 7 and rows[2].startswith("| 1 | 64 (64) |")
  assert rows[3] == "| 2 | 64 (32) | 1.00 | 100 | 0.0 + 100.0 | 20.0 (10.0) | 50 s | 0.03 | 1.80x | - |"
  assert rows[-1].endswith("| 8x |")
  epochs = report.epochs_table(STUDY, model(), [at(1, 1.0, 16), at(1, 1.0, 5000)], 64).splitlines()
  assert [r.split(" |")[0] for r in epochs[2:]] == ["| 16", "| 64 (the run)", "| 256 (extrapolated)",
                                                    "| 1,024 (extrapolated)", "| 4,096 (extrapolated)"]
  assert epochs[-1] == "| 4,096 (extrapolated) | 7.80 | 114 |"


def test_write(tmp_path):
  cluster = exchange.cost_model_cluster("100,10,1000,1", 2)
  settings = {"name": "t", "command": "python -m bench.plan --x", "ratio": 1.0, "images_per_sec": None, "speeds": [],
              "overlap": True, "max_epochs": 4.0}
  times = TIMES + [at(32, 26.0, epochs=5.0)]
  text = report.write(STUDY, cluster, model(), times, settings, str(tmp_path))
  assert text.startswith("# Plan: study on cost-model 100,10,1000,1") and report.best_table(TIMES, 64) in text
  assert "B_crit = 1 x B_simple 896 = 896 images, through the run's point; E_min = 1.40 epochs, S_min = 94" in text
  assert "one rank's compute at 200.0 images/s whatever its batch (the run, one rate measured)" in text
  data = json.loads((tmp_path / "plan_t.json").read_text())
  assert len(data["points"]) == 7 and data["b_crit"] == 896.0 and data["findings"][0] in text
  assert [q["within_epochs"] for q in data["points"]] == [True] * 6 + [False]
  assert data["points"][0]["gpu_hours"] == pytest.approx(100 / 3600) and data["points"][-2]["extrapolated"]
  assert (tmp_path / "plan_t.png").stat().st_size > 0 and (tmp_path / "plan_t.md").read_text() == text


@pytest.mark.parametrize("argv, message", [
    ([], "one of the arguments --summary --workload is required"),
    (["--workload=resnet50-imagenet", "--per_rank_batches=a"], "--per_rank_batches=a"),
    (["--workload=resnet50-imagenet", "--b_simple=-1"], "--b_simple=-1.0 must be positive"),
    (["--workload=resnet50-imagenet", "--cost_model=1,2"], "--cost_model=1,2"),
    (["--summary=/nonexistent/summary.json"], "--summary=/nonexistent/summary.json"),
    (["--workload=resnet50-imagenet", "--measured=4096"], "--measured=4096: pass BATCH:EPOCHS pairs"),
    (["--workload=resnet50-imagenet", "--measured=0:1"], "must be positive"),
    (["--workload=resnet50-imagenet", "--ratio=2", "--measured=8192:3"], "drop --ratio"),
    (["--workload=resnet50-imagenet", "--speeds=8192"], "--speeds=8192: pass BATCH:IMAGES_PER_SEC pairs"),
    (["--workload=resnet50-imagenet", "--speeds=8192:10", "--images_per_sec=9"], "not both"),
    (["--workload=resnet50-imagenet", "--speeds=1000:10"], "global batch 1,000 is not 2048 ranks x 32"),
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


def test_plan_fitted_to_measured_batches(tmp_path, capsys):
  # The study's run at 64 with the other six batches' epochs and rates: B_crit and the compute fitted.
  path = tmp_path / "summary.json"
  path.write_text(json.dumps(dict(SUMMARY, noise_scale=NOISE, target_epoch=0.874, images_per_sec=352.5)))
  measured = ",".join(f"{b}:{s * b / 60_000:.4f}" for b, s in STUDY_STEPS[1:])
  rates = ",".join(f"{b}:{r}" for b, r in STUDY_RATES)
  cli.main([f"--summary={path}", "--cost_model=2645,0.707,3741,0.0696", "--ranks_per_node=2", "--max_ranks=256",
            "--max_epochs=12", f"--measured={measured},8192:>12", f"--speeds={rates}", f"--out_dir={tmp_path}",
            "--name=t"])
  data = json.loads((tmp_path / "plan_t.json").read_text())
  assert data["b_crit"] == pytest.approx(457, abs=1) and data["settings"]["fitted"]
  assert data["settings"]["ratio"] is None
  assert data["compute"]["overhead"] == pytest.approx(0.1215, abs=1e-4) and len(data["validation"]["held"]) == 7
  assert not any(q["within_epochs"] for q in data["points"] if q["global_batch"] == 8192)
  assert "missed at 2,048" in capsys.readouterr().out
