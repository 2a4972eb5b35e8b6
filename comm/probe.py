"""A short start-up measurement of each level's latency and bandwidth, for hybrid's cost model."""
import time

import numpy as np
import tensorflow as tf

from comm.cost_model import CostModel, Link, fit
from comm.hierarchical import Groups
from comm.topology import World

SMALL_BYTES = 4 << 10   # latency-bound
LARGE_BYTES = 8 << 20   # bandwidth-bound, yet a fraction of a second on a busy 2-core host
REPEATS = 5


def _median_seconds(hvd, nbytes: int, process_set, name: str) -> float:
  x = tf.zeros([nbytes // 4], tf.float32)
  # One name for the warm-up and every repeat, as a training step reuses its
  # names: Horovod's response cache then answers, as it does in training. A
  # new name per call cost more than a whole small exchange in bench-scaling.
  hvd.allreduce(x, op=hvd.Sum, process_set=process_set, name=name).numpy()
  times = []
  for _ in range(REPEATS):
    start = time.perf_counter()
    hvd.allreduce(x, op=hvd.Sum, process_set=process_set, name=name).numpy()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def measure(hvd, world: World, groups: Groups) -> CostModel:
  """The CostModel of this job from a few timed allreduces per level (well under a second idle).

  Every rank times its own groups, so all groups of a level run at once, as in
  hier's phases: inside a node each rank has its own bandwidth, across nodes
  the local_size cross groups of a host share its link, so the inter beta is
  fitted per host link (comm/cost_model.py's units). Under Gloo flat is a
  ring over every rank, under MPI Open MPI's halving/doubling (model.flat).
  The slowest rank's figures (allreduce Max) are kept, so all ranks hold the
  same model and choose the same plan. A level with one rank per group is
  never used and gets a zero cost.
  """
  def level(process_set, ranks, name):
    if process_set is None:
      return [0.0, 0.0]
    return [_median_seconds(hvd, SMALL_BYTES, process_set, f"{name}_s"),
            _median_seconds(hvd, LARGE_BYTES, process_set, f"{name}_l")]

  # Levels in turn, not together: the probe must see each level alone.
  node = level(groups.node, world.local_size, "probe_node")
  cross = level(groups.cross, world.cross_size, "probe_cross")
  times = hvd.allreduce(tf.constant(node + cross, tf.float64), op=hvd.Max, name="probe_times").numpy()

  def link(ranks, sharing, t_small, t_large):
    if ranks <= 1:
      return Link(0.0, 0.0)
    return fit(ranks, [(SMALL_BYTES, t_small), (LARGE_BYTES, t_large)], sharing)

  return CostModel(intra=link(world.local_size, 1, *times[:2]),
                   inter=link(world.cross_size, world.local_size, *times[2:]),
                   flat="ring" if hvd.gloo_enabled() else "mpi")
