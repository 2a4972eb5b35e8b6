"""The elastic rows of `make faults`: a host lost and back on 2 emulated hosts (--elastic).

  python -m bench.faults --only elastic-horovod,elastic-hybrid,elastic-adaptive-powersgd --elastic_launches=3

train.py --elastic on the digits set under horovodrun --gloo in elastic mode (bench/launches.Hosts:
2 emulated hosts x 1 rank, cluster imcelf on 198.18.16.0/24, --min-np 1). Once rank 0 reported
step LOSE_AT, the second host is lost (no longer listed, its ranks SIGKILLed); once the first
trains alone, the host is listed again. Measured: the time from the loss to the first step of
the one-rank world, the steps lost (train.py's roll-back to its last commit), the time from the
host listed again to the first step of the two-rank world, a commit's time against a step's, the
exit status, the processes left, the final accuracy and whether the replicas ended identical.
Each of these rows is launched `--elastic_launches` times (30 unless given; each row says how
many) and counts its hangs: a launch the watchdog ended after Horovod's background loop had died
(Horovod's race, the op a survivor held orphaned: bench/launches.stalled_after_horovod_died), or
one still running, or leaving
processes, past its bound (600 s a phase); other failures are counted apart. Its figures are medians
over the launches that finished (the steps lost: the host's loss, the first of each launch),
its exit status the commonest, its processes left the most any launch left.
elastic-adaptive-powersgd is elastic-horovod's launch under `--lr_scaling=adascale
--batch_policy=adaptive --compression=powersgd --compression_start=0` (AdaScale's gain from the
mean gradient's norm sketched under PowerSGD; the world of one rank keeps the global batch by
accumulating). A lost-host row is kept when every launch finished and in each the survivor trained
alone, the host joined again, the replicas ended identical, the run finished (exit 0, nothing
left) and at most --elastic_commit_every steps were lost to the loss.
And a commit of ResNet-50's state (weights, BatchNorm statistics, momentum: what a commit copies
to host memory on every rank), timed in a process of its own.

elastic-join-dies: the same loss, but the host listed again dies during its set-up: its rank is
frozen (SIGSTOP) once it holds Horovod's connections to the survivor (Horovod initialised, the
model not yet built) and SIGKILLed, its host no longer listed, JOIN_FROZEN_S later, while the
survivor waits in the state's sync broadcast for it. Measured: whether the new world never logged
(its sync never ended), the time from the kill to the survivor's next step, the steps lost, the
exit status, the processes left; kept when the survivor trained on alone to the end.
"""
import collections
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import time

import psutil

from bench.faults_verdicts import promise
from bench.launches import PYTHON, REPO, STEP_LINE, Hosts, Job, regrown, stalled_after_horovod_died, world_sizes
from comm.horovod_build import patch_marker
from progress import emit

NAME, SUBNET = "imcelf", "198.18.16"  # not the tests' (imcelt) nor a user's (imc)
COMMIT_EVERY = 10
LOSE_AT = 25
ARGS = ("--model=resnet20", "--elastic", f"--elastic_commit_every={COMMIT_EVERY}", "--log_every=1",
        "--noexport", "--epochs=4", "--seed=3")
BOUND_S = 600
# Lost-host launches per row in make faults (the docstring says 30): Horovod 0.28.1's race hung 3 of
# ~52 before the patch (scripts/horovod/tensor_queue.patch); fewer say little about a rate of a few %.
LAUNCHES = 30
# The lost-host rows: (--allreduce, more flags). AdaScale with PowerSGD composes (the mean gradient's norm
# sketched, comm/sketch.py), and the adaptive policy keeps the global batch in the world of one rank by K.
ADAPTIVE = ("--lr_scaling=adascale", "--batch_policy=adaptive", "--compression=powersgd", "--compression_start=0")
FAULTS = {"elastic-horovod": ("horovod", ()), "elastic-hybrid": ("hybrid", ()),
          "elastic-adaptive-powersgd": ("horovod", ADAPTIVE)}
JOIN_DIES = "elastic-join-dies"
NAMES = (*FAULTS, JOIN_DIES)
JOIN_FROZEN_S = 3  # the joining rank stopped this long before its SIGKILL: the survivor is in the sync by then
CONNECTED_S = 1    # ... once its connections have held steady this long (Horovod's init is done)
LAUNCHER = "horovodrun --gloo elastic, 2 emulated hosts x 1 (--min-np 1)"


def _first_step_after_world(text: str, index: int) -> bool:
  """Whether rank 0 reported a step after its index-th world line."""
  starts = [m.end() for m in re.finditer(r"world: \d+ ranks on", text)]
  return len(starts) > index and bool(STEP_LINE.search(text, starts[index]))


def lose_and_join(hosts: Hosts, workdir: str, fault: str, launches: int = LAUNCHES) -> dict:
  """The fault's row: `launches` launches of it (launch_once), counted and summarised (aggregate)."""
  emit(f"faults: {fault}: the second host lost at step {LOSE_AT}, then listed again, {launches} launches ({LAUNCHER})")
  runs = []
  for i in range(launches):
    runs.append(launch_once(hosts, os.path.join(workdir, f"{fault}-{i + 1}"), fault))
    r = runs[-1]
    broken = launch_kept(r) if r["outcome"] == "finished" else []
    said = (f"training again {r['seconds_to_training']} s after the loss, {r['steps_lost']} steps lost, joined "
            f"{r['seconds_to_join']} s after the host came back, worlds {r['worlds']}, status {r['status']}: "
            f"{'BROKEN: ' + ', '.join(broken) if broken else 'kept'}" if r["outcome"] == "finished" else r["line"])
    emit(f"faults: {fault}: launch {i + 1}/{launches}: {r['outcome']}: {said}, exit {r['exit_status']}, "
         f"{r['processes_left']} left; {sum(x['outcome'] == 'hang' for x in runs)} hangs so far")
  return aggregate(fault, runs)


def world_lines(text: str) -> list[str]:
  """Where a failed launch was (pure): rank 0's world changes (new worlds, the change announced, the
  batch each starts at) and its last progress line, in order."""
  keep = re.compile(r"world: |the world is changing|batch: this world starts")
  lines = [line for line in text.splitlines() if keep.search(line)]
  steps = [line for line in text.splitlines() if STEP_LINE.search(line)]
  return lines[-6:] + steps[-1:]


def hang(text: str, ended: bool, left: int) -> bool:
  """Whether a launch that failed hung (pure: its log, whether it ended within its bound, the
  processes left after it): the watchdog ended it after Horovod's background loop died (Horovod's
  race), or it was still running, or left processes, past its bound."""
  return stalled_after_horovod_died(text) or not ended or left > 0


def launch_once(hosts: Hosts, model_dir: str, fault: str) -> dict:
  """One launch of a lost-host row: {"outcome": "finished" | "hang" | "failed", ...} with what it
  measured when it finished, the line that says why when not. Its model_dir is removed after."""
  hosts.publish(*hosts.names)
  at = killed = None
  try:
    allreduce, more = FAULTS[fault]
    with Job(model_dir, *ARGS, f"--allreduce={allreduce}", *more, launcher=hosts.launcher(2, 1, 2),
             extra_env=hosts.env) as job:
      try:
        at = job.wait_for_step(LOSE_AT, timeout=BOUND_S)
        killed = hosts.lose(job, hosts.names[1])
        to_training = job.wait_until(lambda t: world_sizes(t)[1:2] == [1] and _first_step_after_world(t, 1),
                                     "a step of the one-rank world", BOUND_S)
        hosts.publish(*hosts.names)
        to_join = job.wait_until(lambda t: (i := regrown(t, 2)) is not None and _first_step_after_world(t, i),
                                 "a step of the two-rank world", BOUND_S)
        _, left = job.wait_gone(BOUND_S)
        if left or job.proc.returncode != 0:
          raise AssertionError(f"exit {job.proc.returncode}, {len(left)} processes left after {BOUND_S} s")
        with open(os.path.join(model_dir, "summary.json")) as fh:
          summary = json.load(fh)
      except (AssertionError, OSError, ValueError, KeyError) as e:
        ended = job.proc.poll() is not None
        left = job.alive()
        outcome = "hang" if hang(job.stderr(), ended, len(left)) else "failed"
        return {"outcome": outcome, "at": at, "killed": len(killed or []), "exit_status": job.proc.returncode,
                "processes_left": len(left), "line": str(e).splitlines()[0] if str(e) else type(e).__name__,
                "user_lines": job.user_lines()[-2:], "world_lines": world_lines(job.stderr()),
                "tail": [t for t in job.stderr().splitlines() if t.strip()][-3:]}  # a traceback's last line
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
  e = summary["elastic"]
  step_ms = 1000 * summary["global_batch"] / summary["images_per_sec"]
  commit_ms = 1000 * e["commit_seconds_median"]
  return {"outcome": "finished", "at": at, "killed": len(killed), "seconds_to_training": round(to_training, 1),
          "steps_lost": e["steps_lost"], "seconds_to_join": round(to_join, 1), "worlds": e["worlds"],
          "commit_ms": round(commit_ms, 1), "step_ms": round(step_ms, 1),
          "commit_per_step": round(commit_ms / COMMIT_EVERY / step_ms, 4), "exit_status": job.proc.returncode,
          "processes_left": len(left), "final_top1": summary["final_top1"],
          "replicas_identical": summary["replicas_identical"], "epochs": summary["epochs"],
          "status": summary["status"], "compression": (summary.get("compression") or {}).get("kind"),
          "base_batch": (summary.get("adascale") or {}).get("base_batch")}


def launch_kept(r: dict) -> list[str]:
  """What a finished lost-host launch broke of its row's promise (pure; [] when it kept it): the
  survivor trained alone, the host joined again, the replicas ended identical, the run finished
  (exit 0, nothing left), at most COMMIT_EVERY steps lost to the loss."""
  broken = []
  worlds = r.get("worlds") or []
  if not (len(worlds) >= 3 and worlds[0] == worlds[-1] == 2 and 1 in worlds[1:-1]):
    broken.append(f"worlds {worlds} (want 2 -> 1 -> 2)")
  if not r.get("replicas_identical"):
    broken.append("replicas differ")
  if r.get("status") != "finished" or r.get("exit_status") != 0 or r.get("processes_left"):
    broken.append(f"status {r.get('status')}, exit {r.get('exit_status')}, {r.get('processes_left')} left")
  if not r.get("steps_lost") or r["steps_lost"][0] > COMMIT_EVERY:
    broken.append(f"steps lost {r.get('steps_lost')} (at most {COMMIT_EVERY})")
  return broken


def aggregate(fault: str, runs: list[dict]) -> dict:
  """A lost-host row from its launches (pure): launches, hangs and other failures counted, the
  figures medians over the launches that finished, the exit status the commonest, the processes
  left the most any launch left; every launch's outcome kept in "per_launch"."""
  finished = [r for r in runs if r["outcome"] == "finished"]
  hangs = [r for r in runs if r["outcome"] == "hang"]
  failed = [r for r in runs if r["outcome"] == "failed"]
  row = {"fault": fault, "launcher": LAUNCHER, "allreduce": FAULTS[fault][0], "flags": " ".join(FAULTS[fault][1]),
         "launches": len(runs),
         "hangs": len(hangs), "failed": len(failed), "finished": len(finished),
         "exit_status": collections.Counter(r["exit_status"] for r in runs).most_common(1)[0][0] if runs else None,
         "processes_left": max((r["processes_left"] for r in runs), default=0),
         "failures": [{"launch": i + 1, **{k: r.get(k) for k in ("outcome", "line", "user_lines", "world_lines",
                                                                 "tail")}} for i, r in enumerate(runs)
                      if r["outcome"] != "finished"],
         "per_launch": [{k: r.get(k) for k in ("outcome", "at", "seconds_to_training", "steps_lost",
                                               "seconds_to_join", "worlds", "exit_status")} for r in runs]}
  broken = {i + 1: b for i, r in enumerate(runs) if r["outcome"] == "finished" and (b := launch_kept(r))}
  row.update(kept=len(finished) == len(runs) and not broken, measured=[
      f"{len(finished)} of {len(runs)} launches finished ({len(hangs)} hung, {len(failed)} failed otherwise)",
      "every finished launch: the survivor trained alone, the host joined again, replicas identical, status "
      f"finished, at most {COMMIT_EVERY} steps lost" if not broken else
      "BROKEN in " + "; ".join(f"launch {i}: {', '.join(b)}" for i, b in broken.items())])
  if not finished:
    why = failed[0]["line"] if failed else "every launch hung"
    return dict(row, what="not measured", line=f"not measured: no launch finished ({why})")

  def median(key):
    return round(statistics.median(r[key] for r in finished), 4)

  worlds = collections.Counter(tuple(r["worlds"]) for r in finished)
  lost = [r["steps_lost"][0] for r in finished if r["steps_lost"]]
  flags = f" ({row['flags']})" if row["flags"] else ""
  return dict(row, what=f"SIGKILL to every rank of the second host at step {round(median('at'))} (median), "
                        f"then the host listed again{flags}",
              killed=max(r["killed"] for r in finished), seconds_to_training=round(median("seconds_to_training"), 1),
              steps_lost=[round(statistics.median(lost), 1)] if lost else [], steps_lost_max=max(lost, default=None),
              seconds_to_join=round(median("seconds_to_join"), 1), worlds=list(worlds.most_common(1)[0][0]),
              worlds_seen={" -> ".join(map(str, w)): n for w, n in worlds.most_common()},
              commit_every=COMMIT_EVERY, commit_ms=round(median("commit_ms"), 1), step_ms=round(median("step_ms"), 1),
              commit_per_step=median("commit_per_step"), final_top1=median("final_top1"),
              replicas_identical=all(r["replicas_identical"] for r in finished), epochs=median("epochs"))


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
  CONNECTED_S, so Horovod's init is done on both sides and its set-up (the model) is under way."""
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


def resnet50_commit_seconds() -> dict:
  """A commit (TrainingState.save: every variable copied to host memory) of ResNet-50 with SGD's
  momentum, median of 5, in a process of its own (no Horovod world is needed to copy)."""
  code = (
      "import statistics, time, json\n"
      "import keras\n"
      "import horovod.tensorflow as hvd\n"
      "from models import build_model\n"
      "from training.elastic import Position, TrainingState\n"
      "model = build_model('resnet50', 1000, (224, 224, 3), zero_init_residual=True)\n"
      "opt = keras.optimizers.SGD(momentum=0.9)\n"
      "opt.build(model.trainable_variables)\n"
      "variables = model.variables + opt.variables\n"
      "state = TrainingState(hvd, variables, Position())\n"
      "times = []\n"
      "for _ in range(5):\n"
      "  t = time.perf_counter(); state.save(); times.append(time.perf_counter() - t)\n"
      "print(json.dumps({'seconds': statistics.median(times), 'bytes': sum(v.numpy().nbytes for v in variables)}))\n")
  done = subprocess.run([PYTHON, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if done.returncode:
    raise AssertionError(done.stderr[-2000:])
  return json.loads(done.stdout.strip().splitlines()[-1])


def rows(only: str, workdir: str, launches: int = LAUNCHES) -> tuple[list[dict], dict | None]:
  """The elastic rows chosen by --only (all when empty), each lost-host row from `launches`
  launches, and ResNet-50's commit (None if not run)."""
  chosen = [name for name in NAMES if not only or name in only.split(",")]
  if not chosen:
    return [], None
  hosts = Hosts(NAME, SUBNET, 2, os.path.join(workdir, "elastic-hosts.txt"))
  why = hosts.up()
  if why:
    emit(f"faults: elastic rows skipped: no emulated hosts ({why})")
    return [], None
  out = []
  try:
    for name in chosen:
      try:
        out.append(join_dies(hosts, workdir) if name == JOIN_DIES else lose_and_join(hosts, workdir, name, launches))
      except Exception as e:  # noqa: BLE001  (a row that could not be measured says why)
        emit(f"faults: {name}: not measured: {str(e).splitlines()[0]}")
        out.append({"fault": name, "what": "not measured", "launcher": LAUNCHER,
                    "line": f"not measured: {str(e).splitlines()[0]}"})
  finally:
    hosts.down()
  return built_with(out), resnet50_commit_seconds() if set(chosen) & set(FAULTS) else None


def built_with(rows: list[dict]) -> list[dict]:
  """Each row with the Horovod build it was measured on, as results/faults_elastic.json keeps it:
  horovod_patch, the sha256 of scripts/horovod/tensor_queue.patch that build carries
  (comm/horovod_build.patch_marker(); None: a build without the patch's marker)."""
  marker = patch_marker()
  return [dict(r, horovod_patch=marker) for r in rows]


def table(rows: list[dict], commit: dict | None, before: dict | None = None) -> str:
  """The elastic section of results/faults.md (pure: rows in, markdown out). before: what a row's
  fault did before the work that fixed it (bench/faults.BEFORE), '(new)' for the others."""
  before = before or {}
  out = ["| fault | before | allreduce | s from the loss to training | steps lost (commit every) | s from the "
         "return to training together | worlds | a commit / a step (ms) | commit cost per step | exit | left | final "
         "top-1 | replicas identical | the row's promise, measured |", "|---" * 14 + "|"]
  for r in rows:
    if "seconds_to_training" not in r:
      out.append(f"| {r['fault']} | {before.get(r['fault'], '(new)')} | {r['line']} |" + " |" * 10 + f" {promise(r)} |")
      continue
    joined = r["seconds_to_join"] if r["seconds_to_join"] is not None else "never: " + (
        "killed in its set-up" if r.get("killed_in_setup") else "killed after its set-up (not the case measured)")
    counted = (f" ({r['launches']} launches: {r['hangs']} hung, {r['failed']} failed otherwise; medians over the "
               f"{r['finished']} that finished)" if "launches" in r else "")
    out.append(f"| {r['fault']}: {r['what']}{counted} | {before.get(r['fault'], '(new)')} | {r['allreduce']} | "
               f"{r['seconds_to_training']} | {', '.join(map(str, r['steps_lost']))} ({r['commit_every']}) | "
               f"{joined} | "
               f"{' -> '.join(map(str, r['worlds']))} | {r['commit_ms']} / {r['step_ms']} | "
               f"{r['commit_per_step']:.2%} | {r['exit_status']} | {r['processes_left']} | "
               f"{r['final_top1']:.4f} | {r['replicas_identical']} | {promise(r)} |")
  if commit:
    ms = commit["seconds"] * 1000
    out.append(f"\nA commit of ResNet-50's state with SGD momentum ({commit['bytes'] / 2**20:.0f} MiB copied to host "
               f"memory on every rank, this CPU, median of 5): {ms:.0f} ms, so {ms / 10:.0f} ms a step at "
               f"--elastic_commit_every=10; weigh it against the step time of the machine it runs on and the "
               f"steps a lost host costs (at most --elastic_commit_every).")
  return "\n".join(out)
