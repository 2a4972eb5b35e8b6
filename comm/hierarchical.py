"""Hierarchical allreduce from Horovod's collectives on process sets (Jia et al. 2018, sec. 4.2).

Reduce-scatter inside the node, allreduce across nodes of each rank's
1/local_size share, allgather inside the node. Horovod's own hierarchical
allreduce exists only for GPU tensors over NCCL; this one runs on every
transport Horovod has (MPI, Gloo, NCCL), because it only calls Horovod.
"""
import dataclasses
import functools

import tensorflow as tf

from comm.topology import World


@dataclasses.dataclass(frozen=True)
class Groups:
  """This rank's two process sets: its node, and its peers (same local rank) on other nodes."""
  node: object   # hvd.ProcessSet
  cross: object  # hvd.ProcessSet


@functools.lru_cache(maxsize=None)
def register(hvd, world: World) -> Groups:
  """Add the node and cross process sets (every rank, same order) and return this rank's.

  Horovod: dynamic process sets are added collectively, each at most once per
  job, hence the cache; a group that is the whole world is the global set,
  and a group of one rank is never used (its phase is skipped).
  """
  def add(ranks_lists, mine):
    chosen = hvd.global_process_set
    for ranks in ranks_lists:
      if 1 < len(ranks) < world.size:
        ps = hvd.add_process_set(ranks)
        if world.rank in ranks:
          chosen = ps
    return chosen if len(ranks_lists[mine]) > 1 else None

  node = add(world.node_ranks(), world.cross_rank)
  cross = add(world.cross_ranks(), world.local_rank)
  return Groups(node=node, cross=cross)


def allreduce_mean(hvd, buffer: tf.Tensor, world: World, groups: Groups, name: str,
                   after: tf.Tensor | None = None) -> tf.Tensor:
  """The mean over all ranks of a 1-D buffer (static length), in three phases.

  The buffer is zero-padded to a multiple of local_size so the reduce-scatter
  gives every rank an equal share; sums travel, and the mean is taken once at
  the end. With `after`, the reduce-scatter is enqueued only once that tensor
  exists (see serial_reducescatter).
  """
  n = buffer.shape[0]
  local = world.local_size
  x = buffer
  pad = -n % local
  if pad:
    x = tf.concat([x, tf.zeros([pad], x.dtype)], axis=0)
  if groups.node is not None:
    if after is not None:
      with tf.control_dependencies([after]):
        x = tf.identity(x)
    if hvd.gloo_enabled():
      # Horovod 0.28.1's Gloo reduce-scatter (see serial_reducescatter): even one
      # at a time it gave a wrong AlexNet tensor once under load (CI, 2026-11-29),
      # so on Gloo the node sums the whole buffer and each rank keeps its share,
      # the share reducescatter would give it (rank order within the node).
      x = hvd.allreduce(x, op=hvd.Sum, process_set=groups.node, name=f"{name}_rs")
      share = x.shape[0] // local
      x = x[world.local_rank * share:(world.local_rank + 1) * share]
    else:
      x = hvd.reducescatter(x, op=hvd.Sum, process_set=groups.node, name=f"{name}_rs")
  if groups.cross is not None:
    x = hvd.allreduce(x, op=hvd.Sum, process_set=groups.cross, name=f"{name}_ar")
  if groups.node is not None:
    x = hvd.allgather(x, process_set=groups.node, name=f"{name}_ag")
  return x[:n] * tf.cast(1.0 / world.size, x.dtype)


def serial_reducescatter(hvd) -> bool:
  """Whether reduce-scatters must reach Horovod one at a time: on Gloo, yes.

  Horovod 0.28.1's Gloo reduce-scatter sometimes returns wrong values when its
  runtime fuses several pending ones into its fusion buffer: 4 of 40 steps of
  8 concurrent reduce-scatters on 2 ranks with the 2 cores busy
  (tests/multiprocess/scripts/checks.py reducescatter 40 raw), and 7 of 40 through hier before this
  (the CI failure of an AlexNet check). A lone one (its own temporary
  buffer), MPI's fused one and Gloo's with HOROVOD_FUSION_THRESHOLD=0 were
  right in every step, so on Gloo each hier bucket waits for the previous
  one, and Horovod never has two to fuse. That was not enough: one CI run
  still got a wrong AlexNet tensor through hier on Gloo, so allreduce_mean
  no longer calls Gloo's reduce-scatter at all; the buckets still go one at a
  time, as the guard test was measured with.
  """
  return hvd.gloo_enabled()
