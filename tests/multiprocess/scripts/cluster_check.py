"""Run under horovodrun on the emulated cluster, 2 hosts x 2 ranks (ranks 0, 1 on
host 1): each rank sees its host's name and its local and cross rank; an
allreduce inside a host leaves the host's link idle (shared memory), one across
hosts crosses it; every sum is right. Prints 'OK rank N'.

  python tests/multiprocess/scripts/cluster_check.py CLUSTER IFACE
"""
import os
import socket
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

MB = 1 << 20
HOSTS = [hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])]


def link_tx_bytes(iface):
  """Bytes this host's network namespace has sent on its link to the switch."""
  with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as fh:
    return int(fh.read())


def barrier(process_set=hvd.global_process_set):
  hvd.allreduce(tf.zeros([1]), op=hvd.Sum, process_set=process_set, name=None)


def main():
  cluster, iface = sys.argv[1], sys.argv[2]
  hvd.init(process_sets=HOSTS)
  rank, host = hvd.rank(), hvd.cross_rank()
  assert hvd.size() == 4 and hvd.local_size() == 2 and hvd.cross_size() == 2, (hvd.size(), hvd.local_size())
  assert host == rank // 2 and hvd.local_rank() == rank % 2, (rank, host, hvd.local_rank())
  assert socket.gethostname() == f"{cluster}-h{host + 1}", socket.gethostname()
  my_host = HOSTS[host]
  x = tf.fill([8 * MB // 4], float(rank + 1))

  barrier()
  before = link_tx_bytes(iface)
  inside = hvd.allreduce(x, op=hvd.Sum, process_set=my_host, name="inside")
  barrier(my_host)
  inside_bytes = link_tx_bytes(iface) - before
  np.testing.assert_array_equal(inside.numpy()[:3], [2 * 2 * host + 3] * 3)  # (2h+1) + (2h+2)

  barrier()
  before = link_tx_bytes(iface)
  across = hvd.allreduce(x, op=hvd.Sum, name="across")
  barrier()
  across_bytes = link_tx_bytes(iface) - before
  np.testing.assert_array_equal(across.numpy()[:3], [10.0] * 3)

  # The ring sends 2(p-1)/p of 8 MB from every rank; a host sends at least its ranks' share to the other.
  assert inside_bytes < 1 * MB, f"an allreduce inside host {host} sent {inside_bytes} bytes on its link"
  assert across_bytes > 4 * MB, f"an allreduce across hosts sent only {across_bytes} bytes on host {host}'s link"
  print(f"OK rank {rank} host {socket.gethostname()} link bytes inside {inside_bytes} across {across_bytes}",
        flush=True)


if __name__ == "__main__":
  main()
