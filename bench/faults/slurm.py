"""The Slurm rows of `make faults`: a preemption notice and a scancel on 2 emulated hosts.

  python -m bench.faults --only slurm-preempt-srun,slurm-preempt-mpirun,slurm-scancel-srun

A Slurm of its own (bench/harness/slurm_jobs.py: slurmctld in host 1's namespace, a slurmd per
host, cluster imcsfault on 198.18.12.0/24) runs scripts/slurm/cpu_nodes.sbatch, 1 rank
per host, on the digits set. Once rank 0 reported step AT_STEP:
- preempt: `scancel --batch --signal=USR1` on a `--requeue` job, what `#SBATCH
  --signal=B:USR1@N` sends N seconds before the time limit; the first run must stop with
  a checkpoint and requeue itself, and the second resume from it and complete;
- scancel: the job cancelled; a resubmission with the same MODEL_DIR must resume.
- the notice during an evaluation (slurm-usr1-in-eval): a `--requeue` job on digits records whose
  held-out split is repeated EVAL_COPIES times, evaluated one image a batch (--eval_batch_size=1) at
  the first epoch's end; the notice once rank 0's heartbeat (<model_dir>/heartbeats/rank-0.json,
  which the watchdog writes every 2 s) says `eval`. The ranks agree a stop between evaluation
  batches, so they must stop within the notice window (NOTICE_S: `--signal=B:USR1@120`) with exit 75
  and the checkpoint saved before the evaluation; the job requeued, resumed from that checkpoint,
  evaluates that step again (it was not completed) before it trains on.
Measured as bench/faults/run.py's rows: the time from the signal to the first run's last process
gone (every process of a job lives in the hosts' namespaces), the batch script's exit status
(common.sh prints it; Slurm's ExitCode for a scancel that killed the script first), the step
at the signal against the newest checkpoint, the processes left, the line the user saw.
Needs root; else one note says why it was skipped. Each row's verdict (kept or not) is computed
from what it measured (verdict()).
"""
import json
import os
import re
import time

from bench.faults.data import digits_records
from bench.faults.long_eval import heartbeat
from bench.harness import slurm_jobs
from input.datasets import DIGITS  # metadata only: no TensorFlow in this process
from progress import emit, write_json_atomic

CLUSTER, SUBNET = "imcsfault", "198.18.12"  # not the tests' (imcslurmt) nor a user's (imc)
TRAIN_ARGS = ("--log_every=1", "--checkpoint_every=20", "--stall_timeout=30")
MAX_STEPS = 80           # the first run's; the requeued run finishes it
AT_STEP = 30             # the signal comes once rank 0 reported this step, as in bench/faults/run.py
GONE_TIMEOUT_S = 240     # the first run not gone by then is a hang: its processes are reported
RESUME_STEPS = 3         # a resubmission trains this many steps past its checkpoint
STEP_LINE = re.compile(r"step +(\d+)/\d+")
USER_LINE = re.compile(r"^((?:stopped|stalled|diverged|error|checkpoint)\b.*)$", re.M)
RESUMED = re.compile(r"resumed from \S*ckpt-(\d+) at step (\d+)")
EXITS = re.compile(r"^job \d+: run \d+ exits (\d+)$", re.M)
SECOND_RUN = "run 1 (requeues so far)"  # common.sh's header of a job's second run
LAUNCHERS = {"srun": "Slurm srun --mpi=pmix, 2 hosts x 1", "mpirun": "Slurm mpirun (BIND_TO=none), 2 hosts x 1"}
EVAL_COPIES = 40           # slurm-usr1-in-eval: the digits' held-out images 40 times
NOTICE = "preemption notice (scancel -b -s USR1, a --requeue job), then requeued"
FAULTS = {
    "slurm-preempt-srun": (NOTICE, "srun"),
    "slurm-preempt-mpirun": (NOTICE, "mpirun"),
    "slurm-scancel-srun": ("scancel of the running job, then resubmitted with the same MODEL_DIR", "srun"),
    "slurm-usr1-in-eval": ("preemption notice (scancel -b -s USR1, a --requeue job) while rank 0 evaluates the first "
                           f"epoch ({EVAL_COPIES * DIGITS.num_eval:,} held-out images, --eval_batch_size=1), then "
                           "requeued", "srun"),
}
EVAL_ARGS = ("--dataset=imagenet", "--image_size=8", "--eval_batch_size=1", "--max_steps=24", "--noexport")
EPOCH_END = 23             # digits at global batch 64: the first epoch's last step, its checkpoint and evaluation
NOTICE_S = 120             # the notice window the scripts' example gives (--signal=B:USR1@120)
EVAL_LINE = re.compile(r"^epoch +([\d.]+) +eval top1 ([\d.]+).*$", re.M)
NAMES = tuple(FAULTS)


def last_step(text: str) -> int:
  """The newest step rank 0 reported in a batch log (0 before the first progress line)."""
  steps = STEP_LINE.findall(text)
  return int(steps[-1]) if steps else 0


def user_line(text: str) -> str:
  """The last line a user acts on (stopped/stalled/diverged/error/checkpoint ...), or ''."""
  lines = USER_LINE.findall(text)
  return lines[-1].strip() if lines else ""


def run_exit(text: str) -> int | None:
  """The batch script's status, as common.sh prints it (`job N: run R exits S`), of the run in TEXT."""
  found = EXITS.findall(text)
  return int(found[-1]) if found else None


def slurm_exit(exit_code: str) -> int | None:
  """Slurm's ExitCode ("status:signal") of an ended job as one number: the status, or -signal."""
  status, _, sig = exit_code.partition(":")
  if not (status.isdigit() and sig.isdigit()):
    return None
  return -int(sig) if int(sig) else int(status)


def _signal_and_measure(cluster, job, scancel_args) -> dict:
  """Once training runs: the signal, then the first run measured as it ends."""
  job.wait_for_line(rf"step +{AT_STEP}/", timeout=slurm_jobs.JOB_TIMEOUT)
  pids = cluster.job_pids()
  at = last_step(job.log())
  t0 = time.time()
  job.signal(*scancel_args)
  _, left = cluster.wait_quiet(GONE_TIMEOUT_S, pids)
  seconds = time.time() - t0
  first = job.log().partition(SECOND_RUN)[0]
  summary = os.path.join(job.model_dir, "summary.json")
  checkpoint = max(slurm_jobs.checkpoints(job.model_dir), default=None)
  reached = last_step(first)
  return {"seconds_to_gone": round(seconds, 1), "exit_status": run_exit(first),
          "step_at_fault": at, "last_step": reached, "checkpoint_step": checkpoint,
          "processes_left": len(left), "line": user_line(first),
          "traceback": "Traceback (most recent call last)" in first,
          "false_divergence_warning": "ranks hold different weights" in first,
          "steps_lost": max(0, reached - (checkpoint or 0)),
          "summary_status": json.load(open(summary)).get("status") if os.path.exists(summary) else None}


def _resumed(cluster, text: str, state) -> dict:
  _, left = cluster.wait_quiet(60)
  found = RESUMED.search(text)
  return {"resumed_from": int(found.group(1)) if found else None, "resume_state": state[0],
          "resume_exit_status": run_exit(text),
          "resume_processes_left": len(left)}


def preempt(cluster, workdir: str, data_dir: str, launcher: str) -> dict:
  """The notice to a --requeue job: measured to the first run's end, then the requeued run to COMPLETED."""
  out = os.path.join(workdir, f"preempt-{launcher}")
  with slurm_jobs.SbatchJob(cluster, out, f"--data_dir={data_dir}", *TRAIN_ARGS, f"--max_steps={MAX_STEPS}",
                            sbatch=["--requeue"], LAUNCHER=launcher, BIND_TO="none") as job:
    row = _signal_and_measure(cluster, job, ("--batch", "--signal=USR1"))
    # Requeueing ends the first run as CANCELLED for a moment; the restart count says which run it was.
    state = job.wait(lambda s: slurm_jobs.ended(s) and (s[0] != "CANCELLED" or s[2] == "0"))
    row.update(_resumed(cluster, job.log().partition(SECOND_RUN)[2], state))
    row["requeued"] = "requeued; the next run resumes from" in job.log()
  return row


def scancel(cluster, workdir: str, data_dir: str, launcher: str) -> dict:
  """scancel of the running job, then the same MODEL_DIR resubmitted for a few more steps."""
  out = os.path.join(workdir, f"scancel-{launcher}")
  with slurm_jobs.SbatchJob(cluster, out, f"--data_dir={data_dir}", *TRAIN_ARGS, f"--max_steps={MAX_STEPS}",
                            LAUNCHER=launcher, BIND_TO="none") as job:
    row = _signal_and_measure(cluster, job, ())
    state = job.wait()
    # A cancelled batch script may be killed before it prints its status: then Slurm's word on it.
    row["exit_status"] = row["exit_status"] if row["exit_status"] is not None else slurm_exit(state[1])
    model_dir = job.model_dir
  steps = (row["checkpoint_step"] or 0) + RESUME_STEPS
  with slurm_jobs.SbatchJob(cluster, out, f"--data_dir={data_dir}", *TRAIN_ARGS, f"--max_steps={steps}",
                            model_dir=model_dir, LAUNCHER=launcher, BIND_TO="none") as again:
    state = again.wait()
    row.update(_resumed(cluster, again.log(), state))
    row["requeued"] = "requeued" in job.log()
  return row


def _until(predicate, job, bound: float) -> float | None:
  """Seconds until predicate() held, polled every 0.2 s; None if the job ended first or bound passed."""
  t0 = time.time()
  while time.time() - t0 < bound:
    if predicate():
      return round(time.time() - t0, 1)
    if slurm_jobs.ended(job.state()):
      return None
    time.sleep(0.2)
  return None


def usr1_in_eval(cluster, workdir: str, data_dir: str, launcher: str) -> dict:
  """The notice while rank 0 evaluates the first epoch's end: the first run measured to its end (and the
  seconds to its stop line), then the requeued run: the seconds from its resume line to its first
  evaluation's line (that evaluation again, whole), and whether it came before the next step."""
  out = os.path.join(workdir, f"usr1-in-eval-{launcher}")
  with slurm_jobs.SbatchJob(cluster, out, f"--data_dir={data_dir}", *TRAIN_ARGS, *EVAL_ARGS, sbatch=["--requeue"],
                            LAUNCHER=launcher, BIND_TO="none") as job:
    if _until(lambda: (heartbeat(job.model_dir) or {}).get("phase") == "eval", job,
              slurm_jobs.JOB_TIMEOUT) is None:
      raise AssertionError(f"job {job.id}: rank 0 never evaluated\n{job.log()[-3000:]}")
    beat = heartbeat(job.model_dir)
    pids, at, t0 = cluster.job_pids(), last_step(job.log()), time.time()
    job.signal("--batch", "--signal=USR1")
    stop_s = _until(lambda: user_line(job.log().partition(SECOND_RUN)[0]).startswith("stopped:"), job, GONE_TIMEOUT_S)
    _, left = cluster.wait_quiet(GONE_TIMEOUT_S, pids)
    seconds = time.time() - t0
    first = job.log().partition(SECOND_RUN)[0]
    checkpoint = max(slurm_jobs.checkpoints(job.model_dir), default=None)
    resumed = _until(lambda: RESUMED.search(job.log().partition(SECOND_RUN)[2]), job, slurm_jobs.JOB_TIMEOUT)
    evaluated = _until(lambda: EVAL_LINE.search(job.log().partition(SECOND_RUN)[2]), job, slurm_jobs.JOB_TIMEOUT)
    # The requeued run evaluates that step again and, at its end, the next: twice the long evaluation.
    state = job.wait(lambda s: slurm_jobs.ended(s) and (s[0] != "CANCELLED" or s[2] == "0"), 2 * slurm_jobs.JOB_TIMEOUT)
    second = job.log().partition(SECOND_RUN)[2]
    row = {"seconds_to_gone": round(seconds, 1), "exit_status": run_exit(first), "step_at_fault": beat["step"],
           "last_step": last_step(first), "checkpoint_step": checkpoint, "processes_left": len(left),
           "line": user_line(first), "traceback": "Traceback (most recent call last)" in first,
           "false_divergence_warning": "ranks hold different weights" in first,
           "steps_lost": max(0, last_step(first) - (checkpoint or 0)), "phase_at_fault": beat["phase"],
           "seconds_to_stop_line": stop_s, "evaluated_in_first_run": EVAL_LINE.search(first) is not None,
           "resume_eval_seconds": round(evaluated - resumed, 1) if evaluated is not None and resumed is not None
           else None, "resume_evaluated": _evaluated_first(second), "requeued": "requeued; the next run resumes from"
           in job.log(), "signal_at_step": at}
    row.update(_resumed(cluster, second, state))
  return row


def _evaluated_first(text: str) -> str | None:
  """The requeued run's first eval line, if it came at the first epoch's end before any later step."""
  found = EVAL_LINE.search(text)
  later = re.search(rf"step +{EPOCH_END + 1}/", text)
  if not found or (later and later.start() < found.start()) or abs(float(found.group(1)) - 1.0) > 1e-6:
    return None
  return re.sub(" +", " ", found.group(0).strip())


def verdict(name: str, row: dict) -> dict:
  """Whether a Slurm row kept its promise (pure: its name and row in, {"kept", "measured"} out):
  every row a `stopped:` line at the step it stopped with that step's checkpoint (nothing lost),
  the resumed run from it, exit 0, nothing left; a notice, exit 75 and the job requeued (COMPLETED
  after); a scancel, a resubmission (not requeued); the notice in an evaluation, the stop within
  NOTICE_S, no evaluation completed before it, and the requeued run evaluating that step first."""
  line = re.match(r"stopped: (SIG\w+) (?:received|on another rank) at step (\d+) .*checkpoint \S*ckpt-(\d+); "
                  r".*\(exit 75\)$", row["line"] or "")
  at = line and int(line.group(2)) == int(line.group(3)) == row["checkpoint_step"] == row["last_step"]
  checks = [(bool(at), f"`stopped:` ({line.group(1)}) at step {line.group(2)} with ckpt-{line.group(3)}, nothing lost"
             if at else f"NO stop line at the last step {row['last_step']} with its checkpoint "
             f"{row['checkpoint_step']}"),
            (row["resumed_from"] == row["checkpoint_step"] and row["resume_exit_status"] == 0,
             f"the next run resumed from {row['resumed_from']}, exit {row['resume_exit_status']}"),
            (row["processes_left"] == 0 and row.get("resume_processes_left") == 0,
             f"{row['processes_left']} + {row.get('resume_processes_left')} processes left")]
  if name == "slurm-scancel-srun":
    checks.append((not row["requeued"], "resubmitted, not requeued" if not row["requeued"] else "REQUEUED"))
  else:
    checks.append((row["exit_status"] == 75 and row["requeued"] and row.get("resume_state") == "COMPLETED",
                   f"exit {row['exit_status']}, {'requeued' if row['requeued'] else 'NOT requeued'}, then "
                   f"{row.get('resume_state')}"))
  if name == "slurm-usr1-in-eval":
    stop_s = row["seconds_to_stop_line"]
    checks += [(row["phase_at_fault"] == "eval" and row["step_at_fault"] == EPOCH_END and stop_s is not None
                and stop_s <= NOTICE_S and not row["evaluated_in_first_run"],
                f"the notice in the evaluation of step {row['step_at_fault']}, the stop line {stop_s} s later (window "
                f"{NOTICE_S} s), "
                f"{'an eval line BEFORE it' if row['evaluated_in_first_run'] else 'no eval line before'}; "
                f"the requeued run's evaluation of that step took {row['resume_eval_seconds']} s"),
               (row["checkpoint_step"] == EPOCH_END and row["resume_evaluated"] is not None,
                f"resumed from ckpt-{row['checkpoint_step']}, saved before the evaluation, and evaluated it again "
                f"first: {row['resume_evaluated'] or 'NOT before it trained on'}")]
  return {"kept": all(ok for ok, _ in checks), "measured": [said for _, said in checks]}


def rows(only: str, workdir: str) -> tuple[list[dict], str | None]:
  """The rows ONLY (bench.faults' --only: comma-separated names, '' for all) picks among NAMES, and a
  note: None, or why they were skipped. Slurm's daemons and the cluster are down again afterwards."""
  chosen = [n for n in NAMES if not only or n in only.split(",")]
  if not chosen:
    return [], None
  why = slurm_jobs.unavailable()
  if why:
    return [], f"skipped: {why}"
  from input import digits  # imports TensorFlow: only once Slurm can run
  data_dir = os.path.join(workdir, "slurm-digits")
  digits.write(data_dir)
  if "slurm-usr1-in-eval" in chosen:  # the digits records as an ImageNet-layout set, its held-out split longer
    digits_records(os.path.join(workdir, "slurm-long-eval"), held_out_copies=EVAL_COPIES)
  cluster = slurm_jobs.Cluster(CLUSTER, SUBNET)
  found, note = [], None
  try:
    why = cluster.start()
    if why:
      return [], f"skipped: {why}"
    for name in chosen:
      what, launcher = FAULTS[name]
      emit(f"faults: {name}: {what} ({LAUNCHERS[launcher]})")
      measure = {"slurm-usr1-in-eval": usr1_in_eval, "slurm-scancel-srun": scancel}.get(name, preempt)
      data = os.path.join(workdir, "slurm-long-eval") if name == "slurm-usr1-in-eval" else data_dir
      row = {"fault": name, "what": what, "launcher": LAUNCHERS[launcher], **measure(cluster, workdir, data, launcher)}
      row.update(verdict(name, row))
      emit(f"faults: {name}: exit {row['exit_status']}, gone in {row['seconds_to_gone']} s, "
           f"{row['processes_left']} left, checkpoint {row['checkpoint_step']} of step {row['last_step']} "
           f"(signal at {row['step_at_fault']}); resumed from {row['resumed_from']} "
           f"({row['resume_state']}): {row['line'][:160]}")
      emit(f"faults: {name}: promise {'kept' if row['kept'] else 'NOT kept'}: {'; '.join(row['measured'])}")
      found.append(row)
  finally:
    left = cluster.stop()
    if left:
      note = "; ".join(left)
  return found, note


def add_note(out_dir: str, note: str) -> None:
  """The note (why the Slurm rows were skipped, or what outlived the cluster) under the report's table."""
  with open(os.path.join(out_dir, "faults.md"), "a") as fh:
    fh.write(f"\nSlurm rows ({', '.join(NAMES)}): {note}\n")
  path = os.path.join(out_dir, "faults.json")
  report = json.load(open(path))
  report["slurm_note"] = note
  write_json_atomic(path, report)
