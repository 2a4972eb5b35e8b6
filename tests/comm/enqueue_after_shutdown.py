"""The program tests/comm/test_horovod_race.py runs (one rank, no launcher): a collective whose
enqueue is held by hold_enqueue.c between Horovod's shut_down check and its tensor queue while
hvd.shutdown() finalises the queue, and let go either then or once hvd.init() has started the next
world. Writes DIR/outcome.json:

  {"op": "failed" | "ran" | "orphaned" | "never held", "error": the op's error, "recognised":
   comm.sync.peer_failure's line for it, "again": an allreduce in the next world,
   "shim_timed_out": whether hold_enqueue.c let the thread go on its own bound (DIR/timed_out)}

"orphaned" (the op neither failed nor ran within OP_BOUND_S) ends the process at once with
os._exit(3): the held kernel's thread cannot be joined, nor the interpreter finalised past it.

argv: DIR (the directory hold_enqueue.c and this program share: held, release, timed_out), OP and
RELEASE.
  OP: allreduce (EnqueueTensorAllreduces -> AddToTensorQueueMulti, the multi-entry enqueue) or
      broadcast (EnqueueTensorBroadcast -> AddToTensorQueue, the single-entry one).
  RELEASE: shutdown (once hvd.shutdown() returned: the queue finalised, the background loop gone)
      or next-world (once the next hvd.init() returned as well: the same queue initialised again
      for a new world, which must still refuse an op that checked shut_down in the old one).
The controller is HOROVOD_CONTROLLER's (gloo or mpi). Under MPI this program initialises MPI
itself (Open MPI's singleton start, no mpirun), so Horovod neither owns nor finalises it and can
be initialised again, as Gloo's elastic worlds are.
"""
import ctypes
import json
import os
import sys
import threading
import time

import tensorflow as tf
import horovod.tensorflow as hvd

from comm.sync import peer_failure

HELD_BOUND_S = 60  # the op reaching the hold: TensorFlow traces the function first
OP_BOUND_S = 20    # the released op failing (patched) or running: a queue that is finalised never answers
OPS = ("allreduce", "broadcast")
RELEASES = ("shutdown", "next-world")
MPI_THREAD_MULTIPLE = 3  # Open MPI's mpi.h


def wait_for(path: str, bound: float) -> bool:
  start = time.time()
  while time.time() - start < bound:
    if os.path.exists(path):
      return True
    time.sleep(0.01)
  return False


def report(directory: str, **outcome) -> None:
  outcome["shim_timed_out"] = os.path.exists(os.path.join(directory, "timed_out"))
  with open(os.path.join(directory, "outcome.json"), "w") as fh:
    json.dump(outcome, fh)


def start_mpi():
  """Open MPI initialised here (thread-multiple, as Horovod asks), or None under Gloo."""
  if os.environ.get("HOROVOD_CONTROLLER") != "mpi":
    return None
  mpi = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)
  provided = ctypes.c_int()
  if mpi.MPI_Init_thread(None, None, MPI_THREAD_MULTIPLE, ctypes.byref(provided)) != 0:
    raise RuntimeError("MPI_Init_thread failed")
  return mpi


def main(directory: str, op: str, release: str) -> None:
  assert op in OPS and release in RELEASES, (op, release)
  mpi = start_mpi()
  hvd.init()

  @tf.function
  def probe(x):  # "race_probe": the name hold_enqueue.c waits for
    if op == "allreduce":
      return hvd.allreduce(x, name="race_probe")
    return hvd.broadcast(x, root_rank=0, name="race_probe")

  outcome = {}

  def call():
    try:
      outcome["value"] = probe(tf.constant([3.0])).numpy().tolist()
    except Exception as e:  # noqa: BLE001  (the shut-down error is what the patched Horovod gives)
      outcome["error"] = f"{type(e).__name__}: {e}"
      outcome["recognised"] = peer_failure(e)

  caller = threading.Thread(target=call, daemon=True)
  caller.start()
  if not wait_for(os.path.join(directory, "held"), HELD_BOUND_S):
    report(directory, op="never held")
    os._exit(2)
  # The enqueue is past the shut_down check; the background loop sets shut_down, finalises the
  # tensor queue (failing what is in it: nothing) and ends; join returns after all of it.
  hvd.shutdown()
  if release == "next-world":
    hvd.init()  # the global process set initialised again: its queue open to the new world
  open(os.path.join(directory, "release"), "w").close()
  caller.join(OP_BOUND_S)
  if caller.is_alive():
    report(directory, op="orphaned")
    os._exit(3)
  done = "failed" if "error" in outcome else "ran"
  if release == "shutdown":
    hvd.init()  # the next world (an elastic reset): the queue takes ops again
  again = hvd.allreduce(tf.constant([5.0]), name="after_reset").numpy().tolist()
  hvd.shutdown()
  if mpi is not None:
    mpi.MPI_Finalize()
  report(directory, op=done, error=outcome.get("error"), recognised=outcome.get("recognised"),
         value=outcome.get("value"), again=again)


if __name__ == "__main__":
  main(*sys.argv[1:4])
