"""comm/topology.py: the World of each rank from what Horovod tells it, on tables; impossible layouts."""
import os

import pytest

import comm
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


class OneHost:
  """What Horovod tells rank `rank` of `size` ranks started on one host (horovodrun -np size),
  through the calls comm.init makes. It stands in for a 2-rank launch of train.py, which took some
  20 s to show this arithmetic on each rank."""

  def __init__(self, size, rank):
    self._size, self._rank, self.init_args = size, rank, None

  def init(self, process_sets=None):
    self.init_args = process_sets
    self.gloo_timeout = os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS")  # what Horovod's C++ reads at init
    self.mpi_yield = os.environ.get("OMPI_MCA_mpi_yield_when_idle")  # what MPI_Init reads

  def size(self):
    return self._size

  def rank(self):
    return self._rank

  def local_rank(self):
    return self._rank

  def local_size(self):
    return self._size

  def cross_rank(self):
    return 0

  def is_homogeneous(self):
    return True


@pytest.mark.parametrize("rank", [0, 1])
def test_ranks_per_node_that_does_not_divide_the_ranks_stops_every_rank(rank):
  # train.py's setup turns a ConfigError from comm.init into 'error: <sentence>' and exit status 2,
  # the path a bad --global_batch_size takes on every rank (tests/multiprocess/test_train.py).
  hvd = OneHost(2, rank)
  with pytest.raises(ConfigError) as e:
    comm.init(hvd, 3)
  assert hvd.init_args == "dynamic"  # Horovod started first: the sizes exist only after hvd.init
  assert str(e.value) == ("--ranks_per_node=3 does not divide the 2 ranks; choose a divisor of 2, "
                          "e.g. --ranks_per_node=1.")


@pytest.mark.parametrize("set_by_user, want", [(None, "120"), ("45", "45")])
def test_gloo_waits_120_s_for_a_peer_unless_the_user_said(monkeypatch, set_by_user, want):
  # Horovod's 30 s: a survivor re-forming the world with a host whose process was still starting up
  # aborted (uncaught gloo::IoException from the HTTP store's wait, exit 134); reproduced with a joiner
  # that slept 45 s before hvd.init, and gone with 120 s (docs/faults.md).
  monkeypatch.setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", set_by_user or "")  # restored after, whatever comm.init sets
  if set_by_user is None:
    monkeypatch.delenv("HOROVOD_GLOO_TIMEOUT_SECONDS")
  hvd = OneHost(2, 0)
  comm.init(hvd)
  assert hvd.gloo_timeout == want


@pytest.mark.parametrize("set_by_launcher, want", [(None, "1"), ("0", "0"), ("1", "1")])
def test_open_mpi_yields_when_idle_unless_the_launcher_said(monkeypatch, set_by_launcher, want):
  # Open MPI spins without yielding when it sees no more ranks than slots; make train's 2 ranks on 2 cores
  # lost steps' time to it (comm/__init__.py). mpirun's --mca mpi_yield_when_idle 0 arrives as the variable.
  monkeypatch.setenv("OMPI_MCA_mpi_yield_when_idle", set_by_launcher or "")  # restored after
  if set_by_launcher is None:
    monkeypatch.delenv("OMPI_MCA_mpi_yield_when_idle")
  hvd = OneHost(2, 0)
  comm.init(hvd)
  assert hvd.mpi_yield == want
