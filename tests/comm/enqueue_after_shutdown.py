"""The program tests/comm/test_horovod_race.py runs (one Gloo rank, no launcher): an allreduce
whose enqueue is held by hold_enqueue.c between Horovod's shut_down check and its tensor queue
while hvd.shutdown() finalises the queue, then let go. Writes DIR/outcome.json:

  {"op": "failed" | "ran" | "orphaned" | "never held", "error": the op's error, "recognised":
   comm.sync.peer_failure's line for it, "again": the allreduce after hvd.init() again}

"orphaned" (the op neither failed nor ran within OP_BOUND_S) ends the process at once with
os._exit(3): the held kernel's thread cannot be joined, nor the interpreter finalised past it.

argv[1]: DIR, the directory hold_enqueue.c and this program share (held, release).
"""
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


def wait_for(path: str, bound: float) -> bool:
  start = time.time()
  while time.time() - start < bound:
    if os.path.exists(path):
      return True
    time.sleep(0.01)
  return False


def report(directory: str, **outcome) -> None:
  with open(os.path.join(directory, "outcome.json"), "w") as fh:
    json.dump(outcome, fh)


def main(directory: str) -> None:
  hvd.init()

  @tf.function
  def probe(x):
    return hvd.allreduce(x, name="race_probe")  # the name hold_enqueue.c waits for

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
  open(os.path.join(directory, "release"), "w").close()
  caller.join(OP_BOUND_S)
  if caller.is_alive():
    report(directory, op="orphaned")
    os._exit(3)
  op = "failed" if "error" in outcome else "ran"
  # The next world (an elastic reset): the queue takes ops again.
  hvd.init()
  again = hvd.allreduce(tf.constant([5.0]), name="after_reset").numpy().tolist()
  hvd.shutdown()
  report(directory, op=op, error=outcome.get("error"), recognised=outcome.get("recognised"), again=again)


if __name__ == "__main__":
  main(sys.argv[1])
