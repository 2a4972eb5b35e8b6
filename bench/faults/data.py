"""The data issue 23's rows of `make faults` read, and the row whose data differ between hosts: the
digits records as an ImageNet-layout set (--dataset=imagenet --image_size=8), which train.py scans at
start-up, and missing-shard, rank 1's copy of --data_dir without one shard (each rank its own copy,
as two hosts): one sentence naming the rank and the shard, exit 2, nothing written; restored, the
same command trains.
"""
import json
import os
import shutil
import subprocess

from bench.faults.run import read_summary
from bench.harness.launches import PYTHON, REPO, Job
from bench.harness.slurm_jobs import env
from input.datasets import DIGITS  # metadata only: no TensorFlow in this process


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


def data_root(model_dir: str) -> str:
  return f"{model_dir}.data"


def missing_shard_setup(model_dir: str) -> None:
  """Two copies of the set, <model_dir>.data/0 and /1 (one per rank, as two hosts), rank 1's without MISSING."""
  for rank in (0, 1):
    digits_records(os.path.join(data_root(model_dir), str(rank)))
  os.remove(os.path.join(data_root(model_dir), "1", MISSING))


def missing_shard_restore(model_dir: str) -> None:
  shutil.copy(os.path.join(data_root(model_dir), "0", MISSING), os.path.join(data_root(model_dir), "1", MISSING))


def remove_data(model_dir: str) -> None:
  shutil.rmtree(data_root(model_dir), ignore_errors=True)


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

