"""Short start-up measurements the exchange's choices are priced with: each level's latency and
bandwidth (hybrid's cost model), the one allreduce over every rank (flat's and Horovod's, for
--compression=auto), and PowerSGD's encode and decode of each matrix (auto)."""
import math
import statistics
import time

import numpy as np
import tensorflow as tf

from comm import powersgd
from comm.cost_model import CostModel, Link, allreduce_bytes, fit
from comm.hierarchical import Groups
from comm.topology import World

SMALL_BYTES = 4 << 10   # latency-bound
LARGE_BYTES = 8 << 20   # bandwidth-bound, yet a fraction of a second on a busy 2-core host
REPEATS = 5


def large_bytes(gradient_bytes: int = 0) -> int:
  """The bandwidth-bound probe's size: LARGE_BYTES, or the model's gradients where they are smaller
  (at least 64 KB, well past latency-bound): the sizes the exchange will send are the ones to time.
  8 MB six times (a warm-up and 5 repeats) took 25-27 s of a 124 s time-to-target run over a 20 Mbit/s
  link with ResNet-8's 0.3 MB of gradients, and each elastic world pays it again."""
  return LARGE_BYTES if not gradient_bytes else int(min(LARGE_BYTES, max(64 << 10, gradient_bytes)))


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


def measure(hvd, world: World, groups: Groups, large: int = LARGE_BYTES) -> CostModel:
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
            _median_seconds(hvd, large, process_set, f"{name}_l")]

  # Levels in turn, not together: the probe must see each level alone.
  node = level(groups.node, world.local_size, "probe_node")
  cross = level(groups.cross, world.cross_size, "probe_cross")
  times = hvd.allreduce(tf.constant(node + cross, tf.float64), op=hvd.Max, name="probe_times").numpy()

  def link(ranks, sharing, t_small, t_large):
    if ranks <= 1:
      return Link(0.0, 0.0)
    return fit(ranks, [(SMALL_BYTES, t_small), (large, t_large)], sharing)

  return CostModel(intra=link(world.local_size, 1, *times[:2]),
                   inter=link(world.cross_size, world.local_size, *times[2:]),
                   flat="ring" if hvd.gloo_enabled() else "mpi")


def measure_flat(hvd, world: World, large: int = LARGE_BYTES) -> CostModel:
  """The CostModel of one allreduce over every rank (flat's buckets, and the buffers Horovod's own
  fusion sends under --allreduce=horovod), timed as such: what --compression=auto prices them by
  when no --hybrid_cost is given. No process sets needed, so flat and horovod register none.

  One node: the intra Link, which flat_time uses there; several: flat_call, flat's call measured
  across hosts. The slowest rank's figures (allreduce Max), as measure's, so every rank holds the
  same model. One rank: nothing to exchange, zero cost.
  """
  if world.size <= 1:
    return CostModel(intra=Link(0.0, 0.0), inter=Link(0.0, 0.0))
  own = [_median_seconds(hvd, SMALL_BYTES, hvd.global_process_set, "probe_flat_s"),
         _median_seconds(hvd, large, hvd.global_process_set, "probe_flat_l")]
  t_small, t_large = hvd.allreduce(tf.constant(own, tf.float64), op=hvd.Max, name="probe_flat_times").numpy()
  link = fit(world.size, [(SMALL_BYTES, t_small), (large, t_large)])
  if world.cross_size == 1:
    return CostModel(intra=link, inter=Link(0.0, 0.0))
  # flat_call's beta is per byte of the buffer, fit's per byte a member sends: 2(g-1)/g of it.
  return CostModel(intra=Link(0.0, 0.0), inter=Link(0.0, 0.0),
                   flat_call=Link(link.alpha, allreduce_bytes(world.size, 1.0) * link.beta))


ENCODE_REPEATS = 3
# ResNet-50 at 224, rank 4: its 21 distinct matrices took 2.0 s here, tracing included; ResNet-20's 21
# took 3 s with 2 ranks on the 2 cores and another job beside them.
ENCODE_BUDGET_S = 5.0


def encode_seconds(views, rank: int, wire: tf.DType = tf.float32, error_feedback: bool = True,
                   repeats: int = ENCODE_REPEATS, budget_s: float = ENCODE_BUDGET_S) -> list[float]:
  """Per gradient, the seconds this rank spends on PowerSGD's own work for it at `rank`: one step
  of compute_p, compute_q, decompress and apply with the allreduces left out, as the training step
  runs it (in a tf.function). 0.0 where views (comm/powersgd.plan's) has None, sent whole.

  Random data, each distinct (n, m) timed once: the median of `repeats` after a first, traced,
  run. Largest first, until budget_s is spent; a view the budget left unmeasured gets inf (never
  compressed), so the largest, which matter most, are the ones measured. Each rank measures its
  own: agree on them (the slowest rank's) before choosing.
  """
  distinct = sorted({view for view in views if view}, key=lambda v: v[0] * v[1], reverse=True)
  seconds, start = {}, time.perf_counter()
  for view in distinct:
    if time.perf_counter() - start > budget_s:
      break
    seconds[view] = _encode_median(view, rank, wire, error_feedback, repeats)
  return [seconds.get(view, math.inf) if view else 0.0 for view in views]


def _encode_median(view: tuple[int, int], rank: int, wire: tf.DType, error_feedback: bool, repeats: int) -> float:
  one = powersgd.PowerSGD([view], rank=rank, min_ratio=1.0, error_feedback=error_feedback, wire=wire)

  @tf.function
  def step(grad):
    out, update = one([grad], lambda tensors: tensors)  # the allreduce-mean of one rank: itself
    one.apply(update)
    return out[0]

  grad = tf.random.stateless_normal(view, seed=(0, 0))
  step(grad)  # traced here, as the training step is before its first timed step
  times = []
  for _ in range(repeats):
    begin = time.perf_counter()
    step(grad)  # synchronous on CPU: returns once every op has run
    times.append(time.perf_counter() - begin)
  return statistics.median(times)
