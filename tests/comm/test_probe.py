"""comm/probe.py's measurements for --compression=auto: encode timing (what, and its time bound) and
the flat allreduce's fit."""
import math

import pytest
import tensorflow as tf

from comm import cost_model, probe
from comm.cost_model import Link
from comm.topology import World


def test_encode_seconds_per_gradient_each_distinct_matrix_timed_once():
  views = [(64, 32), None, (64, 32), (16, 16)]
  # No budget here (the next test has it): with both cores busy the first view's trace and timing took
  # longer than the default budget once, which left (16, 16) unmeasured (inf), as the budget should.
  seconds = probe.encode_seconds(views, rank=2, repeats=2, budget_s=math.inf)
  assert seconds[1] == 0.0 and seconds[0] == seconds[2]  # sent whole: no work; the same shape: one timing
  assert all(0 < s < math.inf for s in (seconds[0], seconds[3]))


def test_encode_seconds_leaves_what_the_budget_did_not_reach_unmeasured():
  # A spent budget measures nothing: inf, which the choice never compresses (comm/compression_choice.py).
  assert probe.encode_seconds([(64, 32), None], rank=2, wire=tf.float16, budget_s=-1.0) == [math.inf, 0.0]


class OneCall:
  """What probe.measure_flat calls of Horovod: the global set, and allreduce (Max over one rank)."""
  Max, global_process_set = "max", "global"

  def allreduce(self, x, op=None, name=None):
    return x


@pytest.mark.parametrize("world", [World(size=4, local_size=4, cross_size=1),
                                   World(size=4, local_size=2, cross_size=2)])
def test_measure_flat_prices_flat_as_timed(monkeypatch, world):
  # A flat allreduce timed at 0.5 ms + 2(g-1)/g n at 1 GB/s: flat_time gives it back at any size,
  # in one node (the intra Link) and across hosts (flat_call).
  truth = Link(alpha=5e-4, beta=1e-9)
  monkeypatch.setattr(probe, "_median_seconds",
                      lambda hvd, nbytes, process_set, name: cost_model.allreduce_time(truth, world.size, nbytes))
  model = probe.measure_flat(OneCall(), world)
  for nbytes in (1e3, 1e6, 1e8):
    assert cost_model.flat_time(model, world, nbytes) == pytest.approx(cost_model.allreduce_time(truth, 4, nbytes))
  assert cost_model.flat_time(probe.measure_flat(OneCall(), World()), World(), 1e8) == 0.0


@pytest.mark.parametrize("gradient_bytes, want", [
    (0, probe.LARGE_BYTES),                  # not given: the default
    (311_000, 311_000),                      # ResNet-8's gradients: what the exchange sends, not 8 MB
    (1_000, 64 << 10),                       # still bandwidth-bound
    (102_000_000, probe.LARGE_BYTES),        # ResNet-50's: the default bounds it
])
def test_the_large_probe_is_the_models_gradients_where_they_are_smaller(gradient_bytes, want):
  assert probe.large_bytes(gradient_bytes) == want
