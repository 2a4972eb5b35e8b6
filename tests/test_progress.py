"""progress.Progress: which steps print a line, what the line says, the scalars TensorBoard gets;
under AdaScale the schedule's step is a fraction and the updates set the cadence."""
import glob
import re

import tensorflow as tf

from progress import Progress


def tags(logdir) -> dict[str, list[int]]:
  """TensorBoard tag -> the steps it was written at."""
  out = {}
  for path in glob.glob(str(logdir / "events.*")):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        out.setdefault(value.tag, []).append(event.step)
  return out


def test_a_line_every_log_every_steps_and_at_the_last(tmp_path, capsys):
  writer = tf.summary.create_file_writer(str(tmp_path))
  progress = Progress(True, 64, 32, 0, 7, 4, 3, writer)
  for step in range(1, 8):
    progress.step(step, 1.0, 16.0, 0.1)
  writer.flush()
  lines = capsys.readouterr().err.splitlines()
  assert [int(re.search(r"step +(\d+)/7", l).group(1)) for l in lines] == [3, 6, 7]
  assert tags(tmp_path)["train/lr"] == [3, 6, 7] and "adascale/gain" not in tags(tmp_path)


def test_under_adascale_the_updates_set_the_cadence_and_the_line_shows_r_and_both_epochs(tmp_path, capsys):
  writer = tf.summary.create_file_writer(str(tmp_path))
  # S = 8, r = 4: each update moves the schedule half a step of this batch; the end at schedule step 3.
  progress = Progress(True, 64, 32, 0, 3, 4, 2, writer, adascale=lambda: (4.0, 8.0, 12.0, 0.75))
  for update in range(1, 7):
    progress.step(update / 2, 1.0, 16.0, 0.1, updates=update)
  progress.evaluation(3.0, 0.9, 1.0, 0.3, updates=6)
  writer.flush()
  lines = capsys.readouterr().err.splitlines()
  assert [re.search(r"update +(\d+)", l).group(1) for l in lines[:-1]] == ["2", "4", "6"]
  assert lines[0].startswith("epoch   0.25  update      2") and "r  4.00  data epoch   0.75" in lines[0]
  assert lines[-1].startswith("epoch   0.75  eval top1 0.9000")
  seen = tags(tmp_path)
  for tag in ("adascale/gain", "adascale/tau", "adascale/base_epochs", "adascale/data_epochs", "train/lr"):
    assert seen[tag] == [2, 4, 6], tag
  assert seen["eval/top1"] == [6]
