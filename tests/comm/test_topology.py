"""comm/topology.py: the World of each rank from what Horovod tells it, on tables; impossible layouts."""
import pytest

from comm.topology import World, from_horovod_values
from flags.config import ConfigError


def world(rank, rpn=0, size=4, local_rank=None, local_size=None, cross_rank=0, homogeneous=True):
  """from_horovod_values for one rank; by default one host holding every rank."""
  local_size = size if local_size is None else local_size
  local_rank = rank if local_rank is None else local_rank
  return from_horovod_values(size, rank, local_rank, local_size, cross_rank, homogeneous, rpn)


@pytest.mark.parametrize("got, want", [
    (world(3, rpn=2), World(size=4, rank=3, local_size=2, local_rank=1, cross_size=2, cross_rank=1)),
    (world(2), World(size=4, rank=2, local_size=4, local_rank=2, cross_size=1, cross_rank=0)),
    (world(5, size=8, local_rank=1, local_size=4, cross_rank=1),
     World(size=8, rank=5, local_size=4, local_rank=1, cross_size=2, cross_rank=1)),
    (world(1, rpn=1, size=2), World(size=2, rank=1, local_size=1, local_rank=0, cross_size=2, cross_rank=1)),
    # --ranks_per_node overrides an uneven host layout
    (world(0, rpn=2, homogeneous=False), World(size=4, rank=0, local_size=2, local_rank=0, cross_size=2)),
])
def test_world_from_horovod_values(got, want):
  assert got == want


@pytest.mark.parametrize("kwargs, needle", [
    (dict(rank=0, size=2, rpn=3), "--ranks_per_node=3 does not divide the 2 ranks"),
    (dict(rank=0, size=6, rpn=4), "e.g. --ranks_per_node=3"),
    (dict(rank=0, local_size=3, homogeneous=False), "different numbers of ranks"),
    (dict(rank=0, size=2, rpn=-1), "--ranks_per_node=-1 must be 0"),
    # round-robin placement: rank 1 is local rank 0 of the second host
    (dict(rank=1, local_rank=0, local_size=2, cross_rank=1), "not numbered host by host"),
])
def test_impossible_topology_is_one_sentence(kwargs, needle):
  with pytest.raises(ConfigError) as e:
    world(**kwargs)
  assert needle in str(e.value)


def test_groups_of_a_world():
  w = World(size=6, rank=4, local_size=3, local_rank=1, cross_size=2, cross_rank=1)
  assert w.node_ranks() == [[0, 1, 2], [3, 4, 5]]
  assert w.cross_ranks() == [[0, 3], [1, 4], [2, 5]]
