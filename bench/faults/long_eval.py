"""sigterm-long-eval, a row of `make faults` (issue 23): a stop during a long evaluation. SIGTERM to
horovodrun's process group while rank 0 evaluates the first epoch's end on 18,000 held-out images,
one a batch; the ranks must stop between evaluation batches, checkpointed, before mpirun's SIGKILL,
and the same command must evaluate that epoch again before it trains on. The Slurm row of a notice
during an evaluation (slurm.py) reads rank 0's heartbeat as this one does.
"""
import json
import os
import re
import signal
import time

from bench.faults.data import data_root, digits_records
from bench.faults.run import EVAL_LINE, PROGRESS, RESUMED
from bench.harness.launches import PYTHON, Job, newest_checkpoint
from input.datasets import DIGITS  # metadata only: no TensorFlow in this process


# The held-out split 60 times: 18,000 images, 9,000 a rank at --eval_batch_size=1, 1.8 ms of CPU each
# for ResNet-20 (the step alone, one thread): an evaluation of 20 s and more, past mpirun's 10 s.
LONG_EVAL_COPIES = 60
LONG_EVAL_ARGS = ("--eval_batch_size=1", "--max_steps=24", "--noexport")


def long_eval_program(model_dir: str) -> list[str]:
  return [PYTHON, "train.py", f"--data_dir={data_root(model_dir)}"]


def long_eval_setup(model_dir: str) -> None:
  digits_records(data_root(model_dir), held_out_copies=LONG_EVAL_COPIES)


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

