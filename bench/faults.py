"""Faults against real launches: `make faults` (writes results/faults.{md,json}).

  python -m bench.faults               # every fault below, MPI and Gloo, 2 ranks on digits
  python -m bench.faults --only sigterm-launcher-mpi,sigstop-rank-gloo

Each fault starts train.py under horovodrun (2 ranks, digits, a checkpoint
every CHECKPOINT_EVERY steps) in a session of its own, waits until training
runs, does the fault (a signal to the launcher or to one rank, a truncated
checkpoint, a full disk, a diverging LR), and measures: the time from the
fault to the last process of the job gone, the exit status, the step at the
fault against the step of the newest checkpoint (steps lost), the processes
left behind (every pid the job ever had is tracked: a launcher that dies
leaves its children re-parented, out of reach of a process-tree walk), and
the line the user saw. Then the same command again, which must resume.
The multi-process tests (tests/multiprocess/test_faults.py) assert the same properties
through bench/launches.py's Job; only this program reports times.
"""
import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench import faults_elastic, faults_slurm  # noqa: E402
from bench.launches import STEP_LINE, Job, newest_checkpoint  # noqa: E402  (and the tests')
from progress import emit, write_json_atomic  # noqa: E402
# ------------------------------------------------------------- the faults --
BASE_ARGS = ("--max_steps=600", "--log_every=1", "--checkpoint_every=5", "--stall_timeout=30")
FAULT_AT_STEP = 12       # the fault comes once rank 0 reported this step (before the first evaluation)
GONE_TIMEOUT_S = 240     # a job not gone by then is a hang: reported, then killed by pid
RESUME_STEPS = 3         # the restart trains this many steps past its checkpoint

# What a new user saw before this work (issue 10, 2 ranks, digits, --checkpoint_every=20).
BEFORE = {
    "sigkill-rank-mpi": "the job ends in 1.5 s, exit 137 (good)",
    "sigkill-rank-gloo": "the job ends in 0.5 s, exit 1 (good)",
    "sigterm-launcher-mpi": "horovodrun exits 143 at once; mpirun and both ranks go on training to "
                            "the end of the run, still alive 9 minutes after the signal",
    "sigint-launcher-mpi": "nothing happens for 60 s and more",
    "sigstop-rank-mpi": "the job hangs for ever; with HOROVOD_STALL_CHECK_TIME_SECONDS=10 not one "
                        "stall line in 90 s",
    "truncated-checkpoint": "the restart dies with `IndexError: Read less bytes than requested` and a "
                            "traceback; the older, intact checkpoints are never tried",
    "disk-full": "a `ResourceExhaustedError` traceback",
    "diverge-fp32-1rank": "60 steps of NaN loss, exit status 0, `final_loss: NaN` in summary.json, and a "
                          "false warning \"ranks hold different weights after training\" on a one-rank run",
}


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




def _launcher(fault: Fault) -> str:
  return f"horovodrun {'Gloo' if fault.gloo else 'MPI'}, {fault.np_} rank{'s' if fault.np_ > 1 else ''}"


def _user_line(job: Job) -> str:
  """The first line a user acts on (the cause: a rank that lost its peer to it speaks after it),
  else the last line of the launcher's that has words."""
  lines = job.user_lines()
  if lines:
    return lines[0]
  text = [l for l in job.stderr().splitlines() if re.search(r"[A-Za-z]", l) and not STEP_LINE.search(l)]
  return re.sub(r"^\[\d+(?:,\d+)?\]<std\w+>:", "", text[-1]).strip() if text else ""


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
  emit(f"faults: {fault.name}: {fault.what} ({_launcher(fault)})")
  with Job(model_dir, *BASE_ARGS, *fault.args, np_=fault.np_, gloo=fault.gloo, extra_env=fault.extra_env) as job:
    at = job.wait_for_step(fault.at_step) if fault.at_step else 0
    if fault.inject:
      fault.inject(job)
    seconds, left = job.wait_gone(GONE_TIMEOUT_S)
    reached = job.step()
    row = {"fault": fault.name, "what": fault.what, "launcher": _launcher(fault),
           "seconds_to_gone": round(seconds, 1), "exit_status": job.proc.returncode,
           "step_at_fault": at, "last_step": reached, "checkpoint_step": newest_checkpoint(model_dir),
           "processes_left": len(left), "line": _user_line(job),
           "traceback": job.rank_traceback(),
           "false_divergence_warning": "ranks hold different weights" in job.stderr()}
  row["steps_lost"] = max(0, reached - (row["checkpoint_step"] or 0))
  summary = os.path.join(model_dir, "summary.json")
  row["summary_status"] = json.load(open(summary)).get("status") if os.path.exists(summary) else None
  if fault.before_resume:
    fault.before_resume(model_dir)
  row.update(resume(fault, model_dir, row["checkpoint_step"]))
  emit(f"faults: {fault.name}: exit {row['exit_status']}, gone in {row['seconds_to_gone']} s, "
       f"{row['processes_left']} left, checkpoint {row['checkpoint_step']} of step {reached}; "
       f"resumed from {row['resumed_from']}: {row['line'][:160]}")
  return row


RESUMED = re.compile(r"resumed from \S*ckpt-(\d+) at step (\d+)")


def resume(fault: Fault, model_dir: str, checkpoint_step: int | None) -> dict:
  """The same command again (a sane LR for the diverged rows): does it resume from the checkpoint?"""
  args = [a for a in fault.args if not a.startswith(("--base_lr", "--warmup_epochs"))]
  steps = (checkpoint_step or 0) + RESUME_STEPS
  with Job(model_dir, *BASE_ARGS, *args, f"--max_steps={steps}", np_=fault.np_, gloo=fault.gloo) as job:
    _, left = job.wait_gone(GONE_TIMEOUT_S)
    found = RESUMED.search(job.stderr())
    return {"resumed_from": int(found.group(1)) if found else None, "resume_exit_status": job.proc.returncode,
            "resume_processes_left": len(left)}


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


FAULTS = [
    # The eight first: an interrupted run has measured those.
    Fault("sigkill-rank-mpi", "SIGKILL to rank 1", _signal(signal.SIGKILL, 1)),
    Fault("sigkill-rank-gloo", "SIGKILL to rank 1", _signal(signal.SIGKILL, 1), gloo=True),
    Fault("sigterm-launcher-mpi", "SIGTERM to horovodrun's pid", _signal(signal.SIGTERM)),
    Fault("sigint-launcher-mpi", "SIGINT to horovodrun's pid", _signal(signal.SIGINT)),
    Fault("sigstop-rank-mpi", "SIGSTOP to rank 1 (a hung GPU or file system)", _signal(signal.SIGSTOP, 1)),
    Fault("truncated-checkpoint", "the newest checkpoint's data cut to half, then the same command",
          None, args=("--max_steps=25",), at_step=0, setup=both(prior_run(20), truncate_newest)),
    Fault("disk-full", "--model_dir on a 6 MB tmpfs: the third checkpoint does not fit", None,
          at_step=0, setup=tmpfs("6m")[0], teardown=tmpfs("6m")[1], before_resume=remount("64m")),
    Fault("diverge-fp32-1rank", "--base_lr=1e6, fp32, one rank", None,
          args=("--base_lr=1e6", "--warmup_epochs=0"), np_=1, at_step=0, setup=prior_run(20)),
    Fault("sigterm-launcher-gloo", "SIGTERM to horovodrun's pid", _signal(signal.SIGTERM), gloo=True),
    Fault("ctrl-c-mpi", "SIGINT to horovodrun's process group (a terminal's Ctrl-C)",
          _signal_group(signal.SIGINT)),
    Fault("sigusr1-rank-gloo", "SIGUSR1 (Slurm's preemption notice) to rank 0", _signal(signal.SIGUSR1, 0),
          gloo=True),
    Fault("sigterm-rank-mpi", "SIGTERM to rank 1 only", _signal(signal.SIGTERM, 1)),
    Fault("sigterm-all-ranks-mpi", "SIGTERM to both ranks (a pod stop, srun forwarding)",
          _signal_ranks(signal.SIGTERM, (0, 1))),
    Fault("sigstop-rank0-mpi", "SIGSTOP to rank 0 (the coordinator)", _signal(signal.SIGSTOP, 0)),
    Fault("diverge-fp32", "--base_lr=1e6, fp32", None, args=("--base_lr=1e6", "--warmup_epochs=0"), at_step=0,
          setup=prior_run(20)),
    Fault("diverge-fp16", "--base_lr=1e6, fp16 (the loss scale cannot recover)", None,
          args=("--base_lr=1e6", "--warmup_epochs=0", "--precision=fp16"), at_step=0, setup=prior_run(20)),
]


# ------------------------------------------------------------------ report --
def table(rows: list[dict]) -> str:
  """results/faults.md's table: per fault, before and after (pure: rows in, markdown out)."""
  out = ["| fault | launcher | before | after: what the user saw | exit | s to gone | left | "
         "step / checkpoint (lost) | restart |", "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    restart = (f"resumed from {r['resumed_from']}, exit {r['resume_exit_status']}" if r["resumed_from"] is not None
               else f"fresh start, exit {r['resume_exit_status']}")
    line = r["line"].replace("|", "\\|")
    out.append(f"| {r['fault']}: {r['what']} | {r['launcher']} | {BEFORE.get(r['fault'], '(new)')} | "
               f"`{line}`{' (traceback)' if r['traceback'] else ''} | {r['exit_status']} | "
               f"{r['seconds_to_gone']} | {r['processes_left']} | {r['last_step']} / "
               f"{r['checkpoint_step']} ({r['steps_lost']}) | {restart} |")
  return "\n".join(out)


def write_report(rows: list[dict], out_dir: str, seconds: float) -> None:
  os.makedirs(out_dir, exist_ok=True)
  write_json_atomic(os.path.join(out_dir, "faults.json"), {"rows": rows, "wall_seconds": round(seconds)})
  with open(os.path.join(out_dir, "faults.md"), "w") as fh:
    fh.write(f"""# Faults against real launches (`make faults`)

Written by `python -m bench.faults` ({len(rows)} faults, {seconds / 60:.1f} minutes). Each fault: train.py
on the digits set under horovodrun, 2 ranks on one host unless the row says otherwise,
`{' '.join(BASE_ARGS)}`, the fault once rank 0 reported step {FAULT_AT_STEP}
(the diverging rows resume a healthy 20-step run with `--base_lr=1e6`). "s to gone": from the
fault to the last process of the job gone (every pid the job had is tracked). "left": processes
still alive {GONE_TIMEOUT_S} s after the fault (then killed by pid). "step / checkpoint (lost)":
the last step rank 0 reported, the newest checkpoint, the steps a restart repeats. "restart": the
same command again (a sane LR for the diverged rows). Exit statuses: 75 stopped by a signal after a
checkpoint (resumable), 5 a peer lost (another rank died), 4 stalled, 3 diverged, 2 bad input;
horovodrun killed by the signal itself shows as a negative number (-15: SIGTERM). How each fault
is handled: docs/faults.md.

{table(rows)}
{elastic_section(out_dir)}""")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--only", default="", help="comma-separated fault names (default: all)")
  parser.add_argument("--out_dir", default=os.path.join(REPO, "results"))
  args = parser.parse_args(argv)
  chosen = [f for f in FAULTS if not args.only or f.name in args.only.split(",")]
  others = list(faults_slurm.NAMES) + list(faults_elastic.NAMES)
  unknown = set(filter(None, args.only.split(","))) - {f.name for f in FAULTS} - set(others)
  if unknown:
    parser.error(f"unknown faults {sorted(unknown)}; choose from {', '.join([f.name for f in FAULTS] + others)}")
  start = time.time()
  rows = []
  report = os.path.join(args.out_dir, "faults.json")
  if not args.only and os.path.exists(report):
    os.remove(report)  # a full run starts the report afresh
  with tempfile.TemporaryDirectory(prefix="faults-") as workdir:
    for fault in chosen:
      try:
        row = run_fault(fault, workdir)
      except Exception as e:  # noqa: BLE001  (one fault that could not be measured is a row, not the end)
        row = failed_row(fault, e)
      # The report grows row by row: an interrupted run keeps what it measured.
      rows, seconds = merged([row], report, time.time() - start)
      start = time.time()
      write_report(rows, args.out_dir, seconds)
    slurm_rows, slurm_note = faults_slurm.rows(args.only, workdir)  # Slurm on 2 emulated hosts (root)
    for row in slurm_rows:
      rows, seconds = merged([row], report, time.time() - start)
      start = time.time()
      write_report(rows, args.out_dir, seconds)
    elastic_rows, commit = faults_elastic.rows(args.only, workdir)  # 2 emulated hosts, --elastic
    if elastic_rows:
      write_elastic(elastic_rows, commit, args.out_dir)
      write_report(merged([], report, 0)[0], args.out_dir, old_seconds(report))
  if slurm_note:
    faults_slurm.add_note(args.out_dir, slurm_note)
  emit(table(rows), sys.stdout)


ELASTIC_REPORT = "faults_elastic.json"


def write_elastic(rows: list[dict], commit: dict | None, out_dir: str) -> None:
  """The elastic rows in their own file, in place of the same faults' rows (so --only keeps the others)."""
  path = os.path.join(out_dir, ELASTIC_REPORT)
  old = json.load(open(path)) if os.path.exists(path) else {"rows": [], "resnet50_commit": None}
  by_name = {r["fault"]: r for r in old["rows"]} | {r["fault"]: r for r in rows}
  write_json_atomic(path, {"rows": list(by_name.values()), "resnet50_commit": commit or old["resnet50_commit"]})


def elastic_section(out_dir: str) -> str:
  """results/faults.md's elastic section, from faults_elastic.json when it exists."""
  path = os.path.join(out_dir, ELASTIC_REPORT)
  if not os.path.exists(path):
    return ""
  with open(path) as fh:
    report = json.load(fh)
  return f"""
## Elastic training: a host lost, and back (`--elastic`)

{faults_elastic.__doc__.split(chr(10) * 2, 2)[2].strip().replace("LOSE_AT", str(faults_elastic.LOSE_AT))}

{faults_elastic.table(report["rows"], report["resnet50_commit"])}
"""


def old_seconds(path: str) -> float:
  if not os.path.exists(path):
    return 0.0
  with open(path) as fh:
    return json.load(fh).get("wall_seconds", 0)


def failed_row(fault: Fault, error: Exception) -> dict:
  """The row of a fault whose measurement failed: the reason in the line, nothing measured."""
  emit(f"faults: {fault.name}: not measured: {str(error).splitlines()[0]}")
  return {"fault": fault.name, "what": fault.what, "launcher": _launcher(fault), "seconds_to_gone": None,
          "exit_status": None, "step_at_fault": None, "last_step": None, "checkpoint_step": None,
          "processes_left": None, "line": f"not measured: {str(error).splitlines()[0]}", "traceback": False,
          "steps_lost": None, "resumed_from": None, "resume_exit_status": None}


def merged(rows: list[dict], path: str, seconds: float) -> tuple[list[dict], float]:
  """These rows in place of the same faults' rows of the report at path, in FAULTS' order."""
  if not os.path.exists(path):
    return rows, seconds
  with open(path) as fh:
    old = json.load(fh)
  by_name = {r["fault"]: r for r in old["rows"]} | {r["fault"]: r for r in rows}
  order = [f.name for f in FAULTS] + [name for name in by_name if name not in {f.name for f in FAULTS}]
  return [by_name[name] for name in order if name in by_name], old.get("wall_seconds", 0) + seconds


if __name__ == "__main__":
  main()
