"""elastic-join-dies, an elastic row of `make faults` (elastic.py's docstring says what it measures):
the second host lost, listed again, and the rank that joins on it frozen once Horovod connected it,
then SIGKILLed, while the survivor waits in the state's sync broadcast for it.
"""
import json
import os
import re
import signal
import time

import psutil

from bench.faults.elastic import (ARGS, BOUND_S, COMMIT_EVERY, CONNECTED_S, JOIN_DIES, JOIN_FROZEN_S, LAUNCHER, LOSE_AT,
                                  _first_step_after_world)
from bench.harness.hosts import Hosts, world_sizes
from bench.harness.launches import Job
from progress import emit

GLOO_CONNECTIONS = 2  # an initialised joining rank's pairs to the survivor: the global context's, the cross one's


def _joiner(hosts: Hosts, job: Job, host: str) -> int | None:
  """The pid of the job's train.py on host (the python process, not its ssh and shell wrappers)."""
  for pid in sorted(hosts.pids(host) & job.alive()):
    try:
      cmdline = psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
      continue
    if cmdline[1:2] == ["train.py"]:
      return pid
  return None


def _initialised(hosts: Hosts, job: Job, host: str, timeout: float = BOUND_S) -> tuple[int, float, float]:
  """(pid, seconds to its process, seconds to its connections) of the rank that joins on host: its
  established TCP connections (Gloo's pairs to the survivor, the driver's services) unchanged for
  CONNECTED_S, so Horovod's init is done on both sides and its set-up (the model) is under way. One
  connection alone is not that: a rank started ahead (scripts/horovod/join_ahead.patch) holds one to
  the driver while it waits for its slot, before its init."""
  start = time.time()
  pid = seen = None
  held, steady_since, connected = set(), 0.0, 0.0
  while time.time() - start < timeout:
    if job.proc.poll() is not None:
      raise AssertionError(f"the job ended ({job.proc.returncode}) before the joining rank started:\n{job.tail()}")
    pid = pid or _joiner(hosts, job, host)
    if pid and not seen:
      seen = time.time() - start
    now = hosts.connections(host, pid) if pid else set()
    now = now if len(now) >= GLOO_CONNECTIONS else set()
    if now and now != held:
      held, steady_since = now, time.time()
      connected = connected or time.time() - start
    elif now and time.time() - steady_since >= CONNECTED_S:
      return pid, seen, connected
    time.sleep(0.1)
  raise AssertionError(f"the joining rank on {host} held no connections within {timeout} s:\n{job.tail()}")


def join_dies(hosts: Hosts, workdir: str) -> dict:
  """The second host lost at LOSE_AT, listed again, and its new rank killed during its set-up."""
  model_dir = os.path.join(workdir, JOIN_DIES)
  emit(f"faults: {JOIN_DIES}: the second host lost at step {LOSE_AT}, listed again, and its rank killed in its "
       f"set-up ({LAUNCHER})")
  hosts.publish(*hosts.names)
  second = hosts.names[1]
  with Job(model_dir, *ARGS, "--allreduce=horovod", launcher=hosts.launcher(2, 1, 2), extra_env=hosts.env) as job:
    at = job.wait_for_step(LOSE_AT, timeout=BOUND_S)
    hosts.lose(job, second)
    job.wait_until(lambda t: world_sizes(t)[1:2] == [1] and _first_step_after_world(t, 1),
                   "a step of the one-rank world", BOUND_S)
    hosts.publish(*hosts.names)
    pid, started, connected = _initialised(hosts, job, second)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(JOIN_FROZEN_S)
    # The new world logs its line once the state's sync is done: none yet, its rank never got there.
    in_setup = len(world_sizes(job.stderr())) == 2
    killed = hosts.lose(job, second)
    to_training = job.wait_until(lambda t: len(world_sizes(t)) >= 3 and _first_step_after_world(t, 2),
                                 "a step of the world after the joining rank died", BOUND_S)
    _, left = job.wait_gone(BOUND_S)
    line = [m.group(0) for m in re.finditer(r"world: .*$", job.stderr(), re.M)][2:3]
    summary_path = os.path.join(model_dir, "summary.json")
    summary = json.load(open(summary_path)) if os.path.exists(summary_path) else None
  if summary is None:
    raise AssertionError(f"no summary.json (exit {job.proc.returncode}):\n{job.tail()}")
  e = summary["elastic"]
  step_ms = 1000 * summary["global_batch"] / summary["images_per_sec"]
  commit_ms = 1000 * e["commit_seconds_median"]
  what = (f"SIGKILL to the second host's rank at step {at}; the host listed again, its new rank (started "
          f"{started:.0f} s later) frozen once Horovod had connected it ({connected:.0f} s after the listing) and "
          f"SIGKILLed {JOIN_FROZEN_S} s later, the host no longer listed")
  row = {"fault": JOIN_DIES, "what": what, "launcher": LAUNCHER, "allreduce": "horovod", "killed": len(killed),
         "seconds_to_training": round(to_training, 1), "steps_lost": e["steps_lost"],
         "seconds_to_join": None, "worlds": e["worlds"], "commit_every": COMMIT_EVERY,
         "commit_ms": round(commit_ms, 1), "step_ms": round(step_ms, 1),
         "commit_per_step": round(commit_ms / COMMIT_EVERY / step_ms, 4), "exit_status": job.proc.returncode,
         "processes_left": len(left), "final_top1": summary["final_top1"],
         "replicas_identical": summary["replicas_identical"], "epochs": summary["epochs"],
         "status": summary["status"], "killed_in_setup": in_setup, "line": line[0] if line else ""}
  row.update(join_dies_kept(row))
  emit(f"faults: {JOIN_DIES}: killed in its set-up: {in_setup}; training again {row['seconds_to_training']} s "
       f"after the kill, worlds {e['worlds']}, steps lost {e['steps_lost']}, exit {row['exit_status']}, "
       f"{row['processes_left']} left, {summary['status']} at epoch {summary['epochs']}: {row['line']}")
  return row


def join_dies_kept(row: dict) -> dict:
  """elastic-join-dies' verdict (pure): its rank killed in its set-up, the survivor rolled back and
  trained on alone to the end (no world of 2 after the loss), identical replicas, exit 0, nothing left."""
  worlds, lost = row["worlds"], row["steps_lost"]
  alone = worlds[:1] == [2] and len(worlds) >= 2 and 2 not in worlds[1:]
  ended = row["status"] == "finished" and row["exit_status"] == 0 and row["processes_left"] == 0
  kept = (row["killed_in_setup"] and alone and ended and row["replicas_identical"]
          and max(lost, default=0) <= COMMIT_EVERY)
  return {"kept": bool(kept), "measured": [
      f"{'killed in its set-up' if row['killed_in_setup'] else 'NOT killed in its set-up (not the case measured)'}; "
      f"worlds {' -> '.join(map(str, worlds))} ({'no' if alone else 'A'} world of 2 after the loss); steps lost "
      f"{lost} (at most {COMMIT_EVERY}); status {row['status']}, exit {row['exit_status']}, "
      f"{row['processes_left']} left; replicas {'identical' if row['replicas_identical'] else 'DIFFER'}"]}
