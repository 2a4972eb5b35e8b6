"""training/persist/checkpoints.py: restarts past damaged checkpoints, atomic saves, one-sentence errors."""
import os
import random
import re
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO, _env
from training.persist.checkpoints import CheckpointError, Checkpoints, NonFiniteWeights, damaged_name, short_reason

DATA = "data-00000-of-00001"


class Lines:
  """A log(fmt, *args) that keeps the lines."""

  def __init__(self):
    self.lines = []

  def __call__(self, fmt, *args):
    self.lines.append(fmt % args if args else fmt)


def state(width=8):
  """(checkpoint, every variable): a small Keras model, its SGD momentum slots, a step."""
  model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(width), keras.layers.Dense(3)])
  optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
  optimizer.build(model.trainable_variables)
  step = tf.Variable(0, dtype=tf.int64)
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
  return checkpoint, model.variables + optimizer.variables + [step]


def fill(variables, value):
  for v in variables:
    v.assign(tf.fill(v.shape, tf.cast(value, v.dtype)))


def values(variables):
  return {float(x) for v in variables for x in np.ravel(np.asarray(v))}


def saved(directory, steps, keep=5, width=8, background=False):
  """Checkpoints at these steps, every variable of ckpt-N equal to N."""
  checkpoint, variables = state(width)
  checkpoints = Checkpoints(checkpoint, str(directory), keep, Lines(), background=background)
  for n in steps:
    fill(variables, n)
    checkpoints.save(n)
  return checkpoints, variables


def restart(directory, keep=5, width=8):
  """A fresh process's view: new variables (all -1), restore_newest; (step, values, lines)."""
  checkpoint, variables = state(width)
  fill(variables, -1)
  log = Lines()
  step = Checkpoints(checkpoint, str(directory), keep, log).restore_newest()
  return step, values(variables), log.lines


def snapshot(directory):
  """{file name: bytes} of a directory."""
  return {f: open(os.path.join(directory, f), "rb").read() for f in sorted(os.listdir(directory))}


@pytest.mark.parametrize("message, reason", [
    ("Read less bytes than requested", "Read less bytes than requested"),
    ("{{function_node __wrapped__SaveV2_dtypes_2_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
     "/tmp/m/ckpt-1_temp/part-00000-of-00001.data-00000-of-00001.tempstate149; No space left on device "
     "[Op:SaveV2]", "part-00000-of-00001.data-00000-of-00001.tempstate149; No space left on device"),
    ("/tmp/d/ckpt-10.data-00000-of-00001; No such file or directory",
     "ckpt-10.data-00000-of-00001; No such file or directory"),
    ("TensorBundle at /tmp/d/ckpt-10 shard 0 (8 bytes): Checksum does not match\nmore",
     "TensorBundle at ckpt-10 shard 0 (8 bytes): Checksum does not match"),
    ("x" * 200, "x" * 117 + "..."),
    ("", "IndexError"),
])
def test_short_reason(message, reason):
  assert short_reason(IndexError(message)) == reason


def test_short_reason_of_an_os_error():
  assert short_reason(OSError(30, "Read-only file system", "/tmp/m/ckpt-20.saving")) == \
      "ckpt-20.saving; Read-only file system"
  assert short_reason(OSError(28, "No space left on device")) == "No space left on device"


@pytest.mark.parametrize("taken, name", [
    ([], "ckpt-40.damaged"),
    (["ckpt-40.index", "ckpt-4.damaged.index"], "ckpt-40.damaged"),
    (["ckpt-40.damaged.index"], "ckpt-40.damaged2"),
    (["ckpt-40.damaged.data-00000-of-00001", "ckpt-40.damaged2.index"], "ckpt-40.damaged3"),
])
def test_damaged_name(taken, name):
  assert damaged_name(taken, "ckpt-40") == name


def truncate_data(d):
  path = d / f"ckpt-40.{DATA}"
  os.truncate(path, os.path.getsize(path) // 2)


def truncate_index(d):
  path = d / "ckpt-40.index"
  os.truncate(path, os.path.getsize(path) // 2)


def delete_data(d):
  os.remove(d / f"ckpt-40.{DATA}")


def flip_a_byte(d):
  data = bytearray((d / f"ckpt-40.{DATA}").read_bytes())
  data[len(data) // 2] ^= 0xFF
  (d / f"ckpt-40.{DATA}").write_bytes(data)


@pytest.mark.parametrize("damage", [truncate_data, truncate_index, delete_data, flip_a_byte])
def test_restart_falls_back_past_a_damaged_newest_checkpoint(tmp_path, damage):
  saved(tmp_path, [10, 20, 30, 40])
  damage(tmp_path)
  before = snapshot(tmp_path)
  step, restored, lines = restart(tmp_path)
  assert step == 30
  assert restored == {30.0}  # every variable from ckpt-30, none left at -1 or from ckpt-40
  assert len(lines) == 1, lines
  assert re.fullmatch(r"checkpoint ckpt-40 is unreadable \(.+\); kept as ckpt-40\.damaged\.\*; "
                      r"resuming from ckpt-30", lines[0]), lines
  after = snapshot(tmp_path)
  for f, content in before.items():  # the damaged files kept, renamed, unchanged
    if f.startswith("ckpt-40."):
      assert after[f.replace("ckpt-40.", "ckpt-40.damaged.")] == content
  assert not any(f.startswith("ckpt-40.") and "damaged" not in f for f in after)
  assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-30")
  step, _, lines = restart(tmp_path)
  assert (step, lines) == (30, [])  # the next restart: ckpt-30 at once, silently


def test_nothing_readable_is_a_fresh_start_with_a_line(tmp_path):
  saved(tmp_path, [10, 20])
  truncate = [tmp_path / f"ckpt-10.{DATA}", tmp_path / "ckpt-20.index"]
  for path in truncate:
    os.truncate(path, os.path.getsize(path) // 2)
  step, restored, lines = restart(tmp_path)
  assert step is None
  assert restored == {-1.0}  # nothing assigned from the damaged ones
  assert [line.split(" is unreadable")[0] for line in lines] == ["checkpoint ckpt-20", "checkpoint ckpt-10"]
  assert all(line.endswith("; starting afresh") for line in lines), lines
  assert tf.train.latest_checkpoint(str(tmp_path)) is None
  step, _, lines = restart(tmp_path / "absent")
  assert (step, lines) == (None, [])


def test_what_an_interrupted_save_left_is_removed_with_a_line(tmp_path):
  saved(tmp_path, [10, 20])
  (tmp_path / "ckpt-30.saving" / "ckpt-30_temp").mkdir(parents=True)
  (tmp_path / "ckpt-30.saving" / "ckpt-30_temp" / "part-00000-of-00001.index").write_bytes(b"x")
  (tmp_path / "ckpt-30_temp").mkdir()  # TF's own, from a save before this module
  (tmp_path / f"ckpt-30.{DATA}").write_bytes(b"data renamed in, index not yet")
  (tmp_path / "checkpoint.tmp0123abcd").write_text("half a state file")
  step, restored, lines = restart(tmp_path)
  assert (step, restored) == (20, {20.0})
  assert lines == ["removed what an interrupted checkpoint save left: checkpoint.tmp0123abcd, "
                   f"ckpt-30.{DATA}, ckpt-30.saving, ckpt-30_temp"], lines
  assert sorted(os.listdir(tmp_path)) == ["checkpoint", f"ckpt-10.{DATA}", "ckpt-10.index",
                                          f"ckpt-20.{DATA}", "ckpt-20.index"]


@pytest.mark.parametrize("width", [16, None], ids=["other shapes", "other variables"])
def test_a_checkpoint_of_another_model_is_one_sentence(tmp_path, width):
  saved(tmp_path, [10] if width else [], width=8)
  if width is None:
    Checkpoints(tf.train.Checkpoint(step=tf.Variable(3, dtype=tf.int64)), str(tmp_path), 2, Lines()).save(10)
  with pytest.raises(CheckpointError, match=r"ckpt-10 holds other variables than this model \(.+\); use"):
    restart(tmp_path, width=width or 8)
  assert os.path.exists(tmp_path / "ckpt-10.index")  # not damaged: left as it is


def test_keep_and_the_state_file(tmp_path):
  checkpoints, _ = saved(tmp_path, [10, 20, 30, 40], keep=2)
  assert sorted(os.listdir(tmp_path)) == ["checkpoint", f"ckpt-30.{DATA}", "ckpt-30.index",
                                          f"ckpt-40.{DATA}", "ckpt-40.index"]
  assert tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == [
      str(tmp_path / "ckpt-30"), str(tmp_path / "ckpt-40")]
  assert checkpoints.newest == str(tmp_path / "ckpt-40")
  assert restart(tmp_path, keep=2)[:2] == (40, {40.0})


def test_a_background_save_holds_its_steps_values_and_appears_whole_once_written(tmp_path):
  # The next steps change the variables while the write goes on: the checkpoint holds the values at
  # its step (TensorFlow copied them before save() returned); newest waits for the write.
  checkpoints, variables = saved(tmp_path, [10], background=True)
  fill(variables, 11)  # the next step, during the write
  checkpoints.save(20)  # waits for ckpt-10, then reads the 11s
  for v in variables:  # an update in place (as an optimizer's) during the write
    v.assign_add(tf.fill(v.shape, tf.cast(10, v.dtype)))
  assert checkpoints.newest == str(tmp_path / "ckpt-20")
  assert restart(tmp_path)[:2] == (20, {11.0})
  assert sorted(os.listdir(tmp_path)) == ["checkpoint", f"ckpt-10.{DATA}", "ckpt-10.index",
                                          f"ckpt-20.{DATA}", "ckpt-20.index"]


def test_saving_the_same_step_again_replaces_it(tmp_path):
  checkpoints, variables = saved(tmp_path, [10, 20])
  fill(variables, 7)
  checkpoints.save(20)
  assert restart(tmp_path)[:2] == (20, {7.0})


def test_non_finite_weights_are_not_saved(tmp_path):
  checkpoints, variables = saved(tmp_path, [10])
  before = snapshot(tmp_path)
  variables[0].assign(tf.fill(variables[0].shape, float("nan")))
  with pytest.raises(NonFiniteWeights, match=rf"weights at step 20 hold inf or NaN .*not saved, so "
                                             rf"{re.escape(str(tmp_path / 'ckpt-10'))} stays the newest"):
    checkpoints.save(20)
  assert snapshot(tmp_path) == before
  with pytest.raises(NonFiniteWeights):  # only the variables given are checked
    checkpoints.save(20, variables[:1])
  assert checkpoints.save(20, variables[1:]) == str(tmp_path / "ckpt-20")


@pytest.fixture
def tmpfs(tmp_path):
  """mount(size, readonly=False) -> a tmpfs path; unmounted at the end whatever happens."""
  mounted = []

  def mount(size, readonly=False):
    path = tmp_path / f"tmpfs{len(mounted)}"
    path.mkdir()
    options = f"size={size}" + (",ro" if readonly else "")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                            capture_output=True, text=True, timeout=30)
    if result.returncode:
      pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); this test needs root")
    mounted.append(path)
    return path

  try:
    yield mount
  finally:
    for path in mounted:
      subprocess.run(["umount", str(path)], capture_output=True, timeout=30)


def remount_readonly(path):
  subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, timeout=30)


WIDTH = 128  # 2 x (128 x 128) float32 kernels + slots: a checkpoint of about 135 KB


def test_a_full_disk_is_one_sentence_and_keeps_the_earlier_checkpoints(tmpfs):
  directory = tmpfs("200k")  # room for one checkpoint, not for a second beside it
  checkpoints, variables = saved(directory, [10], width=WIDTH)
  before = snapshot(directory)
  fill(variables, 20)
  with pytest.raises(CheckpointError) as error:
    checkpoints.save(20)
  message = str(error.value)
  assert re.fullmatch(rf"cannot save checkpoint ckpt-20 in {re.escape(str(directory))} \(No space left on "
                      r"device\): it needs about [\d,]+ bytes and [\d,]+ are free there; the earlier "
                      r"checkpoints are intact, .*restart\.", message), message
  needed, free = (int(x.replace(",", "")) for x in re.findall(r"([\d,]+) (?:bytes|are free)", message))
  assert needed == sum(v.numpy().nbytes for v in variables) + 8  # + the checkpoint's int64 save_counter
  assert free < needed
  assert snapshot(directory) == before  # byte-identical, nothing partial left
  assert restart(directory, width=WIDTH)[:2] == (10, {10.0})


def test_a_background_write_that_fails_is_one_sentence_at_the_next_wait(tmpfs):
  # The disk fills during the write, after save() returned: the next wait (or save, or newest)
  # raises the same sentence, and the earlier checkpoint is the newest, byte for byte.
  directory = tmpfs("200k")
  checkpoints, variables = saved(directory, [10], width=WIDTH, background=True)
  checkpoints.wait()
  before = snapshot(directory)
  fill(variables, 20)
  checkpoints.save(20)
  with pytest.raises(CheckpointError, match=r"cannot save checkpoint ckpt-20 .*\(No space left on device\)"):
    checkpoints.wait()
  assert snapshot(directory) == before
  checkpoints.wait()  # raised once
  assert checkpoints.newest == str(directory / "ckpt-10")
  assert restart(directory, width=WIDTH)[:2] == (10, {10.0})


def test_an_unwritable_directory_is_one_sentence(tmpfs, tmp_path):
  directory = tmpfs("1m")
  checkpoints, _ = saved(directory, [10], width=WIDTH)
  before = snapshot(directory)
  remount_readonly(directory)
  with pytest.raises(CheckpointError, match=r"\(Read-only file system\): it needs about"):
    checkpoints.save(20)
  assert snapshot(directory) == before
  assert restart(directory, width=WIDTH)[:2] == (10, {10.0})


def test_a_file_in_place_of_the_directory_is_one_sentence(tmp_path):
  (tmp_path / "runs").write_text("not a directory")
  checkpoint, _ = state()
  runs = re.escape(str(tmp_path / "runs"))
  with pytest.raises(CheckpointError, match=rf"in {runs} \(.*\): .*; nothing was written, so"):
    Checkpoints(checkpoint, str(tmp_path / "runs"), 2, Lines()).save(10)
  assert os.listdir(tmp_path) == ["runs"]


# Saves ever larger steps in a loop, each variable equal to its step, and appends each finished
# step to a file. 4 M floats: a save takes 100-200 ms on this machine. Three kills a mode, each at a
# moment drawn within the next 2-4 saves: five cost make test ~10 s of a worker each (a TensorFlow
# start-up per kill) for moments three already spread over a save.
SAVER = """
import sys
import tensorflow as tf
from training.persist.checkpoints import Checkpoints
directory, done, background = sys.argv[1:]
weights = tf.Variable(tf.zeros([4 * 1024 * 1024]))
checkpoints = Checkpoints(tf.train.Checkpoint(weights=weights), directory, 2, lambda *a: None,
                          background=background == "1")
step = checkpoints.restore_newest() or 0
with open(done, "a") as fh:
  while True:
    step += 1
    weights.assign(tf.fill(weights.shape, float(step)))
    checkpoints.save(step)
    fh.write(f"{step}\\n")
    fh.flush()
"""


@pytest.mark.parametrize("background", [False, True])
def test_a_kill_at_any_moment_of_a_save_leaves_a_directory_a_restart_accepts(tmp_path, background):
  directory, done = tmp_path / "run", tmp_path / "done"
  rng = random.Random(0)
  for kill in range(3):
    lines_before = len(done.read_text().split()) if done.exists() else 0
    with open(tmp_path / "saver.err", "w") as err:
      child = subprocess.Popen([sys.executable, "-c", SAVER, str(directory), str(done), str(int(background))], cwd=REPO,
                               env=_env(), stdout=subprocess.DEVNULL, stderr=err)
    try:
      deadline = time.time() + 120
      while not done.exists() or len(done.read_text().split()) <= lines_before:
        assert child.poll() is None, (tmp_path / "saver.err").read_text()[-3000:]
        assert time.time() < deadline, "the saver finished no save within 120 s"
        time.sleep(0.02)
      time.sleep(rng.uniform(0.0, 0.5))  # within the next 2-4 saves (seen: staging dirs left)
    finally:
      os.kill(child.pid, signal.SIGKILL)
      child.wait(timeout=30)
    finished = [int(x) for x in done.read_text().split()]
    # The state file never names an incomplete checkpoint: TF reads all of what it names. It names none
    # where the kill came while the first save was written in the background (seen with both cores busy):
    # nothing to resume from, step 0 below.
    named = tf.train.latest_checkpoint(str(directory))
    if named is not None:
      reader = tf.train.load_checkpoint(named)
      for key in reader.get_variable_to_shape_map():
        reader.get_tensor(key)
    weights = tf.Variable(tf.zeros([4 * 1024 * 1024]))
    log = Lines()
    step = Checkpoints(tf.train.Checkpoint(weights=weights), str(directory), 2, log).restore_newest() or 0
    # A step saved in full: one logged as done, or the one whose save ended just before the kill; in
    # the background a step is logged once its values are copied, so the one before may be the newest.
    assert step in (finished[-1] - background, finished[-1], finished[-1] + 1), (kill, step, finished[-3:])
    assert values([weights]) == {float(step)}
    assert not any("unreadable" in line for line in log.lines), log.lines
    assert all(re.fullmatch(r"checkpoint|ckpt-\d+\.(index|data-00000-of-00001)", f)
               for f in os.listdir(directory)), os.listdir(directory)
