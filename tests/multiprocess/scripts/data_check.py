"""checks.py data, on 2 ranks: ranks whose --data_dir holds different files are stopped before
training with one sentence naming each rank and its counts, the same on both, by the calls
train.py makes (the flag check's scan, then the mode's first_error; --elastic: agree_on_data
at the start of each world). Each rank writes a small TFRecord set of its own into a temporary
directory, as two hosts would hold two copies of one --data_dir:

  identical    both hold 12 training records in 4 shards, 4 held out: no sentence
  fewer        rank 1 holds a set converted into 3 shards with 9 records (complete, so its own
               scan passes): both ranks get the sentence with 12 / 4 in 5 files and 9 / 4 in 4 files
  missing      rank 1 lacks train-00002-of-00004: its scan names the file, both ranks stop with it
"""
import os
import shutil
import socket
import tempfile
import types

import horovod.tensorflow as hvd

from comm import sync
from flags import data as data_flags
from input import records
from training import modes


def data_dir(world, train: int, shards: int, drop: str = "") -> str:
  """A directory of this rank's: `train` records in `shards` shards, 4 held out, `drop` removed."""
  path = tempfile.mkdtemp(prefix=f"data_check_rank{world.rank}_")
  examples = [(b"not decoded before training", i % 10) for i in range(train)]
  records.write_shards(examples, path, "train", shards)
  records.write_shards(examples[:4], path, "eval", 1)
  if drop:
    os.remove(os.path.join(path, drop))
  return path


def scan(world, path):
  """(problem, scanned) of this rank's directory, as flags.check_paths has them in train.py's setup."""
  f = types.SimpleNamespace(dataset="imagenet", data_dir=path, batch_size=2, global_batch_size=0,
                            eval_batch_size=0, shuffle_buffer=64, image_size=32, skip_corrupt=False,
                            prepare_next_epoch=True,
                            accumulation_steps=1,
                            batch_policy="fixed", max_global_batch=0, batch_decide_every=50)
  return data_flags.check(data_flags.build(f, world), world)


def run(world, args):
  """Raises AssertionError when the ranks do not both get the expected verdict; no args."""
  assert world.size == 2 and not args, f"data takes no arguments and 2 ranks, not {world.size}"
  mode = modes.Fixed(hvd, world)
  host = socket.gethostname()
  cases = {
      "identical": ((12, 4, ""), (12, 4, ""), None),
      "fewer": ((12, 4, ""), (9, 3, ""),
                f"the ranks do not hold the same data: rank 0 on {host} has 12 training / 4 held-out records in 5 "
                f"files, rank 1 on {host} has 9 / 4 in 4 files; make --data_dir hold the same files on every host."),
      "missing": ((12, 4, ""), (12, 4, "train-00002-of-00004"),
                  "is missing train-00002-of-00004 of the 4 shards of its set"),
  }
  for case, (first, second, want) in cases.items():
    path = data_dir(world, *(first if world.rank == 0 else second))
    try:
      problem, scanned = scan(world, path)
      verdict = mode.first_error(problem, scanned)  # train.py's setup: one gather
      # --elastic, in each world (where a rank's problem stops it alone, before): every rank enters it
      # here, the case being the same on both.
      elastic = sync.agree_on_data(hvd, scanned) if case != "missing" else None
    finally:
      shutil.rmtree(path)
    if want is None:
      assert verdict is None and elastic is None, f"{case}: {verdict!r} / {elastic!r}"
    elif case == "missing":
      # Found on rank 1's host only: every rank's line names where.
      prefix = f"rank 1 on {socket.gethostname()}: --data_dir="
      assert verdict and want in verdict and verdict.startswith(prefix), f"{case}: {verdict!r}"
      assert "data_check_rank1_" in verdict, f"{case}: rank 1's directory is not the one named: {verdict!r}"
    else:
      assert verdict == want and elastic == want, f"{case}: {verdict!r} / {elastic!r}"
