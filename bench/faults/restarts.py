"""Rows of `make faults` (bench/faults/__main__.py's table) whose promise is what a restart does with a run's
checkpoint, each with its own restart (bench/faults/run.Fault.restart):

adascale-requeue-1rank: 2 ranks `--lr_scaling=adascale --global_batch_size=64` stopped (SIGTERM to
  horovodrun) mid-run, then the same command on 1 rank, where it used to be refused (exit 2: "trained
  with --base_batch=32, not 64"): the run pins its first world's per-rank batch as AdaScale's base
  batch, so the restart is accepted, resumes at the tau it stopped at with base batch 32
  (summary.json's adascale.base_batch) and finishes. Should the same command be refused, the restart
  is tried once more with --accumulation_steps=2 (one rank measures the noise scale only so) to
  measure the rest; the row is not kept either way.
eval-only-ranks: a short run to its end, then `train.py --eval_only` with the run's flags on 1 rank
  and on 2: both print the eval line the run printed at that step (BatchNorm's statistics are agreed
  before every save and evaluation, so a checkpoint is one model), and write nothing.
resume-half-ranks (issue 23): SIGTERM to horovodrun at step HALF_STOP_AT of 2 ranks, then the same
  command on 1 rank (global batch 32) to the end: the epoch goes on where it stopped, the LR follows
  the global batch, and the run trains its --epochs' images, no more, no fewer.
"""
import hashlib
import os
import re

from bench.faults.run import BASE_ARGS, PROGRESS, RESUMED, Fault, read_summary, user_line
from bench.harness.launches import Job, newest_checkpoint
from input.datasets import DIGITS  # metadata only: no TensorFlow in this process

ADASCALE_ARGS = ("--lr_scaling=adascale", "--global_batch_size=64", "--epochs=3", "--noexport")
ADASCALE_STOP_AT = 30  # updates: mid-way through the second epoch of the base batch's schedule
FALLBACK = "--accumulation_steps=2"
STOP_LINE = re.compile(r"stopped: .* at step (\d+) \(epoch ([\d.]+)\)")
ADA_RESUMED = re.compile(r"resumed from \S*ckpt-(\d+) at step (\d+): epoch ([\d.]+), .*\(AdaScale: tau ([\d.]+) "
                         r"base-batch steps\)")
UPDATE_LINE = re.compile(r"epoch +([\d.]+) +update +(\d+) ")
EVAL_ONLY_ARGS = ("--max_steps=30", "--noexport")
EVAL_LINE = re.compile(r"epoch +[\d.]+  eval top1 [\d.]+  top5 [\d.]+  loss [\d.]+")
EVALUATING = re.compile(r"evaluating \S*ckpt-(\d+) \(step (\d+), epoch ([\d.]+)\) on (\d+) ranks")

RESUMED_LINE = re.compile(r"(resumed from \S+ at step \d+: .*)$", re.M)
HALF_EPOCHS = 4          # resume-half-ranks: --epochs
HALF_STOP_AT = 30        # ... SIGTERM once rank 0 reported this step: epoch 1.30 at global batch 64


def _sha(path: str) -> str | None:
  return hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.exists(path) else None


# ------------------------------------------------------------------- adascale-requeue-1rank --
def adascale_stopped(job: Job, model_dir: str) -> dict:
  """Where the 2-rank run stopped: its stop line's step and epoch, summary.json's tau and base batch."""
  line = STOP_LINE.search(job.stderr())
  ada = (read_summary(model_dir) or {}).get("adascale") or {}
  before = {"step": int(line.group(1)) if line else None, "epoch": float(line.group(2)) if line else None,
            "tau": ada.get("tau"), "base_batch": ada.get("base_batch")}
  return {"before": before, "measured": [
      f"2 ranks stopped at update {before['step']} (epoch {before['epoch']}), tau {before['tau']:.1f}, base batch "
      f"{before['base_batch']}" if line and ada else "NO stop line or no adascale entry in summary.json"],
      "kept": bool(line and ada)}


def adascale_resumed(text: str, summary: dict, before: dict) -> dict:
  """A restart on 1 rank that ran (pure: its log, its summary.json, the stop's figures): the resume
  line at the stop's tau and epoch, its first update's epoch near the stop's, summary.json's base
  batch 32 and status finished."""
  line, first = ADA_RESUMED.search(text), UPDATE_LINE.search(text)
  ada = summary.get("adascale") or {}
  tau = float(line.group(4)) if line else None
  same_tau = line is not None and before.get("tau") is not None and abs(tau - before["tau"]) < 0.051
  said_epoch = float(line.group(3)) if line else None
  same_epoch = said_epoch is not None and before.get("epoch") is not None and abs(said_epoch - before["epoch"]) < 0.011
  goes_on = (first is not None and before.get("epoch") is not None
             and abs(float(first.group(1)) - before["epoch"]) <= 0.1)
  done = ada.get("base_batch") == 32 and summary.get("status") == "finished"
  return {"kept": same_tau and same_epoch and goes_on and done, "measured": [
      f"resumed at tau {tau} ({'the stop' if same_tau else 'NOT the stop'}'s {before.get('tau') or 0:.1f}), its line "
      f"saying epoch {said_epoch} ({'the stop' if same_epoch else 'NOT the stop'}'s {before.get('epoch')})",
      f"first update at epoch {first.group(1) if first else None} ({'goes on' if goes_on else 'MOVED'})",
      f"summary.json: adascale.base_batch {ada.get('base_batch')}, status {summary.get('status')}, epochs "
      f"{summary.get('epochs')}"]}


def adascale_restart(fault: Fault, model_dir: str, row: dict) -> dict:
  """The same command on 1 rank; if refused, once more with FALLBACK to measure the rest."""
  out, kept, measured = None, True, []
  for extra in ((), (FALLBACK,)):
    with Job(model_dir, *BASE_ARGS, *fault.args, *extra, np_=1) as job:
      _, left = job.wait_gone(fault.gone_timeout)
      text, status = job.stderr(), job.proc.returncode
      found = RESUMED.search(text)
      columns = {"resumed_from": int(found.group(1)) if found else None, "resume_exit_status": status,
                 "resume_processes_left": len(left)}
      if status:
        columns.update(resume_line=user_line(job), resume_tail=text[-2000:])
    what = f"the same command{' with ' + FALLBACK if extra else ''} on 1 rank"
    if out is None:
      out = columns  # the row's restart: the same command
    if status:
      kept = False
      measured.append(f"{what} REFUSED (exit {status}{': below' if not extra else ': ' + columns['resume_line']})")
      if extra or "--accumulation_steps" not in columns["resume_line"]:
        break
      continue
    found = adascale_resumed(text, read_summary(model_dir) or {}, row.get("before") or {})
    kept = kept and found["kept"] and not left
    measured.append(f"{what}: accepted; " + "; ".join(found["measured"]))
    break
  row["measured"] = row.get("measured", []) + measured
  row["kept"] = row.get("kept", True) and kept
  return out


ADASCALE_REQUEUE = dict(
    what=f"SIGTERM to horovodrun at update {ADASCALE_STOP_AT} of 2 ranks `{' '.join(ADASCALE_ARGS[:2])}`, then the "
         "same command on 1 rank to the end",
    args=ADASCALE_ARGS, at_step=ADASCALE_STOP_AT, same_command=True, resume_np=1, measure=adascale_stopped,
    restart=adascale_restart)


# -------------------------------------------------------------------------- eval-only-ranks --
def run_printed(job: Job, model_dir: str) -> dict:
  """The run's last eval line (its last step's evaluation), its checkpoint and summary.json's hash."""
  lines = EVAL_LINE.findall(job.stderr())
  return {"printed": lines[-1] if lines else None, "summary_sha256": _sha(os.path.join(model_dir, "summary.json")),
          "kept": bool(lines) and job.proc.returncode == 0,
          "measured": [f"the run printed `{lines[-1] if lines else 'NO eval line'}` at step {job.step()}"]}


def eval_only_verdict(printed: str | None, step: int | None, launches: dict) -> dict:
  """Pure: each --eval_only launch ({ranks: (exit, its eval lines, the step it evaluated)}) printed one
  eval line, the run's at its checkpoint's step, and exited 0."""
  kept, measured = printed is not None, []
  for ranks, (status, lines, evaluated) in sorted(launches.items()):
    same = status == 0 and lines == [printed] and evaluated == step
    kept = kept and same
    measured.append(f"--eval_only on {ranks} rank{'s' if ranks > 1 else ''}: "
                    + (f"the same line (step {evaluated})" if same else
                       f"exit {status}, step {evaluated}, printed {lines or 'no eval line'} (DIFFERENT)"))
  return {"kept": kept, "measured": measured}


def eval_only_restart(fault: Fault, model_dir: str, row: dict) -> dict:
  """`--eval_only` with the run's flags on 1 rank, then on 2; summary.json and the checkpoints untouched."""
  step, launches, out = newest_checkpoint(model_dir), {}, None
  for ranks in (1, 2):
    with Job(model_dir, *BASE_ARGS, *fault.args, "--eval_only", np_=ranks) as job:
      _, left = job.wait_gone(fault.gone_timeout)
      text, found = job.stderr(), EVALUATING.search(job.stderr())
      launches[ranks] = (job.proc.returncode, EVAL_LINE.findall(text), int(found.group(2)) if found else None)
      columns = {"resumed_from": int(found.group(1)) if found else None, "resume_exit_status": job.proc.returncode,
                 "resume_processes_left": len(left)}
      if job.proc.returncode:
        columns.update(resume_line=user_line(job), resume_tail=text[-2000:])
    if out is None or columns["resume_exit_status"] or columns["resume_processes_left"]:
      out = dict(columns, resume_processes_left=columns["resume_processes_left"] + (
          out["resume_processes_left"] if out else 0))
  found = eval_only_verdict(row.get("printed"), step, launches)
  untouched = (_sha(os.path.join(model_dir, "summary.json")) == row.get("summary_sha256")
               and newest_checkpoint(model_dir) == step)
  found["measured"].append(f"summary.json and the checkpoints {'untouched' if untouched else 'CHANGED'}")
  row["measured"] = row.get("measured", []) + found["measured"]
  row["kept"] = row.get("kept", True) and found["kept"] and untouched
  return out


EVAL_ONLY = dict(
    what="a run to step 30 on 2 ranks, then `--eval_only` with its flags on 1 rank and on 2",
    args=EVAL_ONLY_ARGS, at_step=0, measure=run_printed, restart=eval_only_restart)


# ------------------------------------------------------------------------ resume-half-ranks --
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
