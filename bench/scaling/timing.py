"""How the worker times: the sync before a timing, the slowest rank's seconds, the bytes a host
sent on its link, and the balanced order in which algorithms take turns."""
import tensorflow as tf

from bench.scaling.settings import MB


def turn_order(turn: int, n: int) -> list[int]:
  """The order of n algorithms (n even) in turn `turn`: a Williams balanced Latin square.

  Over n turns each algorithm runs once in every place AND right after every
  other once, so neither the first place nor the predecessor favours one.
  Rotating one fixed order balanced the places only: hybrid always ran right
  after hier, and identical plans (flat, hybrid) still came out 10-15% apart
  in the millisecond rows.
  """
  first = [0] + [(k + 1) // 2 if k % 2 else n - k // 2 for k in range(1, n)]
  return [(x + turn) % n for x in first]


def sync(hvd) -> None:
  """Start every rank's next timing together: a small allreduce, its result fetched."""
  hvd.allreduce(tf.zeros([1]), name="bench_sync").numpy()


def slowest(hvd, seconds: list[float]) -> list[float]:
  """Per repeat, the slowest rank's seconds: an exchange ends when its last rank has the result."""
  return hvd.allreduce(tf.constant(seconds, tf.float64), op=hvd.Max, name=None).numpy().tolist()


def link_bytes(iface: str) -> int:
  """Bytes this host has sent on its link so far (0 where the interface does not exist: one host)."""
  try:
    with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as fh:
      return int(fh.read())
  except OSError:
    return 0


def host_link_mb(hvd, world, delta: int) -> float:
  """Mean over hosts of the MB each host sent on its link, from each host's first rank's `delta` bytes."""
  lead = world.local_rank == 0
  total = hvd.allreduce(tf.constant([delta if lead else 0, 1 if lead else 0], tf.float64),
                        op=hvd.Sum, name=None).numpy()
  return float(total[0] / total[1] / MB)
