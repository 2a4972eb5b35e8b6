"""The elastic rows of `make faults`: a host lost and back on 2 emulated hosts (--elastic).

  python -m bench.faults --only elastic-horovod,elastic-hybrid,elastic-adaptive-powersgd --elastic_launches=3

train.py --elastic on the digits set under horovodrun --gloo in elastic mode (bench/harness/hosts.Hosts:
2 emulated hosts x 1 rank, cluster imcelf on 198.18.16.0/24, --min-np 1). Once rank 0 reported
step LOSE_AT, the second host is lost (no longer listed, its ranks SIGKILLed); once the first
trains alone, the host is listed again. Measured: the time from the loss to the first step of
the one-rank world, the steps lost (train.py's roll-back to its last commit), the time from the
host listed again to the first step of the two-rank world, a commit's time against a step's, the
exit status, the processes left, the final accuracy and whether the replicas ended identical.
Each of these rows is launched `--elastic_launches` times (30 unless given; each row says how
many) and counts its hangs: a launch the watchdog ended after Horovod's background loop had died
(Horovod's race, the op a survivor held orphaned: bench/harness/hosts.stalled_after_horovod_died), or
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
import statistics
import subprocess

from bench.harness.hosts import Hosts, regrown, stalled_after_horovod_died, world_sizes
from bench.harness.launches import PYTHON, REPO, STEP_LINE, Job
from comm.horovod_build import patch_marker
from progress import emit

NAME, SUBNET = "imcelf", "198.18.16"  # not the tests' (imcelt) nor a user's (imc)
COMMIT_EVERY = 10
LOSE_AT = 25
# 12 epochs: the survivor trains on while the returning host's process starts up (scripts/horovod/
# join_ahead.patch); at 4 it finished alone (~180 one-rank steps in 10 s) before that process's imports did.
ARGS = ("--model=resnet20", "--elastic", f"--elastic_commit_every={COMMIT_EVERY}", "--log_every=1",
        "--noexport", "--epochs=12", "--seed=3")
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
JOINED_AHEAD = "was started ahead of its world"  # comm/joining.py's line in a rank the driver started ahead


def built_with(rows: list[dict]) -> list[dict]:
  """The rows, each with the patch marker of the Horovod build that ran them (comm/horovod_build.py:
  the sha256 of scripts/horovod/tensor_queue.patch it was built with; None: an unpatched build)."""
  marker = patch_marker()
  return [dict(r, horovod_patch=marker) for r in rows]


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
            f"{r['seconds_to_join']} s after the host came back (the survivor's world changes "
            f"{r['world_change_s']} s, re-init {r['reinit_s']} s; the return's {r['return_s']} s, re-init "
            f"{r['return_reinit_s']} s, {'started ahead' if r['started_ahead'] else 'NOT started ahead'}), "
            f"worlds {r['worlds']}, status {r['status']}: "
            f"{'BROKEN: ' + ', '.join(broken) if broken else 'kept'}" if r["outcome"] == "finished"
            else f"{r['line']} (its output: {r['log']})")
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
        ahead = JOINED_AHEAD in job.stderr()
      except (AssertionError, OSError, ValueError, KeyError) as e:
        ended = job.proc.poll() is not None
        left = job.alive()
        outcome = "hang" if hang(job.stderr(), ended, len(left)) else "failed"
        return {"outcome": outcome, "log": keep_log(job, os.path.basename(model_dir)), "at": at,
                "killed": len(killed or []), "exit_status": job.proc.returncode,
                "processes_left": len(left), "line": str(e).splitlines()[0] if str(e) else type(e).__name__,
                "user_lines": job.user_lines()[-2:], "world_lines": world_lines(job.stderr()),
                "tail": [t for t in job.stderr().splitlines() if t.strip()][-3:]}  # a traceback's last line
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
  e = summary["elastic"]
  step_ms = 1000 * summary["global_batch"] / summary["images_per_sec"]
  commit_ms = 1000 * e["commit_seconds_median"]
  back = (summary["time"].get("world_changes") or [{}])[-1]
  return {"outcome": "finished", "at": at, "killed": len(killed), "seconds_to_training": round(to_training, 1),
          "steps_lost": e["steps_lost"], "seconds_to_join": round(to_join, 1), "worlds": e["worlds"],
          "commit_ms": round(commit_ms, 1), "step_ms": round(step_ms, 1),
          "commit_per_step": round(commit_ms / COMMIT_EVERY / step_ms, 4), "exit_status": job.proc.returncode,
          "processes_left": len(left), "final_top1": summary["final_top1"],
          "replicas_identical": summary["replicas_identical"], "epochs": summary["epochs"],
          "status": summary["status"], "compression": (summary.get("compression") or {}).get("kind"),
          "base_batch": (summary.get("adascale") or {}).get("base_batch"),
          # the survivor's own pause for both changes, from its time ledger (docs/time.md): what they cost training
          "world_change_s": summary["time"]["groups"].get("world_change"),
          "reinit_s": summary["time"]["parts"].get("world_change.reinit"),
          # the return alone (the last change), and whether its process was started ahead (join_ahead.patch)
          "started_ahead": ahead, "return_s": back.get("seconds"), "return_reinit_s": back.get("reinit"),
          "return_first_step_s": back.get("first_step")}


def keep_log(job: Job, name: str, root: str = REPO) -> str:
  """A failed launch's whole output, kept as runs/faults/NAME.log under root, the repository (not
  committed): the row records only its last lines, and its model_dir is removed. Returns the path
  relative to root."""
  path = os.path.join("runs", "faults", f"{name}.log")
  os.makedirs(os.path.join(root, "runs", "faults"), exist_ok=True)
  with open(os.path.join(root, path), "w") as fh:
    fh.write(f"$ {' '.join(job.cmd)}\nexit {job.proc.returncode}\n"
             f"--- stdout\n{job.stdout()}\n--- stderr\n{job.stderr()}")
  return path


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
                                                                 "tail", "log")}} for i, r in enumerate(runs)
                      if r["outcome"] != "finished"],
         "per_launch": [{k: r.get(k) for k in ("outcome", "at", "seconds_to_training", "steps_lost",
                                               "seconds_to_join", "world_change_s", "reinit_s", "started_ahead",
                                               "return_s", "return_reinit_s", "return_first_step_s", "worlds",
                                               "exit_status")} for r in runs]}
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

  def median_known(key):  # the ledger's figures: None where a launch's summary lacked the part
    known = [r[key] for r in finished if r.get(key) is not None]
    return round(statistics.median(known), 1) if known else None

  worlds = collections.Counter(tuple(r["worlds"]) for r in finished)
  lost = [r["steps_lost"][0] for r in finished if r["steps_lost"]]
  flags = f" ({row['flags']})" if row["flags"] else ""
  return dict(row, what=f"SIGKILL to every rank of the second host at step {round(median('at'))} (median), "
                        f"then the host listed again{flags}",
              killed=max(r["killed"] for r in finished), seconds_to_training=round(median("seconds_to_training"), 1),
              steps_lost=[round(statistics.median(lost), 1)] if lost else [], steps_lost_max=max(lost, default=None),
              seconds_to_join=round(median("seconds_to_join"), 1), world_change_s=median_known("world_change_s"),
              reinit_s=median_known("reinit_s"), return_s=median_known("return_s"),
              return_reinit_s=median_known("return_reinit_s"), return_first_step_s=median_known("return_first_step_s"),
              started_ahead=sum(bool(r.get("started_ahead")) for r in finished),
              worlds=list(worlds.most_common(1)[0][0]),
              worlds_seen={" -> ".join(map(str, w)): n for w, n in worlds.most_common()},
              commit_every=COMMIT_EVERY, commit_ms=round(median("commit_ms"), 1), step_ms=round(median("step_ms"), 1),
              commit_per_step=median("commit_per_step"), final_top1=median("final_top1"),
              replicas_identical=all(r["replicas_identical"] for r in finished), epochs=median("epochs"))


def resnet50_commit_seconds() -> dict:
  """A commit (RunState.save: every variable copied to host memory) of ResNet-50 with SGD's
  momentum, median of 5, in a process of its own (no Horovod world is needed to copy)."""
  code = (
      "import statistics, time, json\n"
      "import keras\n"
      "import horovod.tensorflow as hvd\n"
      "from models import build_model\n"
      "from training.state import RunState\n"
      "model = build_model('resnet50', 1000, (224, 224, 3), zero_init_residual=True)\n"
      "opt = keras.optimizers.SGD(momentum=0.9)\n"
      "opt.build(model.trainable_variables)\n"
      "variables = model.variables + opt.variables\n"
      "state = RunState(hvd, variables)\n"
      "times = []\n"
      "for _ in range(5):\n"
      "  t = time.perf_counter(); state.save(); times.append(time.perf_counter() - t)\n"
      "print(json.dumps({'seconds': statistics.median(times), 'bytes': sum(v.numpy().nbytes for v in variables)}))\n")
  done = subprocess.run([PYTHON, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if done.returncode:
    raise AssertionError(done.stderr[-2000:])
  return json.loads(done.stdout.strip().splitlines()[-1])
