"""Where this process sits among the ranks: a pure description, no Horovod calls."""
import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class World:
  """The ranks of one job.

  size: all ranks; rank: this one; local_size/local_rank: the ranks on this
  node; cross_size: the number of nodes (ranks with the same local rank).
  """
  size: int = 1
  rank: int = 0
  local_size: int = 1
  local_rank: int = 0
  cross_size: int = 1

  @property
  def is_chief(self) -> bool:
    """Rank 0 alone writes logs, summaries and checkpoints."""
    return self.rank == 0

  def threads_per_rank(self, cores: int | None = None) -> int:
    """CPU threads one rank may use so the node's ranks do not oversubscribe it."""
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, cores // self.local_size)


def from_horovod(hvd) -> World:
  """The World of an initialised horovod.tensorflow module."""
  return World(size=hvd.size(), rank=hvd.rank(), local_size=hvd.local_size(),
               local_rank=hvd.local_rank(), cross_size=hvd.cross_size())
