"""Horovod's elastic loop for --elastic runs (Gloo), recovering from every lost peer.

When a host is lost, `horovodrun --gloo --min-np M --host-discovery-script S` keeps the surviving
ranks; when a host comes back, its ranks join. Each time, every rank rolls back to the last commit
(training/state.RunState), Horovod re-forms the world, rank 0's state is sent to every rank and
training goes on from that commit in a new world (training/modes.Elastic: the epoch's rest dealt
again, the exchange rebuilt for the new node groups, the batch as the flags' policy says).

Horovod's elastic.run recovers only from errors naming HorovodAllreduce/Allgather/Broadcast, so a
failure inside a grouped allreduce or a reduce-scatter (what flat and hier call) would end the job;
run() here recovers from every error comm.sync.peer_failure recognises. (Horovod 0.28.1's own
TensorFlowKerasState predates Keras 3, hence RunState.)
"""
from horovod.common.elastic import run_fn

from comm import hierarchical
from training.state import peer_loss_rolls_back


def run(hvd, fn, before_reset=lambda: None):
  """fn(state) under Horovod's elastic loop: a lost peer (any error comm.sync.peer_failure
  recognises) rolls every survivor back to the last commit; a host added or removed by the
  discovery script interrupts at the next commit; after either, Horovod is started again for
  the new world and fn runs again from the synchronised state. before_reset() runs on each
  rank first, in the old world, on the committed state (train.py: rank 0 checkpoints it, so a
  world that never re-forms, fewer than --min-np ranks, leaves it resumable)."""
  def recovering(state):
    with peer_loss_rolls_back():
      return fn(state)

  def reset():
    before_reset()
    hvd.shutdown()
    hierarchical.register.cache_clear()  # the old world's process sets are gone with it
    hvd.init(process_sets="dynamic")

  return run_fn(recovering, reset)
