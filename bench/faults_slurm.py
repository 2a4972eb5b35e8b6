"""The Slurm rows of `make faults`: a preemption notice and a scancel on 2 emulated hosts.

  python -m bench.faults --only slurm-preempt-srun,slurm-preempt-mpirun,slurm-scancel-srun

A Slurm of its own (bench/slurm_jobs.py: slurmctld in host 1's namespace, a slurmd per
host, cluster imcsfault on 198.18.12.0/24) runs scripts/slurm/cpu_nodes.sbatch, 1 rank
per host, on the digits set. Once rank 0 reported step AT_STEP:
- preempt: `scancel --batch --signal=USR1` on a `--requeue` job, what `#SBATCH
  --signal=B:USR1@N` sends N seconds before the time limit; the first run must stop with
  a checkpoint and requeue itself, and the second resume from it and complete;
- scancel: the job cancelled; a resubmission with the same MODEL_DIR must resume.
Measured as bench/faults.py's rows: the time from the signal to the first run's last process
gone (every process of a job lives in the hosts' namespaces), the batch script's exit status
(common.sh prints it; Slurm's ExitCode for a scancel that killed the script first), the step
at the signal against the newest checkpoint, the processes left, the line the user saw.
Needs root; else one note says why it was skipped.
"""
import json
import os
import re
import time

from bench import slurm_jobs
from progress import emit, write_json_atomic

CLUSTER, SUBNET = "imcsfault", "198.18.12"  # not the tests' (imcslurmt) nor a user's (imc)
TRAIN_ARGS = ("--log_every=1", "--checkpoint_every=20", "--stall_timeout=30")
MAX_STEPS = 80           # the first run's; the requeued run finishes it
AT_STEP = 30             # the signal comes once rank 0 reported this step, as in bench/faults.py
GONE_TIMEOUT_S = 240     # the first run not gone by then is a hang: its processes are reported
RESUME_STEPS = 3         # a resubmission trains this many steps past its checkpoint
STEP_LINE = re.compile(r"step +(\d+)/\d+")
USER_LINE = re.compile(r"^((?:stopped|stalled|diverged|error|checkpoint)\b.*)$", re.M)
RESUMED = re.compile(r"resumed from \S*ckpt-(\d+) at step (\d+)")
EXITS = re.compile(r"^job \d+: run \d+ exits (\d+)$", re.M)
SECOND_RUN = "run 1 (requeues so far)"  # common.sh's header of a job's second run
LAUNCHERS = {"srun": "Slurm srun --mpi=pmix, 2 hosts x 1", "mpirun": "Slurm mpirun (BIND_TO=none), 2 hosts x 1"}
NOTICE = "preemption notice (scancel -b -s USR1, a --requeue job), then requeued"
FAULTS = {
    "slurm-preempt-srun": (NOTICE, "srun"),
    "slurm-preempt-mpirun": (NOTICE, "mpirun"),
    "slurm-scancel-srun": ("scancel of the running job, then resubmitted with the same MODEL_DIR", "srun"),
}
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
  cluster = slurm_jobs.Cluster(CLUSTER, SUBNET)
  found, note = [], None
  try:
    why = cluster.start()
    if why:
      return [], f"skipped: {why}"
    for name in chosen:
      what, launcher = FAULTS[name]
      emit(f"faults: {name}: {what} ({LAUNCHERS[launcher]})")
      measure = preempt if name.startswith("slurm-preempt") else scancel
      row = {"fault": name, "what": what, "launcher": LAUNCHERS[launcher],
             **measure(cluster, workdir, data_dir, launcher)}
      emit(f"faults: {name}: exit {row['exit_status']}, gone in {row['seconds_to_gone']} s, "
           f"{row['processes_left']} left, checkpoint {row['checkpoint_step']} of step {row['last_step']} "
           f"(signal at {row['step_at_fault']}); resumed from {row['resumed_from']} "
           f"({row['resume_state']}): {row['line'][:160]}")
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
