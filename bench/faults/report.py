"""results/faults.{md,json}: `make faults`' report (bench/faults/), its table from the rows (pure:
rows in, markdown out), a partial run's rows merged into the report, and the elastic rows' own file
(results/faults_elastic.json) and section.
"""
import json
import os
import subprocess

from bench.faults import elastic
from bench.faults.run import BASE_ARGS, FAULT_AT_STEP, GONE_TIMEOUT_S, Fault, launcher_of
from bench.faults.verdicts import promise
from progress import emit, write_json_atomic

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


def measured_at(repo: str) -> dict:
  """The commit the rows are measured at (git rev-parse HEAD) and whether the tree differed from it:
  the tracked files changed (others work in this checkout too, so which ones is said), results/ aside:
  what this program and the others write there is no part of what runs (one --only run after another
  read as dirty for the first's results alone)."""
  def git(*args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout
  changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
             if line and not line[3:].startswith("results/")]
  return {"sha": git("rev-parse", "HEAD").strip() or None, "dirty": bool(changed), "changed": changed}


WORKDIR = "$WORKDIR"  # the rows' temporary directory, as the report writes it


def in_workdir(rows: list[dict], workdir: str) -> list[dict]:
  """The rows with the temporary directory they ran in (workdir: their model_dirs, data and hosts
  files) written WORKDIR in every line and measurement they quote: the report names no directory of
  the machine it ran on, and a row reads the same from one run to the next."""
  def relative(x):
    if isinstance(x, str):
      return x.replace(workdir, WORKDIR)
    if isinstance(x, dict):
      return {k: relative(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
      return [relative(v) for v in x]
    return x
  return [relative(r) for r in rows]


def stamped(rows: list[dict], commit: dict) -> list[dict]:
  """The rows measured now, each with the commit it was measured at ({sha, dirty})."""
  return [dict(r, commit={"sha": commit["sha"], "dirty": commit["dirty"]}) for r in rows]


def commit_note(rows: list[dict], commit: dict | None) -> str:
  """The report's sentence on the commit (pure): this run's, whether the tree was dirty, and the rows
  a partial run (--only) kept from other commits, or from before commits were recorded."""
  if not commit:
    return "The commit measured at was not recorded."
  dirty = (f", with uncommitted changes to {len(commit['changed'])} tracked file"
           f"{'s' if len(commit['changed']) != 1 else ''} ({', '.join(commit['changed'][:8])}"
           f"{', ...' if len(commit['changed']) > 8 else ''})" if commit["dirty"] else ", the tree clean")
  others = [f"{r['fault']} ({(r['commit']['sha'] or '?')[:12]}{', dirty' if r['commit']['dirty'] else ''})"
            if r.get("commit") else f"{r['fault']} (unrecorded)"
            for r in rows if (r.get("commit") or {}).get("sha") != commit["sha"]
            or (r.get("commit") or {}).get("dirty") != commit["dirty"]]
  note = f"Measured at commit `{(commit['sha'] or '?')[:12]}`{dirty}."
  return note + (f" Rows kept from an earlier run at another commit or tree: {', '.join(others)}." if others else "")


def write_report(rows: list[dict], out_dir: str, seconds: float, commit: dict | None = None) -> None:
  os.makedirs(out_dir, exist_ok=True)
  write_json_atomic(os.path.join(out_dir, "faults.json"),
                    {"rows": rows, "wall_seconds": round(seconds), "commit": commit})
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
run, the command as it was, to its end; the rows that judge a restart say theirs). "the row's
promise, measured": whether the row kept what docs/faults.md promises for its fault, computed from
what it measured (the processes left and the restart's exit included), then what it measured; a
row without one was measured before rows had verdicts. Exit statuses: 75 stopped by a signal after a
checkpoint (resumable), 5 a peer lost (another rank died), 4 stalled, 3 diverged, 2 bad input;
horovodrun killed by the signal itself shows as a negative number (-15: SIGTERM). The lines quoted
write the temporary directory the rows ran in as {WORKDIR}. How each fault is handled: docs/faults.md.
{commit_note(rows, commit)}

{table(rows)}
{elastic_section(out_dir)}""")


ELASTIC_REPORT = "faults_elastic.json"


def write_elastic(rows: list[dict], resnet50: dict | None, out_dir: str) -> None:
  """The elastic rows in their own file, in place of the same faults' rows (so --only keeps the others);
  resnet50: ResNet-50's commit time (None: not measured this time, the old one kept)."""
  path = os.path.join(out_dir, ELASTIC_REPORT)
  old = json.load(open(path)) if os.path.exists(path) else {"rows": [], "resnet50_commit": None}
  by_name = {r["fault"]: r for r in old["rows"]} | {r["fault"]: r for r in rows}
  write_json_atomic(path, {"rows": list(by_name.values()), "resnet50_commit": resnet50 or old["resnet50_commit"]})


def row_commits(rows: list[dict]) -> str:
  """Which commit each row was measured at (pure), rows of one commit together."""
  by = {}
  for r in rows:
    c = r.get("commit")
    key = f"`{(c['sha'] or '?')[:12]}`{' (dirty tree)' if c['dirty'] else ''}" if c else "an unrecorded commit"
    by.setdefault(key, []).append(r["fault"])
  return "; ".join(f"{', '.join(names)} at {key}" for key, names in by.items())


def elastic_section(out_dir: str) -> str:
  """results/faults.md's elastic section, from faults_elastic.json when it exists."""
  path = os.path.join(out_dir, ELASTIC_REPORT)
  if not os.path.exists(path):
    return ""
  with open(path) as fh:
    report = json.load(fh)
  return f"""
## Elastic training: a host lost, and back (`--elastic`)

{elastic.__doc__.split(chr(10) * 2, 2)[2].strip().replace("LOSE_AT", str(elastic.LOSE_AT))
    .replace("JOIN_FROZEN_S", f"{elastic.JOIN_FROZEN_S} s")}

{elastic_table(report["rows"], report["resnet50_commit"], BEFORE)}

Measured: {row_commits(report["rows"])}.
"""


def elastic_table(rows: list[dict], commit: dict | None, before: dict | None = None) -> str:
  """The elastic section of results/faults.md (pure: rows in, markdown out). before: what a row's
  fault did before the work that fixed it (BEFORE), '(new)' for the others."""
  before = before or {}
  out = ["| fault | before | allreduce | s from the loss to training | steps lost (commit every) | s from the "
         "return to training together | worlds | a commit / a step (ms) | commit cost per step | exit | left | final "
         "top-1 | replicas identical | the row's promise, measured |", "|---" * 14 + "|"]
  for r in rows:
    if "seconds_to_training" not in r:
      out.append(f"| {r['fault']} | {before.get(r['fault'], '(new)')} | {r['line']} |" + " |" * 10 + f" {promise(r)} |")
      continue
    joined = r["seconds_to_join"] if r["seconds_to_join"] is not None else "never: " + (
        "killed in its set-up" if r.get("killed_in_setup") else "killed after its set-up (not the case measured)")
    if r.get("return_s") is not None:  # the survivor's own pause for the return (its ledger's last world change)
      joined = f"{joined}; the survivor paused {r['return_s']} s (re-init {r['return_reinit_s']} s)"
    counted = (f" ({r['launches']} launches: {r['hangs']} hung, {r['failed']} failed otherwise; medians over the "
               f"{r['finished']} that finished)" if "launches" in r else "")
    out.append(f"| {r['fault']}: {r['what']}{counted} | {before.get(r['fault'], '(new)')} | {r['allreduce']} | "
               f"{r['seconds_to_training']} | {', '.join(map(str, r['steps_lost']))} ({r['commit_every']}) | "
               f"{joined} | "
               f"{' -> '.join(map(str, r['worlds']))} | {r['commit_ms']} / {r['step_ms']} | "
               f"{r['commit_per_step']:.2%} | {r['exit_status']} | {r['processes_left']} | "
               f"{r['final_top1']:.4f} | {r['replicas_identical']} | {promise(r)} |")
  if commit:
    ms = commit["seconds"] * 1000
    out.append(f"\nA commit of ResNet-50's state with SGD momentum ({commit['bytes'] / 2**20:.0f} MiB copied to host "
               f"memory on every rank, this CPU, median of 5): {ms:.0f} ms, so {ms / 10:.0f} ms a step at "
               f"--elastic_commit_every=10; weigh it against the step time of the machine it runs on and the "
               f"steps a lost host costs (at most --elastic_commit_every).")
  return "\n".join(out)


def old_seconds(path: str) -> float:
  if not os.path.exists(path):
    return 0.0
  with open(path) as fh:
    return json.load(fh).get("wall_seconds", 0)


def failed_row(fault: Fault, error: Exception) -> dict:
  """The row of a fault whose measurement failed: the reason in the line, nothing measured."""
  emit(f"faults: {fault.name}: not measured: {str(error).splitlines()[0]}")
  return {"fault": fault.name, "what": fault.what, "launcher": launcher_of(fault), "seconds_to_gone": None,
          "exit_status": None, "step_at_fault": None, "last_step": None, "checkpoint_step": None,
          "processes_left": None, "line": f"not measured: {str(error).splitlines()[0]}", "traceback": False,
          "steps_lost": None, "resumed_from": None, "resume_exit_status": None, "kept": False,
          "measured": ["NOT measured: the row's launch failed (its line says why)"]}


def merged(rows: list[dict], path: str, seconds: float, order: list[str]) -> tuple[list[dict], float]:
  """These rows in place of the same faults' rows of the report at path, in `order` (the names of
  bench/faults.FAULTS; the others, Slurm's, after them as they came)."""
  if not os.path.exists(path):
    return rows, seconds
  with open(path) as fh:
    old = json.load(fh)
  by_name = {r["fault"]: r for r in old["rows"]} | {r["fault"]: r for r in rows}
  order = list(order) + [name for name in by_name if name not in order]
  return [by_name[name] for name in order if name in by_name], old.get("wall_seconds", 0) + seconds

