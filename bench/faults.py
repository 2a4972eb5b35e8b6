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
from bench.launches import PYTHON, USER_LINE, per_rank_data_dir  # noqa: E402
from bench.slurm_jobs import env  # noqa: E402
from input.datasets import DIGITS  # noqa: E402  (metadata only: no TensorFlow in this process)
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
    # Issue 23.
    "resume-half-ranks": "read step 46 at global batch 64 as epoch 1.0 at 32, warmed up again and trained 5 "
                         "epochs for 4; no line warned",
    "missing-shard": "each rank counted its own files: different steps per epoch, a stall at the first evaluation",
    "sigterm-long-eval": "the SIGKILL that follows SIGTERM within 10 s lost the whole epoch: the save came after "
                         "the evaluation",
    "export-disk-full": "a traceback, exit 1, and no summary.json",
    "elastic-join-dies": "every survivor ended: the sync broadcast is outside Horovod's recovery",
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


def _launcher(fault: Fault) -> str:
  again = f", the restart on {_ranks(fault.resume_np)}" if fault.resume_np and fault.resume_np != fault.np_ else ""
  return f"horovodrun {'Gloo' if fault.gloo else 'MPI'}, {_ranks(fault.np_)}{again}"


def _program(fault: Fault, model_dir: str) -> list[str] | None:
  return fault.program(model_dir) if fault.program else None


def _merge_measured(row: dict, found: dict | None) -> None:
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


def _user_line(job: Job, since: int = 0) -> str:
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
  emit(f"faults: {fault.name}: {fault.what} ({_launcher(fault)})")
  with Job(model_dir, *BASE_ARGS, *fault.args, np_=fault.np_, gloo=fault.gloo, extra_env=fault.extra_env,
           program=_program(fault, model_dir)) as job:
    at = job.wait_for_step(fault.at_step) if fault.at_step else 0
    injected = dict(fault.inject(job) or {}) if fault.inject else {}
    since = injected.pop("log_offset", 0)  # an inject that knows where its fault began in the log
    seconds, left = job.wait_gone(fault.gone_timeout)
    reached = job.step()
    row = {"fault": fault.name, "what": fault.what, "launcher": _launcher(fault),
           "seconds_to_gone": round(seconds, 1), "exit_status": job.proc.returncode,
           "step_at_fault": at, "last_step": reached, "checkpoint_step": newest_checkpoint(model_dir),
           "processes_left": len(left), "line": _user_line(job, since),
           "traceback": job.rank_traceback(),
           "false_divergence_warning": "ranks hold different weights" in job.stderr()}
    _merge_measured(row, injected)
    if fault.measure:
      _merge_measured(row, fault.measure(job, model_dir))
  row["steps_lost"] = max(0, reached - (row["checkpoint_step"] or 0))
  row["summary_status"] = (_summary(model_dir) or {}).get("status")
  if fault.before_resume:
    fault.before_resume(model_dir)
  row.update(resume(fault, model_dir, row["checkpoint_step"], row))
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
      out.update(resume_line=_user_line(job), resume_tail=job.stderr()[-2000:])
    if fault.measure_resume and row is not None:
      _merge_measured(row, fault.measure_resume(job, model_dir, row))
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


# ------------------------------------------ issue 23: what the rows measure --
PROGRESS = re.compile(r"epoch +([\d.]+) +step +(\d+)/(\d+) +loss \S+ +top1 \S+ +lr ([\d.]+)")
EVAL_LINE = re.compile(r"epoch +([\d.]+) +eval top1 ([\d.]+)")
RESUMED_LINE = re.compile(r"(resumed from \S+ at step \d+: .*)$", re.M)
HALF_EPOCHS = 4          # resume-half-ranks: --epochs
HALF_STOP_AT = 30        # ... SIGTERM once rank 0 reported this step: epoch 1.30 at global batch 64


def _progress(text: str) -> list[tuple[float, int, float]]:
  """(epoch, step of the schedule, LR) of each of rank 0's progress lines in text."""
  return [(float(e), int(s), float(lr)) for e, s, _, lr in PROGRESS.findall(text)]


def _summary(model_dir: str) -> dict | None:
  path = os.path.join(model_dir, "summary.json")
  if not os.path.exists(path):
    return None
  with open(path) as fh:
    return json.load(fh)


def _epoch_images(global_batch: int) -> int:
  """The images a digits epoch trains at this global batch (the last partial batch is left out)."""
  return DIGITS.num_train // global_batch * global_batch


def half_ranks_before(job: Job, model_dir: str) -> dict:
  """Where the 2-rank run stopped: the epoch and LR of its last step."""
  steps = _progress(job.stderr())
  if not steps:
    return {"measured": ["no progress line before the stop"], "kept": False}
  epoch, step, lr = steps[-1]
  return {"before": {"epoch": epoch, "step": step, "lr": lr},
          "measured": [f"2 ranks stopped at epoch {epoch:.2f} (step {step}), LR {lr:.5f}"]}


def half_ranks_after(job: Job, model_dir: str, row: dict) -> dict:
  """The restart on 1 rank: its resume line; its first step's epoch and LR against the stop's
  (row["before"]): the epoch goes on (within 2 steps of the new batch) and the LR follows the global
  batch (x32/64, the schedule a step on); the summary's epochs and images_trained."""
  text = job.stderr()
  line = RESUMED_LINE.search(text)
  steps, summary = _progress(text), _summary(model_dir) or {}
  found = {"resumed_line": line.group(1).strip() if line else None,
           "measured": [f"restart's line: {line.group(1).strip() if line else '(no resume line)'}"]}
  kept = bool(line) and "is 32 on 1 now" in line.group(1)
  before = row.get("before")
  if steps and before:
    epoch, step, lr = steps[0]
    found["after"] = {"epoch": epoch, "step": step, "lr": lr}
    ratio = lr / before["lr"] if before["lr"] else float("nan")
    near = abs(epoch - before["epoch"]) <= 2 * 32 / DIGITS.num_train + 0.01
    found["measured"].append(f"1 rank's first step: epoch {epoch:.2f} (step {step}), LR {lr:.5f}: the epoch "
                             f"{'goes on' if near else 'MOVED'} from {before['epoch']:.2f}, LR x{ratio:.2f} "
                             "(the global batch x0.50, the schedule a step on)")
    kept = kept and near and 0.45 <= ratio <= 0.56
  else:
    kept = False
  want = HALF_EPOCHS * _epoch_images(64)
  found["measured"].append(f"summary: epochs {summary.get('epochs')} (--epochs={HALF_EPOCHS}), images_trained "
                           f"{summary.get('images_trained')} (want {HALF_EPOCHS} x {_epoch_images(64):,} = {want:,}), "
                           f"status {summary.get('status')}")
  found["kept"] = kept and summary.get("epochs") == HALF_EPOCHS and summary.get("images_trained") == want
  return found


def digits_records(dst: str, held_out_copies: int = 1) -> None:
  """dst: the digits TFRecords (input/digits.py, 4 training shards) as an ImageNet-layout set that
  train.py scans at start-up (--dataset=imagenet --image_size=8; dataset_info.json: 10 classes), the
  held-out split repeated held_out_copies times (a long evaluation). The digits source itself is
  written by train.py on one rank per node and not scanned: no shard of it can be missing."""
  src = _digits_written(os.path.join(os.path.dirname(os.path.abspath(dst)), "digits"))
  os.makedirs(dst, exist_ok=True)
  for name in sorted(os.listdir(src)):
    if name.startswith("train-"):
      shutil.copy(os.path.join(src, name), dst)
  held = sorted(n for n in os.listdir(src) if n.startswith("validation-"))
  total = len(held) * held_out_copies
  for i in range(total):
    shutil.copy(os.path.join(src, held[i % len(held)]), os.path.join(dst, f"validation-{i:05d}-of-{total:05d}"))
  with open(os.path.join(dst, "dataset_info.json"), "w") as fh:
    json.dump({"num_classes": DIGITS.num_classes}, fh)


def _digits_written(path: str) -> str:
  """path, holding the digits TFRecords (input.digits.write: seeded, the same bytes as data/digits),
  written once (the rows' working directory, removed with it)."""
  # input/digits.py writes 4 training shards and 2 held-out ones, each renamed into place whole.
  written = os.path.isdir(path) and sum(f.startswith(("train-", "validation-")) for f in os.listdir(path)) == 6
  if not written:
    done = subprocess.run([PYTHON, "-c", f"from input import digits; digits.write({path!r})"], cwd=REPO, env=env(),
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
      raise AssertionError(f"the digits records could not be written: {done.stderr[-2000:]}")
  return path


DATA_ARGS = ("--dataset=imagenet", "--image_size=8")  # digits_records' sets
MISSING = "train-00002-of-00004"  # missing-shard: rank 1's copy lacks it


def _data_root(model_dir: str) -> str:
  return f"{model_dir}.data"


def missing_shard_setup(model_dir: str) -> None:
  """Two copies of the set, <model_dir>.data/0 and /1 (one per rank, as two hosts), rank 1's without MISSING."""
  for rank in (0, 1):
    digits_records(os.path.join(_data_root(model_dir), str(rank)))
  os.remove(os.path.join(_data_root(model_dir), "1", MISSING))


def missing_shard_restore(model_dir: str) -> None:
  shutil.copy(os.path.join(_data_root(model_dir), "0", MISSING), os.path.join(_data_root(model_dir), "1", MISSING))


def remove_data(model_dir: str) -> None:
  shutil.rmtree(_data_root(model_dir), ignore_errors=True)


def missing_shard_measure(job: Job, model_dir: str) -> dict:
  """One sentence, the same on both ranks, exit 2, and nothing in --model_dir."""
  errors = [l for l in job.user_lines() if l.startswith("error:")]
  written = sorted(os.listdir(model_dir)) if os.path.isdir(model_dir) else []
  same = len(errors) == 2 and len(set(errors)) == 1
  named = same and MISSING in errors[0] and "rank 1 on " in errors[0]  # the rank (and its host) that lacks it
  return {"written": written, "kept": named and job.proc.returncode == 2 and not written,
          "measured": [f"{len(errors)} error line{'s' if len(errors) != 1 else ''} "
                       f"({'the same on both ranks' if same else 'NOT one sentence on each rank'}, "
                       f"{'naming rank 1' if named else 'NOT naming rank 1 and the shard'}); "
                       f"--model_dir holds {', '.join(written) if written else 'nothing'}"]}


def missing_shard_resume(job: Job, model_dir: str, row: dict) -> dict:
  summary = _summary(model_dir) or {}
  return {"kept": summary.get("status") == "finished",
          "measured": [f"shard restored: the same command trained {summary.get('steps')} steps, status "
                       f"{summary.get('status')}"]}


# The held-out split 60 times: 18,000 images, 9,000 a rank at --eval_batch_size=1, 1.8 ms of CPU each
# for ResNet-20 (the step alone, one thread): an evaluation of 20 s and more, past mpirun's 10 s.
LONG_EVAL_COPIES = 60
LONG_EVAL_ARGS = ("--eval_batch_size=1", "--max_steps=24", "--noexport")


def long_eval_program(model_dir: str) -> list[str]:
  return [PYTHON, "train.py", f"--data_dir={_data_root(model_dir)}"]


def long_eval_setup(model_dir: str) -> None:
  digits_records(_data_root(model_dir), held_out_copies=LONG_EVAL_COPIES)


def heartbeat(model_dir: str, rank: int = 0) -> dict | None:
  """The rank's heartbeat file (training/watchdog.py: step, phase, ...; written every 2 s), or None."""
  try:
    with open(os.path.join(model_dir, "heartbeats", f"rank-{rank}.json")) as fh:
      return json.load(fh)
  except (OSError, ValueError):
    return None


def sigterm_in_eval(job: Job) -> dict:
  """SIGTERM to the launcher's process group (what a job manager's stop sends: mpirun passes it on
  and SIGKILLs the ranks odls_base_sigkill_timeout s later) once rank 0's heartbeat says it evaluates."""
  start = time.time()
  job.wait_until(lambda _: (heartbeat(job.model_dir) or {}).get("phase") == "eval", "the first evaluation")
  beat = heartbeat(job.model_dir)
  offset = len(job.stderr())
  os.killpg(job.proc.pid, signal.SIGTERM)
  seen, checkpoint = round(time.time() - start, 1), newest_checkpoint(job.model_dir)
  return {"step_at_fault": beat["step"], "seen_eval_after_s": seen, "checkpoint_at_fault": checkpoint,
          "log_offset": offset, "measured": [f"SIGTERM {seen} s after the launch, rank 0 evaluating at step "
                                             f"{beat['step']}, checkpoint {checkpoint} on disk"]}


def long_eval_measure(job: Job, model_dir: str) -> dict:
  """Killed in the evaluation (no stop line, no eval line), and the epoch's checkpoint on disk."""
  text = job.stderr()
  spe = DIGITS.num_train // 64
  evaluated = EVAL_LINE.search(text) is not None
  stopped = any(l.startswith("stopped:") for l in job.user_lines())
  checkpoint = newest_checkpoint(model_dir)
  how = ("the evaluation finished within the SIGKILL's 10 s: a stop line instead (the case is not measured)"
         if stopped or evaluated else "killed during the evaluation")
  return {"kept": checkpoint == spe and not stopped and not evaluated,
          "measured": [f"{how}; checkpoint {checkpoint} on disk (the epoch's last step is {spe})"]}


def long_eval_resume(job: Job, model_dir: str, row: dict) -> dict:
  """The restart resumes from the epoch's checkpoint and evaluates that epoch before its next step."""
  text = job.stderr()
  spe = DIGITS.num_train // 64
  resumed = RESUMED.search(text)
  first_eval = EVAL_LINE.search(text)
  next_step = next((m for m in PROGRESS.finditer(text) if int(m.group(2)) > spe), None)
  first = bool(first_eval and next_step) and abs(float(first_eval.group(1)) - 1.0) < 1e-6 \
      and first_eval.start() < next_step.start()
  return {"kept": first and bool(resumed) and int(resumed.group(1)) == spe,
          "measured": [f"the restart resumed from {resumed.group(1) if resumed else None} and evaluated epoch 1.00 "
                       f"before step {spe + 1}: {re.sub(' +', ' ', first_eval.group(0)) if first else 'NO'}"]}


# Two checkpoints of ResNet-20 without momentum slots (1.07 MiB each: a save writes the new one before
# it drops the old) fit; the SavedModel (1.63 MiB) beside one does not.
EXPORT_TMPFS = "2560k"
EXPORT_ARGS = ("--max_steps=10", "--momentum=0", "--keep_checkpoints=1")


def _size(path: str) -> int:
  """Bytes of the files under path (a file: its own)."""
  if os.path.isfile(path):
    return os.path.getsize(path)
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def export_measure(job: Job, model_dir: str) -> dict:
  """summary.json written (status finished, export_error in it), exit 0, no traceback, no export/; the
  sizes that made it so (the newest checkpoint, the space left on the tmpfs)."""
  summary = _summary(model_dir)
  error = (summary or {}).get("export_error")
  exported = os.path.exists(os.path.join(model_dir, "export"))
  fs = os.statvfs(model_dir)
  step = newest_checkpoint(model_dir)
  ckpt = sum(_size(os.path.join(model_dir, f)) for f in os.listdir(model_dir) if f.startswith(f"ckpt-{step}."))
  return {"kept": bool(summary) and summary.get("status") == "finished" and bool(error) and job.proc.returncode == 0
          and not job.rank_traceback() and not exported,
          "measured": [f"summary.json {'written, status ' + str(summary.get('status')) if summary else 'MISSING'}, "
                       f"export_error {'in it' if error else 'absent'}, export/ {'present' if exported else 'absent'}; "
                       f"a checkpoint {ckpt / 2**20:.2f} MiB, {fs.f_bavail * fs.f_frsize / 2**20:.2f} MiB left free"]}


def export_resume(job: Job, model_dir: str, row: dict) -> dict:
  """The restart of the finished run (the space freed) exports."""
  summary = _summary(model_dir) or {}
  export = os.path.join(model_dir, "export")
  exported = os.path.exists(os.path.join(export, "saved_model.pb"))
  size = f" ({_size(export) / 2**20:.2f} MiB)" if exported else ""
  return {"kept": exported and "export" in summary and "export_error" not in summary,
          "measured": [f"space freed, the same command: {'exported' + size if exported else 'NOT exported'}, "
                       f"summary status {summary.get('status')}, steps {summary.get('steps')}"]}


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
    # Issue 23: a run resumed on another shape, data that differ between hosts, a save before a long
    # evaluation, an export that fails (and, in faults_elastic, a joining host that dies in its set-up).
    Fault("resume-half-ranks", f"SIGTERM to horovodrun at step {HALF_STOP_AT} (epoch 1.30 at global batch 64, "
          f"--epochs={HALF_EPOCHS}), then the same command on 1 rank (global batch 32) to the end",
          _signal(signal.SIGTERM), args=(f"--epochs={HALF_EPOCHS}",), at_step=HALF_STOP_AT, same_command=True,
          resume_np=1, measure=half_ranks_before, measure_resume=half_ranks_after),
    Fault("missing-shard", f"rank 1's copy of --data_dir lacks {MISSING} (each rank its own copy, as two hosts); "
          "then the shard restored and the same command", None, args=(*DATA_ARGS, "--max_steps=5"), at_step=0,
          same_command=True, program=lambda model_dir: per_rank_data_dir(_data_root(model_dir)),
          setup=missing_shard_setup, before_resume=missing_shard_restore, teardown=remove_data,
          measure=missing_shard_measure, measure_resume=missing_shard_resume),
    Fault("sigterm-long-eval", "SIGTERM to horovodrun's process group (mpirun: SIGKILL 10 s later) during the first "
          f"epoch end's evaluation ({LONG_EVAL_COPIES * DIGITS.num_eval:,} held-out images, --eval_batch_size=1)",
          sigterm_in_eval, args=(*DATA_ARGS, *LONG_EVAL_ARGS), at_step=0, same_command=True,
          extra_env={"OMPI_MCA_odls_base_sigkill_timeout": "10"}, program=long_eval_program, gone_timeout=900,
          setup=long_eval_setup, teardown=remove_data, measure=long_eval_measure, measure_resume=long_eval_resume),
    Fault("export-disk-full", f"--model_dir on a {EXPORT_TMPFS} tmpfs: the checkpoints fit, the SavedModel does not; "
          "then the space freed and the same command", None, args=EXPORT_ARGS, at_step=0, same_command=True,
          setup=tmpfs(EXPORT_TMPFS)[0], teardown=tmpfs(EXPORT_TMPFS)[1], before_resume=remount("64m"),
          measure=export_measure, measure_resume=export_resume),
]


# ------------------------------------------------------------------ report --
def table(rows: list[dict]) -> str:
  """results/faults.md's table: per fault, before and after (pure: rows in, markdown out)."""
  out = ["| fault | launcher | before | after: what the user saw | exit | s to gone | left | "
         "step / checkpoint (lost) | restart | the row's promise, measured |", "|---" * 10 + "|"]
  for r in rows:
    restart = (f"resumed from {r['resumed_from']}, exit {r['resume_exit_status']}" if r["resumed_from"] is not None
               else f"fresh start, exit {r['resume_exit_status']}")
    line = r["line"].replace("|", "\\|")
    out.append(f"| {r['fault']}: {r['what']} | {r['launcher']} | {BEFORE.get(r['fault'], '(new)')} | "
               f"`{line}`{' (traceback)' if r['traceback'] else ''} | {r['exit_status']} | "
               f"{r['seconds_to_gone']} | {r['processes_left']} | {r['last_step']} / "
               f"{r['checkpoint_step']} ({r['steps_lost']}) | {restart} | {promise(r)} |")
  return "\n".join(out)


def promise(row: dict) -> str:
  """The last cell: whether the row kept what it promises (docs/faults.md), then what it measured;
  empty for rows whose promise is the other columns alone."""
  if "kept" not in row:
    return ""
  said = "; ".join(row.get("measured", [])).replace("|", "\\|")
  return f"{'kept' if row['kept'] else '**not kept**'}: {said}" if said else ("kept" if row["kept"] else "**not kept**")


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
same command again (a sane LR for the diverged rows; for the rows whose promise covers the whole
run, the command as it was, to its end). "the row's promise, measured": what those rows measured
against the promise docs/faults.md states for them (the processes left and the restart's exit
included). Exit statuses: 75 stopped by a signal after a
checkpoint (resumable), 5 a peer lost (another rank died), 4 stalled, 3 diverged, 2 bad input;
horovodrun killed by the signal itself shows as a negative number (-15: SIGTERM). How each fault
is handled: docs/faults.md.

{table(rows)}
{elastic_section(out_dir)}""")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--only", default="", help="comma-separated fault names (default: all)")
  parser.add_argument("--out_dir", default=os.path.join(REPO, "results"))
  parser.add_argument("--elastic_launches", type=int, default=faults_elastic.LAUNCHES,
                      help="launches of each elastic lost-host row, its hangs counted (default: %(default)s)")
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
    elastic_rows, commit = faults_elastic.rows(args.only, workdir, args.elastic_launches)  # 2 emulated hosts
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

{faults_elastic.__doc__.split(chr(10) * 2, 2)[2].strip().replace("LOSE_AT", str(faults_elastic.LOSE_AT))
    .replace("JOIN_FROZEN_S", f"{faults_elastic.JOIN_FROZEN_S} s")}

{faults_elastic.table(report["rows"], report["resnet50_commit"], BEFORE)}
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
