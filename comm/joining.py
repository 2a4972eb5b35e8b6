"""A rank started ahead of its world: its slot taken from the elastic driver before hvd.init.

make setup's scripts/horovod/join_ahead.patch has Horovod's elastic driver start a returning host's
process as soon as the host is listed, and hold the running workers' notification until that process
asks for its slot here: its imports (4.5-19 s of TensorFlow and Horovod on 2 loaded cores) are then
done while the others still train, instead of while they wait in Gloo's rendezvous for it.
"""
import os
import time
import urllib.request

from progress import emit

AHEAD = "HOROVOD_JOIN_AHEAD_SLOT"  # set by the patched driver in a process it starts ahead
# The slot as Horovod's rank_and_size answers it (horovod/runner/common/util/hosts.py, SlotInfo).
SLOT_FIELDS = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
               "HOROVOD_CROSS_SIZE")
# The driver answers once the workers' reset assigned slots: at their next commit, or never if the job
# ends first (then -1). Horovod's own bound on an elastic world's forming (HOROVOD_ELASTIC_TIMEOUT).
WAIT_S = 600


class RemovedBeforeJoining(Exception):
  """The host left the job (or the job ended) before this process's world formed: nothing to do."""


def take_slot(environ=os.environ, wait_s: float | None = None) -> bool:
  """Wait for the slot of a process started ahead (join_slot at the driver's rendezvous server) and put
  it in environ as Horovod reads it at hvd.init; False (environ untouched) for any other process."""
  if environ.get(AHEAD) != "1":
    return False
  host, local_rank = environ["HOROVOD_HOSTNAME"], environ["HOROVOD_LOCAL_RANK"]
  url = (f"http://{environ['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:{environ['HOROVOD_GLOO_RENDEZVOUS_PORT']}"
         f"/join_slot/{host}:{local_rank}")
  wait_s = wait_s or float(environ.get("HOROVOD_ELASTIC_TIMEOUT", WAIT_S))
  asked = time.time()
  with urllib.request.urlopen(url, timeout=wait_s) as answer:
    slot = answer.read().decode("ascii").split(",")
  if len(slot) != len(SLOT_FIELDS) or not all(v.lstrip("-").isdigit() for v in slot):
    raise RuntimeError(f"the elastic driver answered join_slot for {host}:{local_rank} with {','.join(slot)!r}, "
                       "not a slot: is its Horovod patched (make setup)?")
  if int(slot[0]) < 0:
    raise RemovedBeforeJoining(f"{host}[{local_rank}] was started ahead of its world but its host left the job "
                               "(or the job ended) before the world formed: nothing to do")
  environ.update(zip(SLOT_FIELDS, slot))
  del environ[AHEAD]  # joined: a later init of this process is a reset like any worker's
  emit(f"joining: {host}[{local_rank}] was started ahead of its world; rank {slot[0]} of {slot[1]} after "
       f"{time.time() - asked:.1f} s waiting for the others' reset")
  return True
