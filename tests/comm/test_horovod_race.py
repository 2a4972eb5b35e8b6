"""Horovod 0.28.1's elastic race, forced: an op that passed Horovod's shut_down check and reaches
the tensor queue after the background loop finalised it must fail with the shut-down error, not
wait for ever; so must one that reaches the queue only after the next world's hvd.init() opened it
again (it belongs to the world that was shut down); and the queue must take ops again in the next
world. scripts/horovod/tensor_queue.patch, which make setup applies, does all three: its finalised
flag and its generation count. The unpatched build orphans the op in the first ordering
(docs/faults.md: 3 hangs in ~52 lost-host launches) and queues it into the new world in the second,
where this one rank runs it; so did the patch before the generation count.

The ordering is forced, not waited for: hold_enqueue.c (compiled here, LD_PRELOADed into one rank,
no launcher) holds the enqueuing thread at a trace line that Horovod writes between the shut_down
check and the queue (EnqueueTensorAllreduces' "Enqueued race_probe;", before AddToTensorQueueMulti;
the patch's "Enqueueing broadcast race_probe" in EnqueueTensorBroadcast, before AddToTensorQueue)
until the test's program (enqueue_after_shutdown.py) has shut Horovod down, and, for the old-world
case, initialised it again. Each of the two enqueues, each of the two orderings, under the Gloo
and the MPI controller: eight processes, ended by their pid whatever happens; seconds each.

A thread the shim let go on its own bound, not on the program's signal, proves nothing (a slow
shutdown would let an unpatched Horovod pass): the shim then leaves DIR/timed_out and every case
fails on it, first, saying so.
"""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from bench.harness.slurm_jobs import env

HERE = os.path.dirname(os.path.abspath(__file__))
BOUND_S = 180  # the whole rank: TensorFlow's import, two worlds, the op's 20 s bound, on a loaded machine
# The launcher's variables a rank might inherit from a surrounding job: this rank is alone.
LAUNCH_VARS = ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT", "HOROVOD_RANK", "HOROVOD_SIZE",
               "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
               "HOROVOD_ELASTIC", "HOROVOD_HOSTNAME", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               "PMIX_RANK", "PMI_RANK")
# Where each enqueue is held: a trace line between its shut_down check and its queue.
MATCH = {"allreduce": "Enqueued race_probe;", "broadcast": "Enqueueing broadcast race_probe"}
PROGRAM = os.path.join(HERE, "enqueue_after_shutdown.py")


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("shim") / "hold_enqueue.so")
  done = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", path, os.path.join(HERE, "hold_enqueue.c"), "-ldl"],
                        capture_output=True, text=True, timeout=60)
  assert done.returncode == 0, done.stderr
  return path


def shim_timed_out(directory: str) -> str | None:
  """hold_enqueue.c's sentence when it let the held thread go on its own bound (DIR/timed_out),
  else None."""
  path = os.path.join(directory, "timed_out")
  if not os.path.exists(path):
    return None
  with open(path) as fh:
    return fh.read().strip() or "hold_enqueue: released the held thread on its own bound"


def excerpt(log: str) -> str:
  """The rank's log cut to what tells the order: Horovod's lines about the probe, the shut-down
  and the queue's finalisation (the held line is split where the hold was, where the shim's own line
  lands if it let the thread go), and Python's own."""
  keep = [line for line in log.splitlines() if not line.startswith("[20")
          or re.search(r"race_probe|Shutting down|Finalizing ProcessSetTable|hold_enqueue", line)]
  return "\n".join(keep[-40:])


def run_rank(shim: str, directory: str, controller: str, op: str, release: str) -> tuple[dict, str]:
  """(DIR/outcome.json, excerpt of the rank's log) of enqueue_after_shutdown.py in a process of
  its own, SIGKILLed by its pid past BOUND_S or if the test is interrupted. Fails first, whatever
  the outcome, when the shim let the held thread go on its own bound."""
  e = {k: v for k, v in env().items() if k not in LAUNCH_VARS}
  e.update(HOROVOD_CONTROLLER=controller, HOROVOD_CPU_OPERATIONS=controller, HOROVOD_LOG_LEVEL="trace",
           LD_PRELOAD=shim, HOLD_ENQUEUE_MATCH=MATCH[op], HOLD_ENQUEUE_DIR=directory)
  e.pop("HOLD_ENQUEUE_BOUND_S", None)  # the shim's own 60 s: far past anything the program waits for
  log = os.path.join(directory, "rank.log")
  with open(log, "w") as out:
    proc = subprocess.Popen([sys.executable, PROGRAM, directory, op, release],
                            env=e, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
      proc.wait(timeout=BOUND_S)
    finally:
      if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
  with open(log) as fh:
    tail = excerpt(fh.read())
  timed_out = shim_timed_out(directory)
  if timed_out:
    pytest.fail(f"THE SHIM TIMED OUT: {timed_out}. hold_enqueue.c let the enqueuing thread go after its own "
                f"bound, not after the program's hvd.shutdown(){' and hvd.init()' if release == 'next-world' else ''}, "
                f"so this run says nothing about the race (exit {proc.returncode}):\n{tail}", pytrace=False)
  path = os.path.join(directory, "outcome.json")
  assert os.path.exists(path), f"the rank wrote no outcome (exit {proc.returncode}):\n{tail}"
  with open(path) as fh:
    return json.load(fh), tail


@pytest.mark.parametrize("release", ["shutdown", "next-world"])
@pytest.mark.parametrize("op", ["allreduce", "broadcast"])
@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_an_op_that_reaches_the_queue_after_its_world_was_shut_down_fails_and_the_next_world_runs(
    shim, tmp_path, controller, op, release):
  outcome, tail = run_rank(shim, str(tmp_path), controller, op, release)
  assert not outcome["shim_timed_out"], outcome  # run_rank failed first on the file; the program saw it too
  assert outcome["op"] != "never held", f"hold_enqueue.c never saw Horovod's {MATCH[op]!r} line:\n{tail}"
  assert outcome["op"] != "orphaned", (
      "the op enqueued after Horovod's background loop finalised its tensor queue was orphaned: neither "
      f"failed nor run within 20 s (Horovod 0.28.1's race; is scripts/horovod/tensor_queue.patch built in?)\n{tail}")
  assert outcome["op"] != "ran" or release != "next-world", (
      "the op that checked shut_down in the world that was shut down was queued into the next world and ran there "
      f"(the old-world case: is the patch's generation count built in?) {outcome}\n{tail}")
  assert outcome["op"] == "failed", outcome
  assert "Horovod has been shut down" in outcome["error"] and outcome["recognised"], outcome
  assert outcome["again"] == [5.0], outcome  # the next world's queue took the op and ran it


def test_the_shim_says_when_it_let_the_thread_go_on_its_own_bound(shim, tmp_path):
  """hold_enqueue.c alone (no Horovod): a matching fwrite not released within HOLD_ENQUEUE_BOUND_S
  leaves DIR/timed_out and a line on stderr, which run_rank fails on; released in time, neither."""
  program = ("import ctypes, sys\n"
             "libc = ctypes.CDLL(None)\n"
             "text = b'x Enqueued race_probe; y\\n'\n"
             "libc.fwrite(text, 1, len(text), ctypes.c_void_p.in_dll(libc, 'stdout'))\n"
             "libc.fflush(None)\n")
  for released in (False, True):
    directory = tmp_path / ("released" if released else "not-released")
    directory.mkdir()
    if released:
      (directory / "release").touch()
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, LD_PRELOAD=shim, HOLD_ENQUEUE_MATCH=MATCH["allreduce"],
                                   HOLD_ENQUEUE_DIR=str(directory), HOLD_ENQUEUE_BOUND_S="0.3"))
    assert done.returncode == 0, done.stderr
    assert (directory / "held").exists() and "Enqueued race_probe;" in done.stdout, done
    said = shim_timed_out(str(directory))
    if released:
      assert said is None and "hold_enqueue" not in done.stderr, (said, done.stderr)
    else:
      assert said and "on its own bound (0.3 s)" in said and said in done.stderr, (said, done.stderr)
