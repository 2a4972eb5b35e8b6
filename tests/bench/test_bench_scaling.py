"""The pure helpers of bench/scaling/: predictions, link bytes, e and T, the cluster-scale simulation,
the settings the command line selects, the report's template."""
import argparse
import dataclasses

import pytest

from bench.scaling import calibrate, driver, replay, report, settings, simulate, timing
from comm import cost_model
from comm.cost_model import CostModel, Link
from comm.topology import World
from flags.config import ConfigError

MB = 1 << 20
# 1 GB/s per rank in the node, 0.1 GB/s per host link (as tests/comm/test_cost_model.py).
M = CostModel(intra=Link(alpha=1e-3, beta=1e-9), inter=Link(alpha=2e-3, beta=1e-8))
RING = dataclasses.replace(M, flat="ring")
TWO_BY_TWO = World(size=4, local_size=2, cross_size=2)
ONE_NODE = World(size=4, local_size=4, cross_size=1)


@pytest.mark.parametrize("sizes, threshold, want", [
    ([32, 32, 32, 1.5], 64, [64, 33.5]),  # ResNet-50's 4 buckets at 64 MB: 2 collectives
    ([40, 30, 20], 64, [40, 50]),         # a response that does not fit closes the run
    ([70, 1], 64, [70, 1]),               # above the threshold: alone
    ([1, 1, 1, 1, 1], 2, [2, 2, 1]),
    ([], 64, []),
])
def test_fuse_like_horovod(sizes, threshold, want):
  assert replay.fuse(sizes, threshold) == want


BUCKETS = [[60_000_000, 40_000_000], [100_000_000], [50_000_000]]


@pytest.mark.parametrize("algorithm, model, buckets, fusion_bytes, want", [
    # flat: tensors 6e7 4e7 | 1e8 | 5e7 fuse at 1.6e8 into 1e8 and 1.5e8: 2 calls of
    # a_out + n b_in + n b_out, 2 * 2e-3 + 2.5e8 * 1.1e-8
    ("flat", M, BUCKETS, 1.6e8, 2 * 2e-3 + 2.75),
    ("flat", M, BUCKETS, 1.0, 4 * 2e-3 + 2.75),  # no fusion: one call per tensor
    ("horovod", M, [[n] for b in BUCKETS for n in b], 1.6e8, 2 * 2e-3 + 2.75),
    # hier: buckets 1e8 1e8 5e7 fuse into 1e8 and 1.5e8 for the reduce-scatter and the
    # allgather (2 x (2 a_in + 2.5e8/2 b_in)); the cross halves 5e7 5e7 2.5e7 into one
    # allreduce whose 2 groups share the link: a_out + 2 * 1.25e8 b_out
    ("hier", M, BUCKETS, 1.6e8, 2 * (2e-3 + 0.125) + 2e-3 + 2.5),
    ("hybrid", M, BUCKETS, 1.6e8, 2 * 2e-3 + 2.75),  # an mpi flat never loses to hier
    # against a ring hybrid sends the 1e8 bucket hier (1.104) and the 1e5 one flat
    # (a_out + 1.5e5 b_out)
    ("hybrid", RING, [[100_000_000], [100_000]], 1.6e8, 1.104 + 2e-3 + 1.5e-3),
])
def test_predict_pays_alpha_per_fused_collective(algorithm, model, buckets, fusion_bytes, want):
  assert replay.predict(algorithm, model, TWO_BY_TWO, buckets, fusion_bytes) == pytest.approx(want)


@pytest.mark.parametrize("world", [TWO_BY_TWO, ONE_NODE])
def test_predict_one_buffer_is_the_cost_model(world):
  n = 32 * MB  # the single-buffer rows: one collective, as calibrated
  assert replay.predict("flat", M, world, [[n]], 64 * MB) == pytest.approx(cost_model.flat_time(M, world, n))
  assert replay.predict("hier", M, world, [[n]], 64 * MB) == pytest.approx(cost_model.hier_time(M, world, n))


@pytest.mark.parametrize("algorithm, want", [
    ("horovod", [[4 * MB], [40 * MB], [8 * MB]]),
    # comm/fusion.py walks backprop order: 40 MB alone (above 32 MB), then 8 + 4 MB
    ("flat", [[40 * MB], [8 * MB, 4 * MB]]),
])
def test_case_buckets(algorithm, want):
  assert replay.case_buckets(algorithm, [4 * MB, 40 * MB, 8 * MB]) == want


@pytest.mark.parametrize("algorithm, model, world, want_mb", [
    ("flat", M, TWO_BY_TWO, 24.0),      # n per host per bucket: the 8.6 MB per 8 MB measured
    ("hier", M, TWO_BY_TWO, 24.0),
    ("hybrid", M, TWO_BY_TWO, 24.0),
    ("flat", RING, TWO_BY_TWO, 36.0),   # a ring over 4 ranks: 1.5 n per host
    ("hybrid", RING, TWO_BY_TWO, 24.0),  # which is why hybrid takes hier against it
    ("flat", M, World(size=4, local_size=1, cross_size=4), 36.0),  # 4 x 1: 2(3/4) n either way
    ("flat", M, ONE_NODE, 0.0),
])
def test_link_mb_per_host(algorithm, model, world, want_mb):
  assert replay.link_mb_per_host(algorithm, model, world, [8 * MB, 16 * MB]) == pytest.approx(want_mb)


@pytest.mark.parametrize("total, size, want", [
    (70, 32, [32, 32, 6]), (64, 32, [32, 32]), (5, 32, [5]), (0, 32, []),
])
def test_split_into_buckets(total, size, want):
  assert simulate.split(total, size) == want


@pytest.mark.parametrize("n, s_1, s_n, e, t", [
    (1, 240.0, 240.0, 1.0, 240.0),
    (4, 240.0, 60.0, 0.25, 240.0),   # 4 ranks at a quarter of the speed: no faster than one
    (2, 100.0, 90.0, 0.9, 180.0),
])
def test_scaling_efficiency_and_throughput(n, s_1, s_n, e, t):
  got_e, got_t = report.scaling(n, s_1, s_n)
  assert got_e == pytest.approx(e) and got_t == pytest.approx(t)
  assert got_t == pytest.approx(n * s_n)  # T = N * S_1 * e is the job's images/sec


# 2 nodes of 2: 1 us per step and 1 GB/s in the node, 10 us per step and 0.1 GB/s per host link.
SMALL = {"local": 2, "intra": (1e-6, 1e-9), "inter": (1e-5, 1e-8)}


def test_simulation_formulas_by_hand():
  n = 1e8
  # ring over 4 ranks: 2(3) steps of the slower latency, 2(3/4) n at the slower beta
  assert simulate.ring_time(1e-5, 1e-8, 4, n) == pytest.approx(6e-5 + 1.5)
  assert simulate.flat_sim_time(SMALL["intra"], SMALL["inter"], 2, 2, n) == pytest.approx(6e-5 + 1.5)
  # hier: 2 (1 step + n/2 b_in) in the node; 2 cross rings of n/2 share the link: 2 steps + n b_out
  assert simulate.hier_sim_time(SMALL["intra"], SMALL["inter"], 2, 2, n) == pytest.approx(2 * (1e-6 + 0.05) + 2e-5 + 1.0)
  assert simulate.ring_time(1e-5, 1e-8, 1, n) == 0.0


def test_simulate_small_cluster():
  # one 1e8 bucket; two tensors without fusion
  got = simulate.simulate(SMALL, [60_000_000, 40_000_000], ranks=[4], bucket=100_000_000)[4]
  hier = 2 * (1e-6 + 0.05) + 2e-5 + 1.0
  assert got["ring"] == pytest.approx(6e-5 + 1.5)
  assert got["ring_per_tensor"] == pytest.approx(2 * 6e-5 + 1.5)
  assert got["hier"] == pytest.approx(hier)
  assert got["hybrid"] == pytest.approx(hier)


def test_hybrid_cost_from_a_calibration_parses_back():
  cal = {"flat": "mpi", "intra": {"alpha_us": 300.0, "gbps": 5.0}, "inter": {"alpha_us": 0.2, "gbps": None}}
  spec = driver.hybrid_cost({"calibration": cal})
  assert spec == "300,5,1,1,mpi"  # alpha at least 1 us, a missing bandwidth 1 GB/s
  model = cost_model.parse(spec)
  assert model.intra.gbps == pytest.approx(5) and model.flat == "mpi"
  assert driver.hybrid_cost(None) == ""


def test_hybrid_gaps():
  rows = [{"case": "8 MB", "algorithm": a, "measured_s": t} for a, t in
          [("flat", 1.0), ("hier", 2.0), ("hybrid", 1.05), ("horovod", 0.5)]]
  result = {"launches": {"2x2": {"comm": rows}}}
  assert report.hybrid_gaps(result) == [("2x2", "8 MB", pytest.approx(1.05))]


def test_calibration_range():
  cal = lambda pts: {"calibration": {"intra": {"points": pts}, "inter": {"points": []}}}
  result = {"launches": {"1x4": cal([[65536, 0.04], [16 * MB, 0.1]]), "2x2": cal([[MB, 0.05]]), "1x1": None}}
  assert report.calibration_range(result) == "64 KB-16 MB"
  assert report.calibration_range({"launches": {}}) == "no sizes"


@pytest.mark.parametrize("n", [2, 4, 6])
def test_turn_order_is_balanced_for_place_and_predecessor(n):
  turns = [timing.turn_order(t, n) for t in range(n)]
  assert all(sorted(order) == list(range(n)) for order in turns)
  for place in range(n):  # every algorithm once in every place
    assert sorted(order[place] for order in turns) == list(range(n))
  follows = sorted((a, b) for order in turns for a, b in zip(order, order[1:]))
  assert follows == sorted((a, b) for a in range(n) for b in range(n) if a != b)  # every pair once
  assert timing.turn_order(n, n) == turns[0]


def test_hybrid_is_costed_by_the_plan_it_ran():
  world = World(size=4, rank=0, local_size=2, local_rank=0, cross_size=2, cross_rank=0)
  n = 32 * MB
  assert replay.predict("hybrid", M, world, [[n]], 64 * MB, plan=["hier"]) == pytest.approx(
      cost_model.hier_time(M, world, n))
  assert replay.predict("hybrid", M, world, [[n]], 64 * MB, plan=["flat"]) == pytest.approx(
      cost_model.flat_time(M, world, n))


@pytest.mark.parametrize("template, values, want", [
    ("a {x:.1f} b\n", {"x": 2.25}, "a 2.2 b\n"),
    # a line naming a value the run lacks is left out, and the blank line it would double
    ("head\n\n- {x}\n\n- {y}\n\ntail\n", {"y": 1}, "head\n\n- 1\n\ntail\n"),
    ("head\n\nonly {missing}\n\ntail\n", {}, "head\n\ntail\n"),
    ("shown{flag}\nhidden{other}\n", {"flag": ""}, "shown\n"),  # an empty value: a condition
    ("{table}\n", {"table": "| a |\n|---|"}, "| a |\n|---|\n"),
])
def test_fill_template(template, values, want):
  assert report.fill(template, values) == want


def args(**overrides):
  base = dict(rate="1gbit", repeats=12, train_steps=3, full=False, quick=False, only="", out_dir="/tmp/x")
  return argparse.Namespace(**{**base, **overrides})


@pytest.mark.parametrize("overrides, launches, sizes, variants, models", [
    ({}, ["2x2", "1x4", "1x1", "2x1"], [1 * MB, 8 * MB, 32 * MB], ("horovod", "hybrid"), ["resnet20", "resnet50"]),
    ({"full": True}, ["2x2", "1x4", "1x1", "2x1", "4x1"], [1 * MB, 4 * MB, 16 * MB, 64 * MB], settings.ALGORITHMS,
     ["resnet20", "resnet50"]),
    ({"only": "1x1,2x2"}, ["2x2", "1x1"], [1 * MB, 8 * MB, 32 * MB], ("horovod", "hybrid"), ["resnet20", "resnet50"]),
    ({"quick": True, "only": "2x2"}, ["2x2"], [1 * MB], ("horovod", "hybrid"), ["resnet20"]),
    ({"only": "4x1"}, ["4x1"], [1 * MB, 8 * MB, 32 * MB], ("horovod", "hybrid"), ["resnet20", "resnet50"]),
])
def test_settings_from_args(overrides, launches, sizes, variants, models):
  s = settings.Settings.from_args(args(**overrides))
  assert [l.name for l in s.launches] == launches
  assert list(s.sizes) == sizes and s.train_variants == variants
  assert [m[0] for m in s.train_models] == models
  assert s.only == (tuple(overrides["only"].split(",")) if "only" in overrides else ())
  with pytest.raises(dataclasses.FrozenInstanceError):
    s.repeats = 1


def test_only_a_launch_that_exists():
  with pytest.raises(ConfigError, match="--only=2x2,3x3 names no launch 3x3"):
    settings.Settings.from_args(args(only="2x2,3x3"))


@pytest.mark.parametrize("overrides, want", [
    ({}, ["--repeats=12", "--train_steps=3"]),
    ({"repeats": 1, "train_steps": 1, "quick": True}, ["--repeats=1", "--train_steps=1", "--quick"]),
    ({"full": True}, ["--repeats=12", "--train_steps=3", "--full"]),
])
def test_worker_args_carry_the_settings(overrides, want):
  s = settings.Settings.from_args(args(**overrides))
  assert s.worker_args() == want
  # the worker parses them back into the same sizes, models and repeats
  back = settings.Settings.from_args(args(**{**overrides, "out_dir": s.out_dir}))
  assert back == s


@pytest.mark.parametrize("tag, n, local, want", [
    ("cal_cross", 8 * MB, 2, 4 * MB),  # hier's cross call carries a 1/local share
    ("cal_cross", 8 * MB, 1, 8 * MB),
    ("cal_node", 8 * MB, 2, 8 * MB),
    ("cal_flat", 8 * MB, 4, 8 * MB),
])
def test_calibration_carries(tag, n, local, want):
  assert calibrate.carried(tag, n, local) == want


def test_model_from_points_fits_each_level():
  # points of alpha + n beta (2 ranks: beta per byte of the buffer), fitted back exactly
  line = lambda alpha, beta: [(n, alpha + n * beta) for n in (MB, 4 * MB, 16 * MB)]
  points = {"cal_node": line(1e-3, 1e-9), "cal_pair": line(2e-3, 2e-9), "cal_copy": line(0.0, 5e-10),
            "cal_flat": line(3e-3, 1e-8), "cal_cross": []}
  model = calibrate.model_from(points, World(size=2, local_size=2, cross_size=1), gloo=False)
  assert model.intra.alpha == pytest.approx(1e-3, rel=1e-3) and model.intra.beta == pytest.approx(1e-9, rel=1e-3)
  assert model.pair.alpha == pytest.approx(2e-3, rel=1e-3)
  assert model.copy == pytest.approx(5e-10, rel=1e-3)
  assert model.flat_call.beta == pytest.approx(1e-8, rel=1e-3)
  assert model.inter == cost_model.Link(0.0, 0.0) and model.flat == "mpi"
  assert calibrate.model_from(points, World(size=2, local_size=2, cross_size=1), gloo=True).flat == "ring"


def test_training_table_efficiency_against_one_rank():
  row = lambda model, variant, step: {"model": model, "variant": variant, "step_s": step,
                                      "images_per_sec_per_rank": 16 / step}
  result = {"launches": {"1x1": {"training": [row("r20", "none", 0.1)]},
                         "2x1": {"training": [row("r20", "none", 0.15), row("r20", "hybrid", 0.2)]}}}
  got = report.training_table(result)
  assert got[0] == ("r20", 1, "-", 0.1, pytest.approx(160), pytest.approx(1.0), pytest.approx(160), 0.0)
  # N=2: half the speed per rank, so e 0.5 and T no better than one rank; a quarter of the step is the exchange
  assert got[1] == ("r20", 2, "hybrid", 0.2, pytest.approx(80), pytest.approx(0.5), pytest.approx(160),
                    pytest.approx(0.25))
  assert len(got) == 2  # the step without exchange at N > 1 is the comm share, not a row


def test_bench_step_is_train_py_default_optimizer():
  from bench.harness.train_step import default_optim
  config = default_optim()
  assert (config.optimizer, config.momentum, config.weight_decay, config.precision) == ("sgd", 0.9, 5e-4, "fp32")


@pytest.mark.parametrize("name, cost, np_, hosts, flags", [
    ("2x2", "", "4", "imcb-h1:2,imcb-h2:2", ["--comm", "--training"]),
    ("1x4", "", "4", "imcb-h1:4", ["--comm"]),
    ("2x1", "300,1,300,0.1,mpi", "2", "imcb-h1:1,imcb-h2:1", ["--training", "--hybrid_cost=300,1,300,0.1,mpi"]),
])
def test_launch_command(name, cost, np_, hosts, flags):
  s = settings.Settings.from_args(args(quick=True, repeats=1))
  launch = next(l for l in settings.LAUNCHES if l.name == name)
  cmd = driver.launch_command(launch, s, "/tmp/out.json", cost)
  assert cmd[:2] == ["run", "env"]
  assert cmd[cmd.index("-np") + 1] == np_ and cmd[cmd.index("-H") + 1] == hosts
  worker = cmd[cmd.index("-m") + 1:]  # every rank: python -m bench.scaling --worker, the settings carried
  assert worker[:2] == ["bench.scaling", "--worker"] and "--out=/tmp/out.json" in worker
  assert worker[-len(flags):] == flags and s.worker_args() == worker[5:5 + len(s.worker_args())]
