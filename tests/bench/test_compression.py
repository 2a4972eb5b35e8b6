"""The pure parts of bench/compression/: variants and flags, command lines, rows, targets and the
report from a small hand-made JSON."""
import json

import pytest

from bench.compression import accuracy, report, speed, tables, targets, variants as V
from bench.compression.__main__ import parse_args
from comm.cost_model import CostModel, Link
from comm.topology import World
from flags.config import ConfigError

MB = 1 << 20


@pytest.mark.parametrize("variant, compression, rank", [
    ("none", "none", 4), ("fp16", "fp16", 4), ("powersgd-r1", "powersgd", 1), ("powersgd-r2", "powersgd", 2),
    ("powersgd-r4", "powersgd", 4), ("auto", "auto", 4),
])
def test_comm_config_compresses_every_step(variant, compression, rank):
  c = V.comm_config(variant)
  assert (c.compression, c.powersgd_rank, c.compression_start, c.allreduce, c.fusion_threshold_mb) == \
      (compression, rank, 0, "flat", 32.0)


@pytest.mark.parametrize("rate, gbps", [("500mbit", 0.5), ("2gbit", 2.0), ("10gbit", 10.0), ("1.5gbit", 1.5)])
def test_rate_gbps(rate, gbps):
  assert V.rate_gbps(rate) == pytest.approx(gbps)


@pytest.mark.parametrize("rate", ["fast", "500", "2 gbit", "10gbps"])
def test_rate_gbps_refuses_what_tc_would_not_take(rate):
  with pytest.raises(ConfigError, match="--rates"):
    V.rate_gbps(rate)


@pytest.mark.parametrize("key, start, want", [
    ("none", 58, ["--compression=none"]),
    ("r2", 58, ["--compression=powersgd", "--powersgd_rank=2", "--compression_start=58"]),
    ("r4-noef", 7, ["--compression=powersgd", "--powersgd_rank=4", "--compression_start=7",
                    "--powersgd_error_feedback=false"]),
])
def test_accuracy_config_flags(key, start, want):
  assert V.ACCURACY_CONFIGS[key].flags(start) == want


@pytest.mark.parametrize("epochs, per_epoch, want", [
    (1.0, 58, 58), (0.5, 58, 29), (2.0, 14, 28), (0.1, 58, 6), (0, 58, 0),  # 5.8 warmup steps: 6
])
def test_warmup_steps(epochs, per_epoch, want):
  assert V.warmup_steps(epochs, per_epoch) == want


def test_parse_list_names_the_flag():
  assert V.parse_list("speed,accuracy", ("speed", "accuracy"), "only") == ["speed", "accuracy"]
  for text in ("", "sped", "speed,x"):
    with pytest.raises(ConfigError, match="--only="):
      V.parse_list(text, ("speed", "accuracy"), "only")


def test_accuracy_run_is_the_lars_recipe_at_full_length_with_powersgd_after_the_warmup():
  flags = accuracy.train_args("r4-noef", 1, "runs/x", quick=False)
  for f in ("--dataset=fashion_mnist", "--model=resnet8", "--global_batch_size=1024", "--optimizer=lars",
            "--lr_schedule=poly", "--epochs=4", "--seed=1", "--target_top1=0", "--compression=powersgd",
            "--powersgd_rank=4", "--compression_start=58", "--powersgd_error_feedback=false", "--model_dir=runs/x"):
    assert f in flags
  assert not any(f.startswith("--max_steps") for f in flags)
  assert accuracy.setup(False)["steps"] == 232  # 4 epochs of 58 steps: the same for every row


def test_accuracy_quick_compresses_within_its_steps():
  flags = accuracy.train_args("r2", 0, "runs/x", quick=True)
  assert f"--max_steps={accuracy.QUICK_STEPS}" in flags and f"--compression_start={accuracy.QUICK_START}" in flags
  assert accuracy.QUICK_START < accuracy.QUICK_STEPS
  assert "--compression=none" in accuracy.train_args("none", 0, "runs/x", quick=True)


CURVE = [{"seconds": 10.0, "step": 15, "epoch": 0.26, "top1": 0.70},
         {"seconds": 20.0, "step": 30, "epoch": 0.52, "top1": 0.851},
         {"seconds": 30.0, "step": 45, "epoch": 0.78, "top1": 0.84}]


@pytest.mark.parametrize("target, want", [
    (0.85, {"seconds": 20.0, "step": 30, "epoch": 0.52}),  # the first at or above, not the last
    (0.70, {"seconds": 10.0, "step": 15, "epoch": 0.26}),
    (0.90, None),
])
def test_time_to_target(target, want):
  assert accuracy.time_to_target(CURVE, target) == want


def test_launch_command_runs_the_worker_on_each_host():
  cmd = speed.launch_command("500mbit-2x1", 2, ["none", "powersgd-r4"], 5, "/tmp/o.json")
  assert cmd[0] == "run"
  i = cmd.index("mpirun")
  assert cmd[i + 1:i + 5] == ["-np", "2", "-H", "imcc-h1:1,imcc-h2:1"]
  for arg in ("--worker", "--launch=500mbit-2x1", "--out=/tmp/o.json", "--iface=imcc0",
              "--variants=none,powersgd-r4", "--steps=5"):
    assert arg in cmd
  assert "MALLOC_MMAP_MAX_=0" in cmd  # bench-scaling's warm-heap environment


@pytest.mark.parametrize("launch, variants, steps, want", [
    (None, ["none"], 5, False),
    ({"steps": 5, "rows": [{"variant": "none"}]}, ["none"], 5, True),
    ({"steps": 3, "rows": [{"variant": "none"}]}, ["none"], 5, False),
    ({"steps": 5, "rows": [{"variant": "none"}]}, ["none", "fp16"], 5, False),
    ({"steps": 5, "rows": []}, [], 5, True),  # the 1x1 launch
])
def test_reusable(launch, variants, steps, want):
  assert speed.reusable(launch, variants, steps) == want


def test_predicted_exchange_prices_every_bucket_of_the_plan():
  from bench.compression import worker
  model = CostModel(intra=Link(0.0, 0.0), inter=Link(0.0, 0.0), flat_call=Link(alpha=1e-3, beta=1e-8))
  plan = [{"algorithm": "flat", "bytes": 100_000_000, "tensors": 3},
          {"algorithm": "flat", "bytes": 1_000_000, "tensors": 1, "call": "powersgd_q"}]
  assert worker.predicted_exchange_s(plan, model, World(size=2, local_size=1, cross_size=2)) == \
      pytest.approx(2e-3 + 1.01)


def test_the_timed_encode_keeps_the_state_the_step_keeps():
  # Without the apply, tf.function prunes the new residuals and the timing leaves them out.
  import tensorflow as tf
  from bench.compression import worker
  from comm import powersgd
  compressor = powersgd.PowerSGD([(8, 6)], rank=2, min_ratio=1.0)
  encode = tf.function(lambda g: worker.applied(compressor, *compressor(g, worker.identity)))
  encode([tf.random.stateless_normal((8, 6), seed=(1, 2))]).numpy()
  assert float(tf.reduce_sum(tf.abs(compressor.residuals[0]))) > 0.0


def row(variant, link_mb, exchange_s, step_s, predicted_s, encode_s=None, chose=None, encode_share=0.0):
  """A row as worker.measure writes it: auto's `compression` is "auto" whatever it chose (its
  summary's `chose` says what); the prediction is encode_share encode, the rest the link's."""
  return {"variant": variant, "compression": variant.split("-")[0],
          "summary": {"kind": variant, **({"chose": chose} if chose else {})},
          "step_link_bytes": link_mb * MB, "exchange_link_bytes": link_mb * MB, "payload_bytes": link_mb * MB,
          "step_s": step_s, "exchange_s": exchange_s, "encode_s": encode_s, "predicted_exchange_s": predicted_s,
          "predicted_encode_s": predicted_s * encode_share, "predicted_collectives_s": predicted_s * (1 - encode_share)}


def result(auto_step=0.5, r4_ratio=1.0, auto_ratio=1.0):
  """Two rates on 2 hosts: at 500mbit PowerSGD rank 4 cuts 100 MB to 2 (50x), its exchange 2.0 s
  to 0.1 (20x), its step 2.5 s to 0.5 (e 0.12 -> 0.6 against S_1's 0.3 s); auto's step auto_step
  there, rank 4's exchange r4_ratio x its prediction, auto's auto_ratio x its; each compressed
  prediction 80% encode (20 ms of link at 500mbit, measured 100 - 50 ms)."""
  slow = [row("none", 100, 2.0, 2.5, 1.6),
          row("powersgd-r4", 2, 0.1, 0.5, 0.1 / r4_ratio, encode_s=0.05, encode_share=0.8),
          row("auto", 2, 0.1, auto_step, 0.1 / auto_ratio, encode_s=0.05, chose="powersgd", encode_share=0.8)]
  fast = [row("none", 100, 0.2, 0.5, 0.2), row("powersgd-r4", 2, 0.08, 0.48, 0.08, encode_s=0.05, encode_share=0.75),
          row("auto", 100, 0.2, 0.5, 0.2, chose="none")]
  launch = lambda rate, rows: {"rate": rate, "hosts": 2, "local_step_s": 0.4, "steps": 5, "rows": rows}
  entry = {"kind": "powersgd", "rank": 4, "layers_compressed": 9,
           "bytes_per_step": {"uncompressed": 311016, "compressed": 35720}}
  runs = [{"config": c, "name": V.ACCURACY_CONFIGS[c].name, "seed": s, "final_top1": top1, "images_per_sec": 400.0,
           "compression": entry if c != "none" else {"kind": "none"},
           "reached": {"seconds": 500.0 + s, "step": 200, "epoch": 3.4} if top1 >= 0.85 else None,
           "command": f"horovodrun ... {c}", "curve": [{"step": 58, "top1": 0.6}, {"step": 232, "top1": top1}]}
          for c, s, top1 in (("none", 0, 0.862), ("none", 1, 0.858), ("r4", 0, 0.859), ("r4", 1, 0.857),
                             ("r4-noef", 0, 0.80), ("r4-noef", 1, 0.81))]
  return {"speed": {"setup": {"steps": 5, "batch_per_rank": 16},
                    "launches": {"1x1": {"local_step_s": 0.3, "steps": 5, "rows": []},
                                 "10gbit-2x1": launch("10gbit", fast), "500mbit-2x1": launch("500mbit", slow)}},
          "accuracy": {"setup": {"target": 0.85, "steps": 232, "compression_start": 58,
                                 "setting": {"name": "(c) batch 1,024, LARS + warmup"}}, "runs": runs}}


def test_speed_rows_slowest_rate_first_with_cut_efficiency_and_model_ratio():
  rows = report.speed_rows(result())
  assert [(r["rate"], r["variant"]) for r in rows][:3] == [("500mbit", "none"), ("500mbit", "powersgd-r4"),
                                                           ("500mbit", "auto")]
  none, r4, auto = rows[:3]
  assert r4["cut"] == pytest.approx(50.0) and none["cut"] == pytest.approx(1.0)
  assert none["efficiency"] == pytest.approx(0.12) and r4["efficiency"] == pytest.approx(0.6)
  assert none["ratio"] == pytest.approx(1.25) and r4["encode_ms"] == pytest.approx(50.0)
  assert (auto["chose"], none["chose"], r4["compressed"], none["compressed"]) == ("powersgd", None, True, False)
  assert auto["compressed"] and not rows[-1]["compressed"]  # auto that chose PowerSGD, auto that sent whole
  assert r4["predicted_link_ms"] == pytest.approx(20.0) and r4["encode_share"] == pytest.approx(0.8)
  assert r4["link_ms"] == pytest.approx(50.0) and r4["link_ratio"] == pytest.approx(2.5)
  assert none["link_ms"] == pytest.approx(2000.0) and none["encode_share"] == pytest.approx(0.0)


def test_model_target_counts_autos_rows():
  # rank 4's rows within 25%, auto's (chose PowerSGD) 1.5x its prediction: left out, the target read met
  rows = report.speed_rows(result(auto_ratio=1.5))
  what, measured, ok = targets.model_target(rows)
  assert ok is False and "auto's" in what
  assert measured.startswith("2 of 3 rows: powersgd 2 of 2, auto 0 of 1 (outside: 1.50 at 500mbit, 2 hosts)")
  assert "75-80% of each prediction is the encode" in measured
  assert targets.model_target(report.speed_rows(result()))[1].startswith("3 of 3 rows: powersgd 2 of 2, auto 1 of 1;")


def test_model_parts_say_the_link_part_apart():
  text = targets.model_parts(report.speed_rows(result()))
  assert "| 500mbit | 2 | powersgd-r4 | 100 | 80% | 20 | 100 | 50 | 2.50 |" in text
  assert "| 500mbit | 2 | auto (powersgd) | 100 | 80% |" in text and "| 10gbit | 2 | auto (none) |" not in text
  assert "The encode is 75-80% of each compressed row's prediction" in text
  assert "uncompressed rows (none, auto (none)), all link: 3 of 3 within 25%" in text


def verdicts(res):
  rows = report.speed_rows(res)
  return [ok for _, _, ok in targets.targets(rows, tables.accuracy_stats(res["accuracy"]["runs"]))]


def test_targets_met():
  # bytes 50x, exchange 20x, e 0.6, auto within 5% everywhere, model within 25%, accuracy: r4 0.2
  # points below, no-EF 5.3 points below and every seed below r4's worst
  assert verdicts(result()) == [True, True, True, True, True, True, True]


def test_targets_missed():
  # auto 1.2x the better at 500mbit; rank 4's exchange 1.5x its prediction
  assert verdicts(result(auto_step=0.6, r4_ratio=1.5))[3:5] == [False, False]


@pytest.mark.parametrize("gap, seeds, want", [(2.31, [0], "2.31 points below it, 1 seed"),
                                               (-0.4, [0, 1], "0.40 points above it, 2 seeds")])
def test_below_says_the_side_and_the_seeds(gap, seeds, want):
  assert targets.below(gap, "it", seeds) == want


def test_targets_not_measured_without_rows():
  assert verdicts({"accuracy": {"runs": []}}) == [None] * 5


def test_accuracy_stats():
  stats = {s["config"]: s for s in tables.accuracy_stats(result()["accuracy"]["runs"])}
  assert list(stats) == ["none", "r4", "r4-noef"]  # ACCURACY_CONFIGS' order, configurations run only
  assert stats["none"]["final_mean"] == pytest.approx(0.86)
  assert (stats["r4"]["reached"], stats["r4-noef"]["reached"]) == (2, 0)
  assert stats["r4"]["seconds_mean"] == pytest.approx(500.5) and stats["r4-noef"]["seconds_mean"] is None


def test_report_from_the_json_alone(tmp_path):
  res = result()
  (tmp_path / "compression.json").write_text(json.dumps(res))
  report.main([f"--out_dir={tmp_path}"])
  text = (tmp_path / "compression.md").read_text()
  assert (tmp_path / "compression.png").stat().st_size > 10_000
  assert "## What this does not show" in text and "## Targets (issue 25)" in text
  assert "| 500mbit | 2 | powersgd-r4 | 2.00 | 2.00 | 50.0x | 50 | 100 | 100 | 1.00 | 500 | 0.60 |" in text
  assert "| 500mbit | 2 | auto (powersgd) |" in text
  assert "| PowerSGD rank 4 | 0,1 | 85.80% (85.70-85.90) | 2 of 2 | 500 | 400 | 9 | 35 |" in text
  assert "| uncompressed | 0,1 | 86.00% (85.80-86.20) | 2 of 2 | 500 | 400 | - | - |" in text
  assert "**not met**" not in text and "smoke" not in text and "failed" not in text


def test_report_names_failed_launches():
  res = result()
  res["speed"]["launches"]["500mbit-4x1"] = None
  assert report.failed(res) == ["500mbit-4x1"]
  assert "Launches that failed (no rows): 500mbit-4x1." in report.report(res)


@pytest.mark.parametrize("entry, want", [
    ({"kind": "powersgd", "rank": 4, "layers_compressed": 9,
      "bytes_per_step": {"uncompressed": 311016, "compressed": 35720}}, "9 | 35"),
    ({"kind": "auto", "chose": "none", "layers_compressed": 0,
      "bytes_per_step": {"uncompressed": 311296, "compressed": 35840}}, "0 | 304"),  # auto that sent whole
    ({"kind": "none"}, "- | -"),
    ({}, "- | -"),  # a summary.json without the entry
])
def test_sent(entry, want):
  assert tables.sent(entry) == want


@pytest.mark.parametrize("argv, message", [
    (["--only=spd"], "--only=spd: choose among speed,accuracy,trust"),
    (["--rates=fast"], "--rates: 'fast' is not a tc rate"),
    (["--hosts=1"], "--hosts=1: give emulated hosts from 2 to 16"),
    (["--hosts=a"], "pass integers"),
    (["--seeds=a"], "pass integers"),
    (["--variants=powersgd"], "--variants=powersgd: choose among none,fp16"),
    (["--configs=r3"], "--configs=r3: choose among none,r2"),
    (["--steps=0"], "--steps=0 must be at least 1"),
])
def test_parse_args_names_the_flag(argv, message, capsys):
  with pytest.raises(SystemExit):
    parse_args(argv)
  assert message in capsys.readouterr().err


def test_parse_args_defaults_are_the_issues_measurement():
  args = parse_args([])
  assert (args.parts, args.rates_list, args.hosts_list, args.seeds_list) == \
      (["speed", "accuracy", "trust"], ["500mbit", "2gbit", "10gbit"], [2, 4], [0, 1])
  assert args.variants_list == ["none", "fp16", "powersgd-r1", "powersgd-r2", "powersgd-r4", "auto"]
  assert args.configs_list == ["none", "r2", "r2-noef", "r4", "r4-noef"]


# ---------------------------------------------------------------- trust --
def test_ratios_against_numpy():
  from bench.compression import trust
  from optimizers.lars import LARS
  import numpy as np
  lars = LARS(eta=0.001, weight_decay=5e-4)
  rng = np.random.default_rng(0)
  w, g = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(6, 4)).astype(np.float32)
  u = (g + 0.3 * rng.normal(size=(6, 4))).astype(np.float32)

  def t(x):
    return 0.001 * np.linalg.norm(w) / (np.linalg.norm(x) + 5e-4 * np.linalg.norm(w))
  got = trust.ratios(lars, w, g, u)
  assert got["trust"] == pytest.approx(t(u) / t(g), rel=1e-5)
  assert got["norm"] == pytest.approx(np.linalg.norm(u) / np.linalg.norm(g), rel=1e-5)
  assert got["cos"] == pytest.approx(np.sum(u * g) / (np.linalg.norm(u) * np.linalg.norm(g)), rel=1e-5)
  assert got["step"] == pytest.approx(t(u) * np.linalg.norm(u + 5e-4 * w) / (t(g) * np.linalg.norm(g + 5e-4 * w)),
                                      rel=1e-5)
  same = trust.ratios(lars, w, g, 2 * g)  # twice the gradient: half the ratio, LARS's move the same length
  assert same["norm"] == pytest.approx(2.0) and same["cos"] == pytest.approx(1.0)
  assert same["trust"] == pytest.approx(0.5, rel=1e-3) and same["step"] == pytest.approx(1.0, rel=1e-3)


def trust_run(layer: str, steps: dict) -> dict:
  return {"layers": [{"layer": layer, "view": [144, 16], "steps": steps}]}


def test_summarise_pools_runs_checkpoints_and_batches_per_layer():
  from bench.compression import trust
  values = lambda *xs: {k: list(xs) for k in trust.KEYS}  # noqa: E731
  runs = [trust_run("conv1/kernel", {"116": values(1.0, 3.0), "174": values(2.0)}),
          trust_run("conv1/kernel", {"116": values(5.0)})]
  (row,) = trust.summarise(runs)
  assert row["layer"] == "conv1/kernel" and row["count"] == 4
  assert row["trust"] == {"median": 2.5, "min": 1.0, "max": 5.0} == row["cos"]


def test_trust_text_tables_each_layer_and_says_what_is_missing():
  stat = {"median": 0.9, "min": 0.8, "max": 1.0}
  layer = {"layer": "conv1/kernel", "view": [144, 16], "count": 8, **{k: stat for k in ("trust", "norm", "cos", "step")}}
  trust = {"batches": 8, "halves": 2, "missing": ["r4-noef-seed1"],
           "configs": {"r4": {"seeds": [0], "steps": [116, 174], "rank": 4, "error_feedback": True, "layers": [layer]}}}
  text = tables.trust_text(trust)
  assert "| conv1/kernel | 144x16 | 0.90 (0.80-1.00) | 0.90 (0.80-1.00) |" in text
  assert "(seeds 0; steps 116, 174)" in text and "Runs not found (not measured): r4-noef-seed1." in text
  assert tables.trust_text({}).startswith("Not measured")
