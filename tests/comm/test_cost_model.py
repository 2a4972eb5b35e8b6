"""The alpha-beta cost model (comm/cost_model.py): hand-computed tables, fit round trips, --hybrid_cost parsing."""
import dataclasses

import pytest

from comm import cost_model
from comm.cost_model import CostModel, Link
from comm.topology import World

# 1 GB/s per rank inside a node, 0.1 GB/s per host link: round numbers to compute by hand.
M = CostModel(intra=Link(alpha=1e-3, beta=1e-9), inter=Link(alpha=2e-3, beta=1e-8))
N = 1e8  # bytes

ONE_NODE = World(size=4, local_size=4, cross_size=1)
TWO_BY_TWO = World(size=4, local_size=2, cross_size=2)
FOUR_BY_ONE = World(size=4, local_size=1, cross_size=4)
BIG = World(size=512, local_size=8, cross_size=64)


@pytest.mark.parametrize("world, flat, hier", [
    # one node: flat = a_in + 2(3/4) n b_in; hier = 2 (a_in + 3/4 n b_in), one call more
    (ONE_NODE, 1e-3 + 0.15, 2 * (1e-3 + 0.075)),
    # 2 x 2: flat = a_out + 2(1/2) n b_in + 2(1/2) n b_out (n per host link, as measured);
    # hier = 2 (a_in + 1/2 n b_in) + a_out + 2 groups * 2(1/2) (n/2) b_out: the same link bytes
    (TWO_BY_TWO, 2e-3 + 0.1 + 1.0, 2 * (1e-3 + 0.05) + 2e-3 + 1.0),
    # 4 x 1: no in-node phase, both are one allreduce of 2(3/4) n per host link
    (FOUR_BY_ONE, 2e-3 + 1.5, 2e-3 + 1.5),
    # 64 x 8: in node 2(7/8) n b_in, across 2(63/64) n b_out per host link in both
    (BIG, 2e-3 + 0.175 + 1.96875, 2 * (1e-3 + 0.0875) + 2e-3 + 1.96875),
    # one rank: nothing to exchange
    (World(), 0.0, 0.0),
])
def test_flat_and_hier_times(world, flat, hier):
  assert cost_model.flat_time(M, world, N) == pytest.approx(flat)
  assert cost_model.hier_time(M, world, N) == pytest.approx(hier)


@pytest.mark.parametrize("world, want", [
    (ONE_NODE, ("flat", 1e-3 + 0.15)),
    (TWO_BY_TWO, ("flat", 2e-3 + 0.1 + 1.0)),
    (FOUR_BY_ONE, ("flat", 2e-3 + 1.5)),  # a tie: flat, one call
    (BIG, ("flat", 2e-3 + 0.175 + 1.96875)),
    (World(), ("flat", 0.0)),
])
def test_choose(world, want):
  algorithm, seconds = cost_model.choose(M, world, N)
  assert algorithm == want[0]
  assert seconds == pytest.approx(want[1])


@pytest.mark.parametrize("world", [ONE_NODE, TWO_BY_TWO, FOUR_BY_ONE, BIG])
@pytest.mark.parametrize("nbytes", [1e2, 1e6, 1e9])
def test_hier_never_beats_hierarchy_aware_flat(world, nbytes):
  # Same bytes on every link, two more calls: hybrid on CPU keeps flat (results/scaling.md, 2 x 2: flat
  # was the faster at every size, and hybrid steered to hier by the old ring model lost up to 1.6x).
  assert cost_model.choose(M, world, nbytes)[0] == "flat"


def test_hier_with_its_measured_in_node_pair_and_local_passes():
  # 2 x 2, a 16 MB bucket: the pair (reduce-scatter + allgather) fitted as its own Link,
  # and 3 local passes at 1 GB/s for a bucket of several tensors, 1 for a lone tensor.
  world = World(size=4, rank=0, local_size=2, local_rank=0, cross_size=2, cross_rank=0)
  pair = Link(alpha=2e-3, beta=1e-9)
  model = CostModel(intra=Link(1e-3, 1e-9), inter=Link(5e-3, 1e-8), pair=pair, copy=1e-9)
  n = 16e6
  assert cost_model.node_phases_time(model, 2, n) == pytest.approx(2e-3 + n * 1e-9)  # 2(L-1)/L n = n
  cross = 5e-3 + 2 * n / 2 * 1e-8  # 2 groups of n/2 sharing the link, each sending n/2
  assert cost_model.hier_time(model, world, n) == pytest.approx(2e-3 + n * 1e-9 + cross + n * 1e-9)
  assert cost_model.hier_time(model, world, n, tensors=5) == pytest.approx(2e-3 + n * 1e-9 + cross + 3 * n * 1e-9)
  # Without them, two scatter_times of intra and no local cost, as the start-up probe's model.
  plain = CostModel(intra=Link(1e-3, 1e-9), inter=Link(5e-3, 1e-8))
  assert cost_model.hier_time(plain, world, n, tensors=5) == pytest.approx(2 * (1e-3 + n / 2 * 1e-9) + cross)


def test_flat_measured_as_one_call_replaces_the_level_formula_across_hosts():
  world = World(size=4, rank=0, local_size=2, local_rank=0, cross_size=2, cross_rank=0)
  levels = CostModel(intra=Link(1e-3, 1e-9), inter=Link(5e-3, 1e-8))
  measured = dataclasses.replace(levels, flat_call=Link(2e-3, 2e-8))
  n = 32e6
  assert cost_model.flat_time(levels, world, n) == pytest.approx(5e-3 + n * 1e-9 + n * 1e-8)
  assert cost_model.flat_time(measured, world, n) == pytest.approx(2e-3 + n * 2e-8)
  one_host = World(size=4, rank=0, local_size=4, local_rank=0, cross_size=1, cross_rank=0)
  assert cost_model.flat_time(measured, one_host, n) == cost_model.flat_time(levels, one_host, n)  # intra is flat's call
  assert cost_model.choose(measured, world, n)[0] == "hier" and cost_model.choose(levels, world, n)[0] == "flat"


def test_flat_and_hier_send_the_same_bytes_per_host_link():
  # 2 x 2, 8 MB: Open MPI's flat sent 8.6 MB per host, hier 8.4 MB (results/scaling.md), i.e. n:
  # flat's one allreduce over 2 nodes, and hier's 2 concurrent allreduces of n/2.
  n = 8 << 20
  assert cost_model.allreduce_bytes(2, n) == n
  assert 2 * cost_model.allreduce_bytes(2, n / 2) == n
  assert cost_model.allreduce_bytes(4, n) == 1.5 * n  # what the old ring over 4 ranks charged


def test_allreduce_time_with_sharing():
  link = Link(alpha=1e-3, beta=1e-9)
  assert cost_model.allreduce_time(link, 1, N, sharing=8) == 0.0
  assert cost_model.allreduce_time(link, 4, N) == pytest.approx(1e-3 + 0.15)
  assert cost_model.allreduce_time(link, 4, N, sharing=2) == pytest.approx(1e-3 + 0.3)
  assert cost_model.scatter_time(link, 4, N) == pytest.approx(1e-3 + 0.075)


@pytest.mark.parametrize("ranks, sharing", [(4, 1), (2, 2), (64, 8)])
def test_fit_recovers_the_link_that_made_the_timings(ranks, sharing):
  link = Link(alpha=2e-4, beta=5e-10)
  sizes = [64 << 10, 4 << 20, 16 << 20]
  points = [(n, cost_model.allreduce_time(link, ranks, n, sharing)) for n in sizes]
  got = cost_model.fit(ranks, points, sharing)
  assert got.alpha == pytest.approx(link.alpha) and got.beta == pytest.approx(link.beta)
  # Two points: the line through them.
  got = cost_model.fit(ranks, points[::2], sharing)
  assert got.alpha == pytest.approx(link.alpha) and got.beta == pytest.approx(link.beta)


def test_fit_of_a_shared_link_is_per_host():
  # 2 x 2: the 2 cross groups of a host run at once, each sending n per allreduce; a host link of
  # 0.1 GB/s carries 2n, so an 8 MB allreduce takes 2 * 8 MB / 0.1 GB/s, and fit says 0.1 GB/s.
  n = 8e6
  got = cost_model.fit(2, [(0, 0.3), (n, 0.3 + 2 * n / 1e8)], sharing=2)
  assert got.gbps == pytest.approx(0.1) and got.alpha == pytest.approx(0.3)


def test_fit_clips_noise_and_rejects_what_it_cannot_fit():
  # Larger buffer faster (noise): no negative bandwidth cost; alpha is the mean time
  # in the relative sense (1/1e-3 + 1/5e-4) / (1/1e-6 + 1/2.5e-7), the harmonic-like mean 6e-4.
  got = cost_model.fit(2, [(4096, 1e-3), (8 << 20, 5e-4)])
  assert got.beta == 0.0 and got.alpha == pytest.approx(6e-4)
  # Steep line with a negative intercept: alpha clipped to zero.
  assert cost_model.fit(2, [(1e6, 1e-4), (2e6, 1e-3)]).alpha == 0.0
  for ranks, points in [(2, [(4096, 1e-3)]), (2, [(4096, 1e-3), (4096, 2e-3)]), (1, [(1, 1.0), (2, 2.0)])]:
    with pytest.raises(ValueError):
      cost_model.fit(ranks, points)


def test_fit_weighs_every_size_alike():
  # Timings no line fits exactly (a busy machine): the relative fit's worst
  # miss is smaller than ordinary least squares', which the largest point sets.
  points = [(64 << 10, 0.030), (1 << 20, 0.032), (4 << 20, 0.040), (16 << 20, 0.060), (32 << 20, 0.140)]
  xs = [cost_model.allreduce_bytes(4, n) for n, _ in points]
  ys = [t for _, t in points]
  mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
  b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
  ols = Link(alpha=my - b * mx, beta=b)

  def worst(link):
    return max(abs(cost_model.allreduce_time(link, 4, n) / t - 1) for n, t in points)
  got = cost_model.fit(4, points)
  assert worst(got) < 0.25 < worst(ols)  # 0.20 against 0.30


def test_parse_cost_spec():
  model = cost_model.parse("300,5,100,1")
  assert model.intra.alpha == pytest.approx(3e-4) and model.intra.gbps == pytest.approx(5)
  assert model.inter.alpha == pytest.approx(1e-4) and model.inter.gbps == pytest.approx(1)


@pytest.mark.parametrize("bad", ["", "1,2,3", "1,2,3,4,5", "1,2,3,0", "1,2,3,-1", "a,b,c,d", "nan,1,1,1",
                                 "1,inf,1,1", "1;2;3;4"])
def test_parse_rejects(bad):
  with pytest.raises(ValueError):
    cost_model.parse(bad)


@pytest.mark.parametrize("world, model, want", [
    (TWO_BY_TWO, M, ("flat", 2e-3 + 0.1 + 1.0)),
    # a ring over 4 ranks: 1.5 n through each host link at the slower level's beta; hier sends n
    (TWO_BY_TWO, dataclasses.replace(M, flat="ring"), ("hier", 2 * (1e-3 + 0.05) + 2e-3 + 1.0)),
    # 64 x 8: the ring's 2(511/512) n per host link, its in-node edges running alongside, beats hier's
    # 2(63/64) n after two sequential in-node phases (its 1,022 step latencies are the simulation's business)
    (BIG, dataclasses.replace(M, flat="ring"), ("flat", 2e-3 + 2 * 511 / 512)),
    # one node: a ring in the node either way
    (ONE_NODE, dataclasses.replace(M, flat="ring"), ("flat", 1e-3 + 0.15)),
    # 4 x 1: the ring is the cross allreduce hier runs too; a tie
    (FOUR_BY_ONE, dataclasses.replace(M, flat="ring"), ("flat", 2e-3 + 1.5)),
])
def test_choose_against_a_ring(world, model, want):
  algorithm, seconds = cost_model.choose(model, world, N)
  assert algorithm == want[0]
  assert seconds == pytest.approx(want[1])
  if model.flat == "ring" and world.cross_size > 1:
    g = world.size
    assert cost_model.flat_time(model, world, N) == pytest.approx(2e-3 + 2 * (g - 1) / g * N * 1e-8)


def test_parse_flat_algorithm():
  assert cost_model.parse("300,5,100,1").flat == "mpi"
  assert cost_model.parse("300,5,100,1,mpi").flat == "mpi"
  assert cost_model.parse("300,5,100,1,ring").flat == "ring"
  for bad in ["300,5,100,1,nccl", "300,5,100,ring", "300,5,100,1,ring,ring"]:
    with pytest.raises(ValueError):
      cost_model.parse(bad)


class FakeHorovod:
  """What probe.measure calls: allreduce (Max over one rank: identity) and gloo_enabled."""
  Max = "max"

  def __init__(self, gloo=False):
    self.gloo = gloo

  def allreduce(self, x, op=None, name=None, process_set=None):
    return x

  def gloo_enabled(self):
    return self.gloo


@pytest.mark.parametrize("gloo, flat", [(False, "mpi"), (True, "ring")])
def test_probe_fits_the_inter_level_per_host_link(monkeypatch, gloo, flat):
  from comm import probe
  from comm.hierarchical import Groups
  intra, inter = Link(alpha=1e-3, beta=1e-9), Link(alpha=2e-3, beta=1e-8)
  world = World(size=8, local_size=4, cross_size=2)

  def timed(hvd, nbytes, process_set, name):
    # The 4 cross groups of a host run at once through its link; the node groups each on their own.
    if process_set == "cross":
      return cost_model.allreduce_time(inter, world.cross_size, nbytes, sharing=world.local_size)
    return cost_model.allreduce_time(intra, world.local_size, nbytes)

  monkeypatch.setattr(probe, "_median_seconds", timed)
  got = probe.measure(FakeHorovod(gloo), world, Groups(node="node", cross="cross"))
  assert got.intra.alpha == pytest.approx(intra.alpha) and got.intra.beta == pytest.approx(intra.beta)
  assert got.inter.alpha == pytest.approx(inter.alpha) and got.inter.beta == pytest.approx(inter.beta)
  assert got.flat == flat


@pytest.mark.parametrize("algorithm, want", [
    ("flat", 2e-3 + 0.1 + 1.0),                         # one allreduce over every rank
    ("horovod", 2e-3 + 0.1 + 1.0),                      # Horovod's own fusion: a flat buffer
    ("hier", 2 * (1e-3 + 0.05) + 2e-3 + 1.0),
    ("hybrid", 2e-3 + 0.1 + 1.0),                       # the cheaper: flat
])
def test_bucket_time_as_each_algorithm_sends_it(algorithm, want):
  assert cost_model.bucket_time(M, TWO_BY_TWO, algorithm, N) == pytest.approx(want)
