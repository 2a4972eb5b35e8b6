"""Everything between ranks: start-up, the gradient exchange, broadcast and agreement."""
from comm.topology import World, from_horovod_values


def init(hvd, ranks_per_node: int = 0) -> World:
  """Initialise Horovod (the one hvd.init of a process) and return the validated World.

  Horovod: process sets are added after start-up ("dynamic"), because the node
  groups of hierarchical allreduce depend on the world size, which only
  hvd.init reveals; Open MPI cannot be initialised twice, so init-shutdown-init
  is not an option. Raises ConfigError on every rank for an impossible topology.
  """
  hvd.init(process_sets="dynamic")
  # Horovod's own figures only: no TensorFlow op here, so train.py can still
  # set TensorFlow's thread pools after this call.
  return world(hvd, ranks_per_node)


def world(hvd, ranks_per_node: int = 0) -> World:
  """The World Horovod has now (--elastic: after a change of hosts, the new one)."""
  return from_horovod_values(hvd.size(), hvd.rank(), hvd.local_rank(), hvd.local_size(),
                             hvd.cross_rank(), hvd.is_homogeneous(), ranks_per_node)
