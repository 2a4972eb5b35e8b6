"""The verdicts of `make faults`' rows whose promise is their columns (pure: a row in, {"kept",
"measured"} out), each what docs/faults.md promises for its kind of fault:

  stopped      a signal (to the launcher, its group, or ranks): every rank finishes its step, rank 0
               checkpoints that step, every rank exits 75 after one `stopped:` line; nothing lost
  rank_killed  a rank SIGKILLed: the job ends (mpirun: exit 137, naming the rank; Gloo: the survivor's
               `error: a collective failed` line, exit 5, or the launcher's SIGKILL), no traceback,
               at most --checkpoint_every steps lost
  stalled      a rank stopped (SIGSTOP): one `stalled:` line naming it, exit 4
  ignored      SIGINT to horovodrun's pid alone: the documented limit, nothing happens and the run
               trains to its end
  damaged      the newest checkpoint truncated: set aside with one line, the one before it resumed
  disk_full    a save that does not fit: one `error:` line, exit 2, the earlier checkpoints resumed
  diverged     inf/NaN: one `diverged:` line, exit 3, no checkpoint written after the good one

Every row's processes left (0) and its restart (exit 0, nothing left) are judged by bench/faults/run
for every row that states a promise; these judge the rest. A verdict says what it measured, so a
broken promise is read off the table.
"""
import re

STOPPED = 75
STOP_LINE = re.compile(r"^stopped: .* at step (\d+) .*checkpoint \S*ckpt-(\d+); run the same command to resume "
                       r"\(exit 75\)$")
CHECKPOINT_EVERY = 5  # bench/faults/run.BASE_ARGS' --checkpoint_every: what a killed rank may lose


def _said(row: dict) -> str:
  return f"exit {row['exit_status']}" + (f" (the ranks' {', '.join(map(str, row['rank_exits']))}, as the launcher "
                                         "reported them)" if row.get("rank_exits") else "")


def _resumed(row: dict, want: int | None) -> tuple[bool, str]:
  ok = row.get("resumed_from") == want
  return ok, f"the restart resumed from {row.get('resumed_from')}{'' if ok else f' (want {want})'}"


def _verdict(checks: list[tuple[bool, str]]) -> dict:
  return {"kept": all(ok for ok, _ in checks), "measured": [said for _, said in checks]}


def stopped(row: dict) -> dict:
  """A stop signal: the `stopped:` line at the step reached, with that step's checkpoint (nothing
  lost), the ranks' 75 where the launcher reports it, no traceback, the restart from that checkpoint.
  The launcher's own status is the launcher's (docs/faults.md: horovodrun killed by the signal reports
  it, -15; over Gloo it exits 1 after `Process 0 exit with status code 75`)."""
  line = STOP_LINE.match(row["line"] or "")
  at = (int(line.group(1)), int(line.group(2))) if line else None
  exits = row.get("rank_exits") or []
  return _verdict([
      (bool(line) and at[0] == at[1] == row["last_step"] == row["checkpoint_step"],
       f"`stopped:` line at step {at[0]} with ckpt-{at[1]}, the last step {row['last_step']}, newest checkpoint "
       f"{row['checkpoint_step']}" if line else "NO `stopped:` line naming the step and its checkpoint"),
      (all(e == STOPPED for e in exits), _said(row)),
      (not row["traceback"], "no traceback" if not row["traceback"] else "a rank printed a TRACEBACK"),
      _resumed(row, row["checkpoint_step"])])


def rank_killed(row: dict) -> dict:
  """A rank SIGKILLed: the job ends at once, no traceback, at most CHECKPOINT_EVERY steps lost.
  mpirun ends the others and reports the rank's signal (137); over Gloo the survivor's collective
  fails (one `error:` line, exit 5) or never returns and the launcher's SIGKILL ends it (both seen)."""
  line = row["line"] or ""
  if row["launcher"].startswith("horovodrun MPI"):
    said = (row["exit_status"] == 137 and "exited on signal 9" in line, f"{_said(row)}: `{line[:80]}`")
  else:
    survivor = line.startswith("error: a collective failed") and "(exit 5)" in line
    said = (survivor or not line.startswith(("error", "stopped", "stalled", "diverged")),
            f"{_said(row)}: " + ("the survivor's `error: a collective failed ... (exit 5)`" if survivor else
                                 f"the survivor ended by the launcher (`{line[:80]}`)"))
  return _verdict([said, (not row["traceback"], "no traceback" if not row["traceback"] else "a TRACEBACK"),
                   (row["steps_lost"] <= CHECKPOINT_EVERY, f"{row['steps_lost']} steps lost (at most "
                                                           f"--checkpoint_every={CHECKPOINT_EVERY})"),
                   _resumed(row, row["checkpoint_step"])])


def stalled(rank: int):
  """A stopped rank: one `stalled:` line naming it (stopped or dead), exit 4, no more than
  CHECKPOINT_EVERY steps lost."""
  def verdict(row: dict) -> dict:
    line = row["line"] or ""
    named = line.startswith("stalled:") and re.search(rf"rank {rank} on \S+ \(pid \d+\) last heard .*stopped or dead",
                                                      line) is not None
    return _verdict([(named, f"`stalled:` line {'naming' if named else 'NOT naming'} rank {rank} (stopped or dead)"),
                     (row["exit_status"] == 4, _said(row)),
                     (row["steps_lost"] <= CHECKPOINT_EVERY, f"{row['steps_lost']} steps lost"),
                     _resumed(row, row["checkpoint_step"])])
  return verdict


def ignored(row: dict) -> dict:
  """SIGINT to horovodrun's pid alone (docs/faults.md: the one case left to the user): nothing
  happens, the run trains to its end, exit 0, no stop line."""
  finished = row["exit_status"] == 0 and row.get("summary_status") == "finished"
  return _verdict([(finished and not (row["line"] or "").startswith("stopped"),
                    f"the documented limit: nothing happened, the run trained to step {row['last_step']}, "
                    f"{_said(row)}, status {row.get('summary_status')}")])


def damaged(row: dict) -> dict:
  """The newest checkpoint cut short: one line sets it aside and names the one resumed; the run
  goes on to its end (exit 0), no traceback."""
  line = re.match(r"checkpoint ckpt-(\d+) is unreadable \(.*\); kept as ckpt-\1\.damaged\.\*; resuming from "
                  r"ckpt-(\d+)$", row["line"] or "")
  return _verdict([(bool(line) and int(line.group(2)) < int(line.group(1)),
                    f"set aside ckpt-{line.group(1)}, resumed from ckpt-{line.group(2)}" if line else
                    "NO line setting the damaged checkpoint aside"),
                   (row["exit_status"] == 0 and not row["traceback"], f"{_said(row)}, "
                    f"{'a TRACEBACK' if row['traceback'] else 'no traceback'}, the run to step {row['last_step']}")])


def disk_full(row: dict) -> dict:
  """A checkpoint that does not fit: one `error:` line (no space, what it needs), exit 2, no
  traceback; the restart (space freed) resumes from the newest checkpoint that was written whole."""
  line = row["line"] or ""
  said = line.startswith("error: cannot save checkpoint") and "No space left on device" in line
  return _verdict([(said, "one `error: cannot save checkpoint ... No space left on device` line" if said else
                    f"NOT the disk's sentence: `{line[:80]}`"),
                   (row["exit_status"] == 2 and not row["traceback"],
                    f"{_said(row)}, {'a TRACEBACK' if row['traceback'] else 'no traceback'}"),
                   _resumed(row, row["checkpoint_step"])])


def diverged(good: int):
  """inf/NaN from a run resumed at checkpoint `good`: one `diverged:` line, exit 3, no checkpoint
  written after `good`, no false warning of ranks that differ; a sane LR resumes from `good`."""
  def verdict(row: dict) -> dict:
    line = row["line"] or ""
    said = line.startswith("diverged:") and line.endswith("(exit 3)")
    return _verdict([(said and row["exit_status"] == 3, f"`diverged:` line {'' if said else 'MISSING, '}{_said(row)}"),
                     (row["checkpoint_step"] == good, f"newest checkpoint {row['checkpoint_step']} (the good {good})"),
                     (not row["false_divergence_warning"] and not row["traceback"],
                      "no false 'ranks hold different weights', no traceback" if not row["false_divergence_warning"]
                      and not row["traceback"] else "a FALSE warning or a traceback"),
                     _resumed(row, good)])
  return verdict


def promise(row: dict) -> str:
  """A table's last cell: whether the row kept what it promises (docs/faults.md), then what it
  measured; empty for a row with no verdict (one measured before every row had one)."""
  if "kept" not in row:
    return ""
  said = "; ".join(row.get("measured", [])).replace("|", "\\|")
  return f"{'kept' if row['kept'] else '**not kept**'}: {said}" if said else ("kept" if row["kept"] else "**not kept**")
