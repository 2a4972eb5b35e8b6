"""Issue 23's rows of `make faults` (bench/faults/__main__.py's table), what each measures against the promise
docs/faults.md states for it: a run resumed on half its ranks, a shard missing on one host, a stop
during a long evaluation, an export that does not fit; and the digits records they read as an
ImageNet-layout set (--dataset=imagenet --image_size=8), which train.py scans at start-up.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

from bench.faults.run import RESUMED, read_summary
from bench.harness.launches import PYTHON, REPO, STEP_LINE, USER_LINE, Job, newest_checkpoint
from bench.harness.slurm_jobs import env
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
  """The rank's heartbeat file (training/ending/watchdog.py: step, phase, ...; written every 2 s), or None."""
  try:
    with open(os.path.join(model_dir, "heartbeats", f"rank-{rank}.json")) as fh:
      return json.load(fh)
  except (OSError, ValueError):
    return None


STOP_BOUND_S = 60  # the ranks awaited this long after the SIGTERM
# mpirun (Open MPI 4.1), given SIGTERM, sends its ranks SIGCONT at once, SIGTERM odls_base_sigkill_timeout
# (the row's 10) s later, and SIGKILL about as long again (strace of mpirun here: SIGCONT at 0 s,
# SIGTERM at 10.0 s, SIGKILL at 18.9 s): the ranks must be gone before the SIGKILL.
SIGKILL_TIMEOUT_S = 10
SIGKILL_AFTER_S = 2 * SIGKILL_TIMEOUT_S


def _ranks_of(job: Job) -> set[int]:
  """The job's ranks: its `python train.py` processes (mpirun's command line names train.py too)."""
  pids = set()
  for pid in job.alive():
    try:
      if job._seen[pid].cmdline()[1:2] == ["train.py"]:
        pids.add(pid)
    except Exception:  # noqa: BLE001  (gone meanwhile)
      continue
  return pids


def sigterm_in_eval(job: Job) -> dict:
  """SIGTERM to the launcher's process group (what a job manager's stop sends: horovodrun's shell ends
  at once, which each rank's launcher watch sees within a second, and mpirun passes the signal on as
  above) once rank 0's heartbeat says it evaluates; then the seconds until rank 0 wrote summary.json
  (it does as it stops; its `stopped:` line reaches the log only when mpirun exits, which lingers) and
  until the ranks' processes were gone."""
  start = time.time()
  job.wait_until(lambda _: (heartbeat(job.model_dir) or {}).get("phase") == "eval", "the first evaluation")
  beat, ranks = heartbeat(job.model_dir), _ranks_of(job)
  offset = len(job.stderr())
  os.killpg(job.proc.pid, signal.SIGTERM)
  sent, seen, checkpoint = time.time(), round(time.time() - start, 1), newest_checkpoint(job.model_dir)
  summary_s = ranks_s = None
  while time.time() - sent < STOP_BOUND_S:
    if summary_s is None and os.path.exists(os.path.join(job.model_dir, "summary.json")):
      summary_s = round(time.time() - sent, 1)
    if not ranks & job.alive():  # (no rank found: None, the job awaited to its end)
      ranks_s = round(time.time() - sent, 1) if ranks else None
      break
    time.sleep(0.05)
  return {"step_at_fault": beat["step"], "seen_eval_after_s": seen, "checkpoint_at_fault": checkpoint,
          "seconds_to_summary": summary_s, "seconds_to_ranks_gone": ranks_s, "log_offset": offset, "fault_time": sent,
          "measured": [f"SIGTERM {seen} s after the launch, rank 0 evaluating at step {beat['step']}, checkpoint "
                       f"{checkpoint} on disk"]}


def stopped_in_eval(row: dict) -> dict:
  """sigterm-long-eval's verdict on its first run (pure: the row): the stop during the epoch end's
  evaluation ended it between batches: the `stopped:` line after the SIGTERM at the epoch's last step,
  with that step's checkpoint (saved before the evaluation), summary.json written (status stopped) and
  the ranks gone before mpirun's SIGKILL (SIGKILL_AFTER_S); no eval line (it did not complete); the
  ranks' 75 where mpirun reported them (in its abort path it reports none: the stop line's is theirs)."""
  spe, exits = DIGITS.num_train // 64, row.get("rank_exits") or []
  summary_s, ranks_s = row.get("seconds_to_summary"), row.get("seconds_to_ranks_gone")
  said = re.match(rf"stopped: .* at step {spe} \(epoch [\d.]+\); checkpoint \S*ckpt-{spe}; .*\(exit 75\)$",
                  row["line"] or "")
  in_time = (summary_s is not None and ranks_s is not None and ranks_s < SIGKILL_AFTER_S
             and row.get("summary_status") == "stopped")
  evaluated = row.get("evaluated_in_run", True)
  kept = bool(said) and in_time and not evaluated and row["checkpoint_step"] == spe and all(e == 75 for e in exits)
  return {"kept": kept, "measured": [
      (f"`stopped:` at step {spe} with ckpt-{spe}" if said else f"NO stop line at step {spe} with its checkpoint")
      + f"; summary.json (status {row.get('summary_status')}) written {summary_s} s and the ranks gone {ranks_s} s "
      f"after the SIGTERM ({'before' if in_time else 'NOT before'} mpirun's SIGKILL, {SIGKILL_AFTER_S} s: its SIGTERM "
      f"comes at {SIGKILL_TIMEOUT_S} s)",
      f"the evaluation {'COMPLETED (an eval line)' if evaluated else 'not completed (no eval line)'}; newest "
      f"checkpoint {row['checkpoint_step']} (the epoch's last step is {spe}); the ranks' exits as mpirun "
      f"reported them: {', '.join(map(str, exits)) or 'none reported'}"]}


def long_eval_measure(job: Job, model_dir: str) -> dict:
  """Whether this run printed an eval line (its evaluation completed): stopped_in_eval's."""
  return {"evaluated_in_run": EVAL_LINE.search(job.stderr()) is not None}


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
  sizes that made it so (the newest checkpoint, the space left on the tmpfs); summary.json's bytes'
  hash, which the restart must leave as they are."""
  summary = read_summary(model_dir)
  error = (summary or {}).get("export_error")
  exported = os.path.exists(os.path.join(model_dir, "export"))
  fs = os.statvfs(model_dir)
  step = newest_checkpoint(model_dir)
  ckpt = sum(_size(os.path.join(model_dir, f)) for f in os.listdir(model_dir) if f.startswith(f"ckpt-{step}."))
  return {"kept": bool(summary) and summary.get("status") == "finished" and bool(error) and job.proc.returncode == 0
          and not job.rank_traceback() and not exported,
          "summary_sha256": _sha256(os.path.join(model_dir, "summary.json")),
          "measured": [f"summary.json {'written, status ' + str(summary.get('status')) if summary else 'MISSING'}, "
                       f"export_error {'in it' if error else 'absent'}, export/ {'present' if exported else 'absent'}; "
                       f"a checkpoint {ckpt / 2**20:.2f} MiB, {fs.f_bavail * fs.f_frsize / 2**20:.2f} MiB left free"]}


OVER_LINE = re.compile(r"this run already finished at step (\d+) \(epoch [\d.]+\), .*; nothing trained, summary.json "
                       r"kept")


def finished_again(text: str, step: int | None, summary_kept: bool, exported: bool) -> dict:
  """Pure: a finished run started again (text: its log) says so in one line, trains nothing (no
  progress or eval line), leaves summary.json as it was, and exports the missing SavedModel."""
  lines = [m for m in OVER_LINE.finditer(text)]
  said = len(lines) == 1 and int(lines[0].group(1)) == step
  trained = STEP_LINE.search(text) is not None or EVAL_LINE.search(text) is not None
  return {"kept": said and not trained and summary_kept and exported, "measured": [
      f"space freed, the same command: {'one line' if said else f'{len(lines)} lines (want 1)'} saying it finished "
      f"at step {step}, {'TRAINED or evaluated' if trained else 'nothing trained'}, summary.json "
      f"{'as it was' if summary_kept else 'CHANGED'}, the SavedModel {'exported' if exported else 'NOT exported'}"]}


def export_resume(job: Job, model_dir: str, row: dict) -> dict:
  """The restart of the finished run (the space freed): finished_again, and the export's size."""
  export = os.path.join(model_dir, "export")
  exported = os.path.exists(os.path.join(export, "saved_model.pb"))
  before = row.get("summary_sha256")
  kept = before is not None and _sha256(os.path.join(model_dir, "summary.json")) == before
  found = finished_again(job.stderr(), newest_checkpoint(model_dir), kept, exported)
  if exported:
    found["measured"][0] += f" ({_size(export) / 2**20:.2f} MiB)"
  return found


def _sha256(path: str) -> str | None:
  return hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.exists(path) else None
