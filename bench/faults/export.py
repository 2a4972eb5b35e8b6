"""export-disk-full, a row of `make faults` (issue 23): an export that does not fit. --model_dir on a
tmpfs where the checkpoints fit and the SavedModel does not: summary.json written with export_error,
exit 0, no traceback; the space freed, the same command says the run finished, trains nothing,
leaves summary.json as it was and exports the SavedModel.
"""
import hashlib
import os
import re

from bench.faults.run import EVAL_LINE, read_summary
from bench.harness.launches import STEP_LINE, Job, newest_checkpoint


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
