"""Everything between ranks: start-up, the gradient exchange, broadcast and agreement."""
import os

from comm import joining
from comm.topology import World, from_horovod_values

# Gloo's bound on its rendezvous and on each wait for a peer (HOROVOD_GLOO_TIMEOUT_SECONDS; Horovod's
# default 30 s). Horovod 0.28.1 sets up Gloo's contexts outside the try of its background thread
# (horovod/common/operations.cc, BackgroundThreadLoop), so a rendezvous that times out is an uncaught
# exception there: the process aborts (exit 134). Under --elastic a survivor enters the new world's
# rendezvous as soon as a host is listed again, while the joining process is still importing
# TensorFlow. Reproduced (horovodrun --gloo elastic, a joiner that slept 45 s before hvd.init): the
# survivor aborted with "http_store.cc:54 Wait timeout after 30 seconds", and with 120 s the world of
# two formed. The same exit 134 of the survivor at a host's return, with the 2 cores busy, ended 2 of
# 60 lost-host launches of make faults (its message not kept then) and test_elastic once. 120 s covers
# the 63 s joins seen under that load and keeps a hung peer's detection under --stall_timeout's 300 s.
# A value the user set is kept.
GLOO_TIMEOUT_S = 120
# Open MPI's ranks poll without yielding unless it sees more ranks than slots, and Horovod's background
# thread waits in MPI calls every cycle: where TensorFlow's threads already fill the cores (make train's 2
# ranks on 2 cores), that spinning takes their time. make train, 3 pairs in turn (2026-12-08, dd87126):
# 27.0 s wall median (26.0-31.5), 10.3-12.0 s of steps, without; 21.1 s (19.9-24.4), 8.3-10.2 s, yielding.
# Not measured on dedicated cores (sched_yield with nothing else to run returns at once). Read by MPI_Init
# from the environment; a launcher's --mca mpi_yield_when_idle 0 sets the same variable and is kept.
MPI_YIELD = ("OMPI_MCA_mpi_yield_when_idle", "1")


def init(hvd, ranks_per_node: int = 0) -> World:
  """Initialise Horovod (the one hvd.init of a process) and return the validated World.

  Horovod: process sets are added after start-up ("dynamic"), because the node
  groups of hierarchical allreduce depend on the world size, which only
  hvd.init reveals; Open MPI cannot be initialised twice, so init-shutdown-init
  is not an option. Raises ConfigError on every rank for an impossible topology, and
  joining.RemovedBeforeJoining in a rank started ahead of a world its host left before it formed.
  """
  os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(GLOO_TIMEOUT_S))  # read at each init, elastic's too
  os.environ.setdefault(*MPI_YIELD)
  joining.take_slot()  # a rank the elastic driver started ahead of its world waits here for its slot
  hvd.init(process_sets="dynamic")
  # Horovod's own figures only: no TensorFlow op here, so train.py can still
  # set TensorFlow's thread pools after this call.
  return world(hvd, ranks_per_node)


def world(hvd, ranks_per_node: int = 0) -> World:
  """The World Horovod has now (--elastic: after a change of hosts, the new one)."""
  return from_horovod_values(hvd.size(), hvd.rank(), hvd.local_rank(), hvd.local_size(),
                             hvd.cross_rank(), hvd.is_homogeneous(), ranks_per_node)
