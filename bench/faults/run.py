"""A row of `make faults` on one host (bench/faults/__main__.py's table): the Fault, its launch under
horovodrun, the fault, what it measured, and the same command again (resume).

Each fault starts train.py under horovodrun (2 ranks, digits, a checkpoint every few steps) in a
session of its own, waits until training runs, does the fault, and measures: the time from the
fault to the last process of the job gone, the exit status, the step at the fault against the
step of the newest checkpoint (steps lost), the processes left behind (every pid the job ever had
is tracked: bench/harness/launches.Job), and the line the user saw. Then the same command again.
"""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from bench.harness.launches import STEP_LINE, USER_LINE, Job, newest_checkpoint
from progress import emit

BASE_ARGS = ("--max_steps=600", "--log_every=1", "--checkpoint_every=5", "--stall_timeout=30")
FAULT_AT_STEP = 12       # the fault comes once rank 0 reported this step (before the first evaluation)
GONE_TIMEOUT_S = 240     # a job not gone by then is a hang: reported, then killed by pid
RESUME_STEPS = 3         # the restart trains this many steps past its checkpoint


@dataclasses.dataclass
class Fault:
  """One row: a name, what it does, and how: `inject(job)` once training runs."""
  name: str
  what: str
  inject: object           # callable(job) -> None, or None: the job is left alone
  gloo: bool = False
  args: tuple = ()
  np_: int = 2
  extra_env: dict = dataclasses.field(default_factory=dict)
  at_step: int = FAULT_AT_STEP
  setup: object = None     # callable(model_dir) -> None before the launch (a prior run, a damaged file)
  before_resume: object = None  # callable(model_dir) -> None before the restart (free the disk)
  teardown: object = None  # callable(model_dir) -> None at the end, whatever happened
  # The restart: RESUME_STEPS past the checkpoint by default; same_command: the same command to its
  # end (a run that finished, or one resumed on resume_np ranks, is judged by the whole of it).
  same_command: bool = False
  resume_np: int = 0       # the restart's ranks (0: np_)
  program: object = None   # callable(model_dir) -> what each rank runs before its flags (Job's program)
  # What the row promises, measured: {"measured": [lines], "kept": bool, other keys} from
  # measure(job, model_dir) after the fault's run and measure_resume(job, model_dir, row) after the
  # restart (row: what the row holds so far); inject may return such a dict too.
  measure: object = None
  measure_resume: object = None
  gone_timeout: float = GONE_TIMEOUT_S  # a row whose restart evaluates a long held-out split twice needs longer
  # The verdict of a row whose promise is its columns (verdicts.py, pure): verdict(row) ->
  # {"kept", "measured"} once the restart ran.
  verdict: object = None
  # restart(fault, model_dir, row) -> the restart's columns (resumed_from, resume_exit_status,
  # resume_processes_left), in place of resume(): a row whose restart is not the same command once.
  restart: object = None


def _signal(sig, rank=None):
  return lambda job: job.signal(sig, rank)


def _signal_group(sig):
  """What a terminal's Ctrl-C does: the signal to the launcher's whole process group."""
  return lambda job: os.killpg(job.proc.pid, sig)


def _signal_ranks(sig, ranks):
  def inject(job):
    for rank in ranks:
      job.signal(sig, rank)
  return inject

def _ranks(n: int) -> str:
  return f"{n} rank{'s' if n > 1 else ''}"


def launcher_of(fault: Fault) -> str:
  again = f", the restart on {_ranks(fault.resume_np)}" if fault.resume_np and fault.resume_np != fault.np_ else ""
  return f"horovodrun {'Gloo' if fault.gloo else 'MPI'}, {_ranks(fault.np_)}{again}"


def _program(fault: Fault, model_dir: str) -> list[str] | None:
  return fault.program(model_dir) if fault.program else None


def merge_measured(row: dict, found: dict | None) -> None:
  """A row's own measurements (inject, measure, measure_resume) added to it: 'measured' lines
  joined, 'kept' true only while every part kept its promise, other keys as they are."""
  if not found:
    return
  found = dict(found)
  row["measured"] = row.get("measured", []) + list(found.pop("measured", []))
  if "kept" in found:
    kept = bool(found.pop("kept"))
    row["kept"] = row.get("kept", True) and kept
  row.update(found)


RANK_EXIT = re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s+(\d+)"  # mpirun's
                       r"|Process (\d+) exit with status code (\d+)\.")  # horovodrun --gloo's


def rank_exits(text: str) -> list[int]:
  """The ranks' exit statuses the launcher reported (pure): mpirun names the first rank that exited
  non-zero, horovodrun over Gloo each one; [] when it reported none (all 0, or killed first)."""
  return [int(m.group(2) or m.group(4)) for m in RANK_EXIT.finditer(text)]


def user_line(job: Job, since: int = 0) -> str:
  """The first line a user acts on (the cause: a rank that lost its peer to it speaks after it),
  else the last line of the launcher's that has words; since: only what the job wrote after this
  offset of its stderr (a fault that comes late in a run: what it printed after the fault)."""
  text = job.stderr()[since:]
  lines = [m.group(1).strip() for m in USER_LINE.finditer(text)]
  if lines:
    return lines[0]
  text = [l for l in text.splitlines() if re.search(r"[A-Za-z]", l) and not STEP_LINE.search(l)]
  if not text:
    return "(nothing after the fault)" if since else ""
  return re.sub(r"^\[\d+(?:,\d+)?\]<std\w+>:", "", text[-1]).strip()


def run_fault(fault: Fault, workdir: str) -> dict:
  """Launch, fault, measure, relaunch: one row of results/faults.json."""
  model_dir = os.path.join(workdir, fault.name)
  try:
    if fault.setup:
      fault.setup(model_dir)
    return _run_fault(fault, model_dir)
  finally:
    if fault.teardown:
      fault.teardown(model_dir)


def _run_fault(fault: Fault, model_dir: str) -> dict:
  emit(f"faults: {fault.name}: {fault.what} ({launcher_of(fault)})")
  with Job(model_dir, *BASE_ARGS, *fault.args, np_=fault.np_, gloo=fault.gloo, extra_env=fault.extra_env,
           program=_program(fault, model_dir)) as job:
    at = job.wait_for_step(fault.at_step) if fault.at_step else 0
    injected = dict(fault.inject(job) or {}) if fault.inject else {}
    since = injected.pop("log_offset", 0)  # an inject that knows where its fault began in the log
    fault_time = injected.pop("fault_time", None)  # ... and when, if it went on watching after it
    waited = time.time()
    seconds, left = job.wait_gone(fault.gone_timeout)
    seconds += waited - fault_time if fault_time else 0.0
    reached = job.step()
    row = {"fault": fault.name, "what": fault.what, "launcher": launcher_of(fault),
           "seconds_to_gone": round(seconds, 1), "exit_status": job.proc.returncode,
           "step_at_fault": at, "last_step": reached, "checkpoint_step": newest_checkpoint(model_dir),
           "processes_left": len(left), "line": user_line(job, since),
           "traceback": job.rank_traceback(), "rank_exits": rank_exits(job.stderr() + job.stdout()),
           "false_divergence_warning": "ranks hold different weights" in job.stderr()}
    merge_measured(row, injected)
    if fault.measure:
      merge_measured(row, fault.measure(job, model_dir))
  row["steps_lost"] = max(0, reached - (row["checkpoint_step"] or 0))
  row["summary_status"] = (read_summary(model_dir) or {}).get("status")
  if fault.before_resume:
    fault.before_resume(model_dir)
  row.update(fault.restart(fault, model_dir, row) if fault.restart else
             resume(fault, model_dir, row["checkpoint_step"], row))
  if fault.verdict:
    merge_measured(row, fault.verdict(row))
  emit(f"faults: {fault.name}: exit {row['exit_status']}, gone in {row['seconds_to_gone']} s, "
       f"{row['processes_left']} left, checkpoint {row['checkpoint_step']} of step {reached}; "
       f"resumed from {row['resumed_from']}, exit {row['resume_exit_status']}: {row['line'][:160]}")
  if "kept" in row and row["resume_exit_status"]:
    row["measured"].append(f"the restart exited {row['resume_exit_status']}: {row.get('resume_line', '')}")
  if "kept" in row:  # and, for every row that states a promise, nothing left behind and a restart that ran
    row["kept"] = bool(row["kept"] and row["processes_left"] == 0 and row["resume_exit_status"] == 0
                       and row["resume_processes_left"] == 0)
  for line in row.get("measured", []):
    emit(f"faults: {fault.name}: {line}")
  if "kept" in row:
    emit(f"faults: {fault.name}: promise {'kept' if row['kept'] else 'NOT kept'}")
  return row


RESUMED = re.compile(r"resumed from \S*ckpt-(\d+) at step (\d+)")
# rank 0's progress and evaluation lines, as the rows that judge a restart read them
PROGRESS = re.compile(r"epoch +([\d.]+) +step +(\d+)/(\d+) +loss \S+ +top1 \S+ +lr ([\d.]+)")
EVAL_LINE = re.compile(r"epoch +([\d.]+) +eval top1 ([\d.]+)")


def resume(fault: Fault, model_dir: str, checkpoint_step: int | None, row: dict | None = None) -> dict:
  """The same command again (a sane LR for the diverged rows): does it resume from the checkpoint?
  RESUME_STEPS past it, or (same_command) the command as it was, to its end, on resume_np ranks.
  row: the fault's row so far, which measure_resume's findings join."""
  args = [a for a in fault.args if not a.startswith(("--base_lr", "--warmup_epochs"))]
  more = () if fault.same_command else (f"--max_steps={(checkpoint_step or 0) + RESUME_STEPS}",)
  with Job(model_dir, *BASE_ARGS, *args, *more, np_=fault.resume_np or fault.np_, gloo=fault.gloo,
           extra_env=fault.extra_env, program=_program(fault, model_dir)) as job:
    _, left = job.wait_gone(fault.gone_timeout)
    found = RESUMED.search(job.stderr())
    out = {"resumed_from": int(found.group(1)) if found else None, "resume_exit_status": job.proc.returncode,
           "resume_processes_left": len(left)}
    if job.proc.returncode:  # what ended the restart, for the report's reader
      out.update(resume_line=user_line(job), resume_tail=job.stderr()[-2000:])
    if fault.measure_resume and row is not None:
      merge_measured(row, fault.measure_resume(job, model_dir, row))
    return out



def truncate_newest(model_dir: str) -> None:
  """Cut the newest checkpoint's data file to half its size, as a save killed by a full disk
  or a copy cut short would leave it."""
  step = newest_checkpoint(model_dir)
  data = [f for f in os.listdir(model_dir) if f.startswith(f"ckpt-{step}.data-")]
  for name in data:
    path = os.path.join(model_dir, name)
    os.truncate(path, os.path.getsize(path) // 2)


def tmpfs(size: str):
  """(setup, teardown): model_dir on a tmpfs of this size (root), for a full disk during a save."""
  def setup(model_dir):
    os.makedirs(model_dir, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", model_dir], check=True)
  def teardown(model_dir):
    subprocess.run(["umount", "-l", model_dir], check=False)
  return setup, teardown


def remount(size: str):
  """A bigger tmpfs in place (the user freed space), keeping what the run wrote."""
  return lambda model_dir: subprocess.run(["mount", "-o", f"remount,size={size}", model_dir], check=True)


def both(*steps):
  def run(model_dir):
    for step in steps:
      step(model_dir)
  return run


_PRIOR_RUNS: dict[int, str] = {}


def prior_run(steps: int):
  """A setup: a healthy run to `steps` first, so the fault meets checkpoints already written
  (trained once per length and copied: the rows that need one do not pay for it again)."""
  def setup(model_dir):
    if steps not in _PRIOR_RUNS or not os.path.isdir(_PRIOR_RUNS[steps]):
      first = tempfile.mkdtemp(prefix=f"faults-prior-{steps}-")
      with Job(first, *BASE_ARGS, f"--max_steps={steps}") as job:
        job.wait_gone(GONE_TIMEOUT_S)
        if job.proc.returncode:
          raise AssertionError(f"the prior run failed:\n{job.tail()}")
      _PRIOR_RUNS[steps] = first
    shutil.copytree(_PRIOR_RUNS[steps], model_dir)
  return setup


def read_summary(model_dir: str) -> dict | None:
  path = os.path.join(model_dir, "summary.json")
  if not os.path.exists(path):
    return None
  with open(path) as fh:
    return json.load(fh)
