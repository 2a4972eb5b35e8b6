"""Issue 23's rows of `make faults` (bench/faults.py's table), what each measures against the promise
docs/faults.md states for it: a run resumed on half its ranks, a shard missing on one host, a stop
during a long evaluation, an export that does not fit; and the digits records they read as an
ImageNet-layout set (--dataset=imagenet --image_size=8), which train.py scans at start-up.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time

from bench.faults_run import RESUMED, read_summary
from bench.launches import PYTHON, REPO, Job, newest_checkpoint
from bench.slurm_jobs import env
from input.datasets import DIGITS  # metadata only: no TensorFlow in this process


# ------------------------------------------ issue 23: what the rows measure --
PROGRESS = re.compile(r"epoch +([\d.]+) +step +(\d+)/(\d+) +loss \S+ +top1 \S+ +lr ([\d.]+)")
EVAL_LINE = re.compile(r"epoch +([\d.]+) +eval top1 ([\d.]+)")
RESUMED_LINE = re.compile(r"(resumed from \S+ at step \d+: .*)$", re.M)
HALF_EPOCHS = 4          # resume-half-ranks: --epochs
HALF_STOP_AT = 30        # ... SIGTERM once rank 0 reported this step: epoch 1.30 at global batch 64


def _progress(text: str) -> list[tuple[float, int, float]]:
  """(epoch, step of the schedule, LR) of each of rank 0's progress lines in text."""
  return [(float(e), int(s), float(lr)) for e, s, _, lr in PROGRESS.findall(text)]



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
  steps, summary = _progress(text), read_summary(model_dir) or {}
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
  summary = read_summary(model_dir) or {}
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
  summary = read_summary(model_dir)
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
  summary = read_summary(model_dir) or {}
  export = os.path.join(model_dir, "export")
  exported = os.path.exists(os.path.join(export, "saved_model.pb"))
  size = f" ({_size(export) / 2**20:.2f} MiB)" if exported else ""
  return {"kept": exported and "export" in summary and "export_error" not in summary,
          "measured": [f"space freed, the same command: {'exported' + size if exported else 'NOT exported'}, "
                       f"summary status {summary.get('status')}, steps {summary.get('steps')}"]}

