"""Where this process sits among the ranks: a pure description, no Horovod calls."""
import dataclasses
import os

from flags.config import ConfigError


@dataclasses.dataclass(frozen=True)
class World:
  """The ranks of one job, node by node.

  size: all ranks; rank: this one; local_size/local_rank: the ranks on this
  node; cross_size/cross_rank: the number of nodes and this rank's node.
  Ranks are laid out node by node: rank = cross_rank * local_size + local_rank.
  """
  size: int = 1
  rank: int = 0
  local_size: int = 1
  local_rank: int = 0
  cross_size: int = 1
  cross_rank: int = 0

  @property
  def is_chief(self) -> bool:
    """Rank 0 alone writes logs, summaries and checkpoints."""
    return self.rank == 0

  def threads_per_rank(self, cores: int | None = None) -> int:
    """CPU threads one rank may use so the node's ranks do not oversubscribe it."""
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, cores // self.local_size)

  def node_ranks(self) -> list[list[int]]:
    """The ranks of each node, node by node (the groups of the in-node phases)."""
    return [list(range(n * self.local_size, (n + 1) * self.local_size)) for n in range(self.cross_size)]

  def cross_ranks(self) -> list[list[int]]:
    """For each local rank, the ranks holding it on every node (the groups of the cross-node phase)."""
    return [list(range(l, self.size, self.local_size)) for l in range(self.local_size)]


def from_horovod_values(size: int, rank: int, local_rank: int, local_size: int, cross_rank: int,
                        homogeneous: bool, ranks_per_node: int = 0) -> World:
  """The World of one rank from what Horovod tells it (hvd.size(), ..., hvd.is_homogeneous()).

  ranks_per_node > 0 replaces the hosts' layout by nodes of that many
  consecutive ranks (emulating several nodes on one host). Raises ConfigError
  (one sentence naming the fix) when the layout is impossible. Every rank
  reaches the same verdict on the flag and on homogeneity (Horovod computes it
  for all); ranks not numbered host by host are seen by the ranks they
  misplace, and mpirun stops the rest when those exit.
  """
  if ranks_per_node < 0:
    raise ConfigError(f"--ranks_per_node={ranks_per_node} must be 0 (the hosts' own layout) "
                      "or a positive number of ranks per node, e.g. --ranks_per_node=2.")
  if ranks_per_node:
    if size % ranks_per_node:
      raise ConfigError(f"--ranks_per_node={ranks_per_node} does not divide the {size} ranks; "
                        f"choose a divisor of {size}, e.g. --ranks_per_node={_divisor(size)}.")
    local = ranks_per_node
  else:
    if not homogeneous:
      raise ConfigError("the hosts run different numbers of ranks; start the same number on every "
                        "host (horovodrun -H a:4,b:4), or pass --ranks_per_node to set the node size.")
    local = local_size
    if rank != cross_rank * local + local_rank:
      raise ConfigError("the ranks are not numbered host by host; list each host's slots "
                        "together (horovodrun -H a:4,b:4), or pass --ranks_per_node.")
  return World(size=size, rank=rank, local_size=local, local_rank=rank % local,
               cross_size=size // local, cross_rank=rank // local)


def _divisor(n: int) -> int:
  """The largest proper divisor of n (1 for primes), a sensible suggestion."""
  return next((d for d in range(n // 2, 0, -1) if n % d == 0), 1)
