"""The pure helpers of bench/bench_scaling.py: predictions, link bytes, e and T, the cluster-scale simulation."""
import dataclasses

import pytest

from bench import bench_scaling as bs
from comm import cost_model
from comm.cost_model import CostModel, Link
from comm.topology import World

MB = 1 << 20
# 1 GB/s per rank in the node, 0.1 GB/s per host link (as tests/test_cost_model.py).
M = CostModel(intra=Link(alpha=1e-3, beta=1e-9), inter=Link(alpha=2e-3, beta=1e-8))
RING = dataclasses.replace(M, flat="ring")
TWO_BY_TWO = World(size=4, local_size=2, cross_size=2)
ONE_NODE = World(size=4, local_size=4, cross_size=1)


@pytest.mark.parametrize("algorithm, want", [
    # per 1e8 bucket: flat a_out + n b_in + n b_out = 1.102; the 5e7 one 2e-3 + 0.05 + 0.5
    ("flat", 2 * 1.102 + 0.552),
    ("horovod", 2 * 1.102 + 0.552),
    # hier: 2 (a_in + n/2 b_in) + a_out + n b_out = 1.104 and 0.554
    ("hier", 2 * 1.104 + 0.554),
    ("hybrid", 2 * 1.102 + 0.552),
])
def test_predict_sums_over_buckets(algorithm, want):
  assert bs.predict(algorithm, M, TWO_BY_TWO, [100_000_000, 100_000_000, 50_000_000]) == pytest.approx(want)


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
  assert bs.link_mb_per_host(algorithm, model, world, [8 * MB, 16 * MB]) == pytest.approx(want_mb)


@pytest.mark.parametrize("total, size, want", [
    (70, 32, [32, 32, 6]), (64, 32, [32, 32]), (5, 32, [5]), (0, 32, []),
])
def test_split_into_buckets(total, size, want):
  assert bs.split(total, size) == want


@pytest.mark.parametrize("n, s_1, s_n, e, t", [
    (1, 240.0, 240.0, 1.0, 240.0),
    (4, 240.0, 60.0, 0.25, 240.0),   # 4 ranks at a quarter of the speed: no faster than one
    (2, 100.0, 90.0, 0.9, 180.0),
])
def test_scaling_efficiency_and_throughput(n, s_1, s_n, e, t):
  got_e, got_t = bs.scaling(n, s_1, s_n)
  assert got_e == pytest.approx(e) and got_t == pytest.approx(t)
  assert got_t == pytest.approx(n * s_n)  # T = N * S_1 * e is the job's images/sec


# 2 nodes of 2: 1 us per step and 1 GB/s in the node, 10 us per step and 0.1 GB/s per host link.
SMALL = {"local": 2, "intra": (1e-6, 1e-9), "inter": (1e-5, 1e-8)}


def test_simulation_formulas_by_hand():
  n = 1e8
  # ring over 4 ranks: 2(3) steps of the slower latency, 2(3/4) n at the slower beta
  assert bs.ring_time(1e-5, 1e-8, 4, n) == pytest.approx(6e-5 + 1.5)
  assert bs.flat_sim_time(SMALL["intra"], SMALL["inter"], 2, 2, n) == pytest.approx(6e-5 + 1.5)
  # hier: 2 (1 step + n/2 b_in) in the node; 2 cross rings of n/2 share the link: 2 steps + n b_out
  assert bs.hier_sim_time(SMALL["intra"], SMALL["inter"], 2, 2, n) == pytest.approx(2 * (1e-6 + 0.05) + 2e-5 + 1.0)
  assert bs.ring_time(1e-5, 1e-8, 1, n) == 0.0


def test_simulate_small_cluster(monkeypatch):
  monkeypatch.setattr(bs, "SIM_RANKS", [4])
  monkeypatch.setattr(bs, "SIM_BUCKET", 100_000_000)
  got = bs.simulate(SMALL, [60_000_000, 40_000_000])[4]  # one 1e8 bucket; two tensors without fusion
  hier = 2 * (1e-6 + 0.05) + 2e-5 + 1.0
  assert got["ring"] == pytest.approx(6e-5 + 1.5)
  assert got["ring_per_tensor"] == pytest.approx(2 * 6e-5 + 1.5)
  assert got["hier"] == pytest.approx(hier)
  assert got["hybrid"] == pytest.approx(hier)


def test_hybrid_cost_from_a_calibration_parses_back():
  cal = {"flat": "mpi", "intra": {"alpha_us": 300.0, "gbps": 5.0}, "inter": {"alpha_us": 0.2, "gbps": None}}
  spec = bs._hybrid_cost({"calibration": cal})
  assert spec == "300,5,1,1,mpi"  # alpha at least 1 us, a missing bandwidth 1 GB/s
  model = cost_model.parse(spec)
  assert model.intra.gbps == pytest.approx(5) and model.flat == "mpi"
  assert bs._hybrid_cost(None) == ""


def test_hybrid_gaps():
  rows = [{"case": "8 MB", "algorithm": a, "measured_s": t} for a, t in
          [("flat", 1.0), ("hier", 2.0), ("hybrid", 1.05), ("horovod", 0.5)]]
  report = {"launches": {"2x2": {"comm": rows}}}
  assert bs.hybrid_gaps(report) == [("2x2", "8 MB", pytest.approx(1.05))]
