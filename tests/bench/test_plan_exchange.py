"""bench/plan/exchange.py: one bucket's price on stated and cost-model clusters, the buckets, and the
part of the exchange that backprop does not hide."""
import pytest

from bench.plan import exchange
from bench.scaling import simulate

RESNET50_BYTES = 4 * 25_557_032  # models/gradient_sets.py's ResNet-50, float32


@pytest.mark.parametrize("ranks, seconds", [(256, 0.0366210478), (2048, 0.058935682275)])
def test_p40_prices_resnet50_as_the_time_to_accuracy_report(ranks, seconds):
  # results/time_to_accuracy.json's scale.exchange: the simulation splits the total, so the
  # total alone fixes the price.
  sizes = exchange.buckets([RESNET50_BYTES])
  assert sum(exchange.bucket_seconds(exchange.P40, ranks, sizes)) == pytest.approx(seconds, rel=1e-9)


@pytest.mark.parametrize("ranks", simulate.SIM_RANKS)
def test_p40_is_simulate_hybrid(ranks):
  tensors = [40 << 20, 30 << 20, 20 << 20, 7 << 20, 12345]
  mine = sum(exchange.bucket_seconds(exchange.P40, ranks, exchange.buckets(tensors)))
  assert mine == pytest.approx(simulate.simulate(simulate.P40, tensors, ranks=(ranks,))[ranks]["hybrid"])


@pytest.mark.parametrize("ranks, layout", [(1, (1, 1)), (4, (4, 1)), (8, (8, 1)), (16, (8, 2)), (2048, (8, 256))])
def test_layout_fills_a_node_first(ranks, layout):
  assert exchange.layout(exchange.P40, ranks) == layout


def test_ranks_that_do_not_fill_nodes_are_refused():
  with pytest.raises(ValueError, match="do not fill nodes of 3"):
    exchange.layout(exchange.cost_model_cluster("100,10,1000,1", 3), 4)


def test_one_rank_exchanges_nothing():
  assert exchange.bucket_seconds(exchange.P40, 1, [1 << 25, 1 << 20]) == [0.0, 0.0]


def test_cost_model_cluster_prices_the_cheaper_of_flat_and_hier():
  # 4 ranks a node, 2 nodes, 8 MB: flat 1 ms + 1.5 n / 10 GB/s + n / 1 GB/s = 10.2 ms; hier
  # 2 (0.1 ms + 0.75 n / 10 GB/s) + 1 ms + 4 (n / 4) / 1 GB/s = 10.4 ms.
  cluster = exchange.cost_model_cluster("100,10,1000,1", 4)
  assert cluster.bucket(4, 2, 8e6) == pytest.approx(0.0102)
  assert cluster.stated == {"ranks_per_node": 4, "cost model": "comm/cost_model.parse('100,10,1000,1')"}


def test_faster_links():
  sizes = exchange.buckets([RESNET50_BYTES])
  times = {name: sum(exchange.bucket_seconds(c, 2048, sizes)) for name, c in exchange.CLUSTERS.items()}
  assert sorted(times, key=times.get) == ["p40-400g", "p40-200g", "p40"]
  assert "40 GB/s" in exchange.CLUSTERS["p40-400g"].stated["inter"]
  assert exchange.CLUSTERS["p40-200g"].stated["intra"] == simulate.P40_STATED["intra"]


@pytest.mark.parametrize("sizes, seconds, backward, exposed", [
    ([1, 1], [1.0, 1.0], 0.0, 2.0),    # no overlap: all of it
    ([1, 1], [1.0, 1.0], 4.0, 1.0),    # ready at 2 and 4: only the last bucket is past backprop
    ([1, 1], [1.0, 1.0], 1.0, 1.5),    # ready at 0.5 and 1: the second waits for the first
    ([3, 1], [0.5, 0.5], 2.0, 0.5),
    ([1, 1, 1, 1], [0.1] * 4, 100.0, 0.1),
    ([], [], 1.0, 0.0),
])
def test_exposed(sizes, seconds, backward, exposed):
  assert exchange.exposed(sizes, seconds, backward) == pytest.approx(exposed)


def test_tensor_bytes_of_a_real_model():
  sizes = exchange.tensor_bytes("resnet8", 10, (28, 28, 1))  # 77,754 trainable parameters
  assert (len(sizes), sum(sizes)) == (29, 4 * 77_754)
