"""Checkpoints that survive faults: atomic saves, a fallback past damaged ones, one-sentence errors.

The layout is TensorFlow's (ckpt-N.index, ckpt-N.data-00000-of-00001 and the `checkpoint` state
file), so tf.train.latest_checkpoint and TensorBoard read the directory as before. What differs
from tf.train.CheckpointManager, and why:

- Saving. TF 2.18 writes ckpt-N_temp/part-* and then merges them into ckpt-N.index, which it
  writes in place (tensor_bundle's MergeBundles), so a kill during the merge leaves a truncated
  index beside whole data; a failed write leaves ckpt-N_temp/ behind (seen on a full 64 KiB
  tmpfs). Here TF writes into ckpt-N.saving/, its data files are renamed into the directory and
  the index last: an index in the directory is always whole, and it is the index that makes
  ckpt-N exist. The state file is updated after that, atomically (tmp file + rename).
- Restoring. The candidates are the ckpt-N.index files on disk, newest first: a kill between
  the index's rename and the state file's update loses nothing. A candidate is read in full
  (every tensor, each checked against its CRC32C) before anything is assigned, so variables are
  never left half-assigned from a damaged checkpoint, even when none is readable. A damaged one
  is renamed ckpt-N.damaged.* (no longer a candidate, kept for a post-mortem) and the next tried.
  What a kill leaves (staging dirs, data without its index) is removed, with a line.
  No fsync: damage from a crash of the machine is caught the same way at the next restore.
- In the background (background=True, --background_checkpoints): save() reads every value (the
  step's, whatever the next steps do: TensorFlow copies a variable's buffer on write while a read
  of it lives) and returns; a writer thread writes them and publishes them as above (the index last). Training goes on
  meanwhile; a kill during the write leaves the previous checkpoint the newest. The next save, and
  whoever reads `newest` (the summary, the export, a world's re-forming), wait for it first; a write
  that failed raises its CheckpointError there. The thread is not a daemon: an exit waits for it.
"""
import itertools
import os
import re
import shutil
import threading
import typing
import uuid

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.checkpoint import functional_saver
from tensorflow.python.training.saving import saveable_object

PREFIX = "ckpt"
STATE_FILE = "checkpoint"
_INDEX = re.compile(rf"^{PREFIX}-(\d+)\.index$")
_DATA = re.compile(rf"^({PREFIX}-\d+)\.data-\d+-of-\d+$")
# What an interrupted save leaves: our staging dir, TF's shard dir, a temp state file.
_LEFTOVER = re.compile(rf"^({PREFIX}-\d+\.saving|{PREFIX}-\d+_temp|{STATE_FILE}\.tmp[0-9a-f]+)$")


class CheckpointError(Exception):
  """A checkpoint could not be saved or restored; the message is one sentence."""


class NonFiniteWeights(CheckpointError):
  """The weights hold inf or NaN, so they were not saved."""


def short_reason(error: Exception) -> str:
  """A TensorFlow I/O error as a few words: no op name, no directories, one line, <= 120 chars.

  '{{function_node ...}} /d/ckpt-1_temp/part-0.data; No space left on device [Op:SaveV2]'
  -> 'part-0.data; No space left on device'.
  """
  if isinstance(error, OSError) and error.strerror:  # Python's own: '[Errno 30] ...: path'
    name = os.path.basename(os.fsdecode(error.filename)) if error.filename else None
    return f"{name}; {error.strerror}" if name else error.strerror
  text = str(error) or type(error).__name__
  text = re.sub(r"\{\{[^}]*\}\}\s*", "", text)
  text = re.sub(r"\s*\[Op:\w+\]", "", text)
  text = re.sub(r"(/[^\s;:/]+)+/([^\s;:/]+)", r"\2", text)  # an absolute path -> its base name
  text = text.strip().splitlines()[0] if text.strip() else type(error).__name__
  return text if len(text) <= 120 else text[:117] + "..."


def damaged_name(taken, name: str) -> str:
  """The first of 'ckpt-N.damaged', 'ckpt-N.damaged2', ... that no file name in `taken` starts."""
  for i in itertools.count(1):
    candidate = f"{name}.damaged{'' if i == 1 else i}"
    if not any(f.startswith(candidate + ".") for f in taken):
      return candidate


def on_disk(directory: str) -> list[int]:
  """Numbers N of the ckpt-N.index files in directory, newest first (an index makes ckpt-N exist)."""
  if not os.path.isdir(directory):
    return []
  found = (_INDEX.match(f) for f in os.listdir(directory))
  return sorted((int(m.group(1)) for m in found if m), reverse=True)


def newest(directory: str) -> str | None:
  """The path prefix of the newest checkpoint in directory, or None: what a line telling users
  to resume names (the watchdog's, a lost peer's), read from the files at that moment."""
  numbers = on_disk(directory)
  return os.path.join(directory, f"{PREFIX}-{numbers[0]}") if numbers else None


def _variables_of(checkpoint) -> list:
  """Every variable a tf.train.Checkpoint saves (Keras 3 or tf), each once."""
  found = tf.train.TrackableView(checkpoint).descendants()
  return [v for v in found if isinstance(v, (tf.Variable, keras.Variable))]


def _nbytes(variables) -> int:
  return sum(tf.as_dtype(v.dtype).size * int(np.prod(v.shape)) for v in variables)


class OptionalPart(typing.NamedTuple):
  """A part of the checkpoint an older one may lack (fp16's loss scale: kept since issue 23, absent
  from a checkpoint of another --precision; PowerSGD's state): the checkpoint's object of that
  name, restored without it when absent, and `line` logged ({checkpoint}: the checkpoint's name)."""
  name: str
  line: str


class Checkpoints:
  """Rank 0's checkpoints of one tf.train.Checkpoint in one directory, the newest `keep` kept.

  log(fmt, *args) takes the lines a restart should show (progress.logger).
  """

  def __init__(self, checkpoint: tf.train.Checkpoint, directory: str, keep: int, log,
               optional: "tuple[OptionalPart, ...]" = (), background: bool = False):
    self.checkpoint = checkpoint
    self.optional = tuple(optional)
    self.directory = directory
    self.keep = keep
    self.log = log
    self.background = background
    self._newest = None  # path prefix of the newest good checkpoint, once restored or saved
    self._writing = None  # the thread publishing a background write
    self._failed = None   # the CheckpointError that write met, raised by the next wait()
    # restore() creates save_counter, and then assert_existing_objects_matched fails on a
    # checkpoint written without it (tried): so every checkpoint written here holds it.
    checkpoint.save_counter  # noqa: B018 (created on first access)

  @property
  def newest(self) -> str | None:
    """The path prefix of the newest good checkpoint, once restored or saved (a background write
    waited for first)."""
    self.wait()
    return self._newest

  def wait(self) -> None:
    """Return once the background write, if any, is published; raise its CheckpointError if it failed."""
    if self._writing is not None:
      self._writing.join()
      self._writing = None
    if self._failed is not None:
      failed, self._failed = self._failed, None
      raise failed

  def _path(self, name: str) -> str:
    return os.path.join(self.directory, name)

  def _on_disk(self) -> list[int]:
    return on_disk(self.directory)

  def _files_of(self, name: str) -> list[str]:
    """The data files of ckpt-N, then its index: the order a save renames them in."""
    files = sorted(f for f in os.listdir(self.directory) if (m := _DATA.match(f)) and m.group(1) == name)
    return files + ([f"{name}.index"] if os.path.exists(self._path(f"{name}.index")) else [])

  def _remove_leftovers(self) -> bool:
    """Delete what an interrupted save or sweep left: staging dirs and data without an index."""
    indexed = {f"{PREFIX}-{n}" for n in self._on_disk()}
    removed = []
    for f in sorted(os.listdir(self.directory)):
      orphan = (m := _DATA.match(f)) and m.group(1) not in indexed
      if orphan or _LEFTOVER.match(f):
        if os.path.isdir(self._path(f)):
          shutil.rmtree(self._path(f))
        else:
          os.remove(self._path(f))
        removed.append(f)
    if removed:
      self.log("removed what an interrupted checkpoint save left: %s", ", ".join(removed))
    return bool(removed)

  def _write_state(self, numbers: list[int] | None = None) -> None:
    """Point the state file at these checkpoints (default: those on disk), atomically.

    The text form of TF's CheckpointState proto with relative paths, as CheckpointManager writes
    it (tf.train.latest_checkpoint reads it); tmp file + rename, so a kill leaves the old or the new.
    """
    numbers = sorted(self._on_disk() if numbers is None else numbers)  # oldest first, as TF lists them
    path = self._path(STATE_FILE)
    if not numbers:
      _remove(path)
      return
    lines = [f'model_checkpoint_path: "{PREFIX}-{numbers[-1]}"']
    lines += [f'all_model_checkpoint_paths: "{PREFIX}-{n}"' for n in numbers]
    tmp = f"{path}.tmp{uuid.uuid4().hex}"
    try:
      with open(tmp, "w") as fh:
        fh.write("\n".join(lines) + "\n")
      os.replace(tmp, path)
    finally:
      _remove(tmp)

  def _read_fully(self, prefix: str) -> None:
    """Raise if any tensor of the checkpoint at prefix fails to read or to match its checksum."""
    reader = tf.train.load_checkpoint(prefix)
    for key in reader.get_variable_to_shape_map():
      reader.get_tensor(key)

  def restore_newest(self) -> int | None:
    """Restore the newest readable checkpoint; its number N (train.py: the step), None if none.

    An unreadable one is renamed ckpt-N.damaged.* and one line says so and what came next.
    """
    if not os.path.isdir(self.directory):
      return None
    cleaned = self._remove_leftovers()
    damaged = []  # (name, reason, kept as)
    restored = None
    for number in self._on_disk():
      name = f"{PREFIX}-{number}"
      try:
        self._read_fully(self._path(name))
      except (tf.errors.OpError, IndexError, ValueError, OSError) as e:
        kept = damaged_name(os.listdir(self.directory), name)
        for f in self._files_of(name):
          os.replace(self._path(f), self._path(kept + f[len(name):]))
        damaged.append((name, short_reason(e), kept))
        continue
      try:
        self._restore(self._path(name))
      except (AssertionError, ValueError) as e:  # a readable checkpoint of another model
        raise CheckpointError(f"checkpoint {self._path(name)} holds other variables than this model "
                              f"({short_reason(e)}); use a new directory for this run.") from None
      restored = number
      self._newest = self._path(name)
      break
    outcome = f"resuming from {PREFIX}-{restored}" if restored is not None else "starting afresh"
    for name, reason, kept in damaged:
      self.log("checkpoint %s is unreadable (%s); kept as %s.*; %s", name, reason, kept, outcome)
    if damaged or cleaned:  # the state file may name what was set aside or half-saved
      self._write_state()
    return restored

  def _restore(self, path: str) -> None:
    """Every object of the checkpoint restored, or an AssertionError; the optional parts may be absent."""
    held = {key.split("/", 1)[0] for key, _ in tf.train.list_variables(path)}
    absent = [part for part in self.optional if part.name not in held]
    checkpoint = self.checkpoint
    if absent:  # the same objects but those parts, in a checkpoint of their own
      names = {part.name for part in absent} | {"save_counter"}
      checkpoint = tf.train.Checkpoint(**{name: child for name, child in
                                          tf.train.TrackableView.children(self.checkpoint).items() if name not in names})
      checkpoint.save_counter  # noqa: B018 (see __init__)
    status = checkpoint.restore(path)
    status.assert_existing_objects_matched()
    # What the file holds beyond this run's objects (PowerSGD's state at another --powersgd_rank, or
    # under another --compression) is left unused, and said by the parts' lines, not by TensorFlow's
    # warning per value (84 lines for ResNet-20's at rank 4).
    status.expect_partial()
    for part in absent:
      if part.line:  # "": absent from older checkpoints, and nothing to say (the position, read from its file)
        self.log("%s", part.line.format(checkpoint=os.path.basename(path)))

  def save(self, step: int, variables=None) -> str:
    """Save as ckpt-<step> atomically, drop all but the newest `keep`; the path prefix written (in the
    background: being written, published by the writer thread).

    variables: those that must be finite (default: every variable in the checkpoint); if any
    holds inf/NaN nothing is written (NonFiniteWeights). A full disk or an unwritable directory
    raises CheckpointError and leaves the directory's checkpoints as they were.
    """
    self.wait()  # one write at a time: the previous one published (or its error raised) first
    variables = _variables_of(self.checkpoint) if variables is None else list(variables)
    bad = [v for v in variables if tf.as_dtype(v.dtype).is_floating
           and not bool(tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))))]
    if bad:
      kept = f"{self._newest} stays the newest good checkpoint" if self._newest else "nothing was written"
      example = getattr(bad[0], "path", bad[0].name)
      raise NonFiniteWeights(f"weights at step {step} hold inf or NaN ({len(bad)} of {len(variables)} "
                             f"variables, e.g. {example}); not saved, so {kept}.")
    name = f"{PREFIX}-{step}"
    staging = self._path(f"{name}.saving")
    try:
      os.makedirs(staging, exist_ok=True)
      if self.background:
        self._writing = threading.Thread(target=self._publish_written, name=f"checkpoint-{step}",
                                         args=(name, staging, *_values_now(self.checkpoint)))
        self._writing.start()
        return self._path(name)
      self.checkpoint.write(os.path.join(staging, name))
    except (tf.errors.OpError, OSError) as e:
      raise self._failure(name, staging, [], e) from None
    return self._publish(name, staging, [])

  def _publish_written(self, name: str, staging: str, values, registered) -> None:
    """The writer thread: the values written, then published; its error kept for wait()."""
    moved = []
    try:
      functional_saver.MultiDeviceSaver(values, registered).save(tf.constant(os.path.join(staging, name)))
      self._publish(name, staging, moved)
    except CheckpointError as e:
      self._failed = e
    except Exception as e:  # noqa: BLE001  (whatever stopped the write is raised in the main thread)
      self._failed = self._failure(name, staging, moved, e)

  def _publish(self, name: str, staging: str, moved: list[str]) -> str:
    """The written files moved into the directory, the index last, and the state file updated."""
    try:
      if os.path.exists(self._path(f"{name}.index")):  # saved again at the same step: unlist it first
        os.remove(self._path(f"{name}.index"))
      staged = sorted(os.listdir(staging), key=lambda f: f.endswith(".index"))  # the index last
      for f in staged:
        os.replace(os.path.join(staging, f), self._path(f))
        moved.append(f)
      os.rmdir(staging)
      self._write_state()
    except OSError as e:
      raise self._failure(name, staging, moved, e) from None
    self._newest = self._path(name)
    self._sweep()
    return self._newest

  def _failure(self, name: str, staging: str, moved: list[str], e: Exception) -> "CheckpointError":
    """A failed write undone, and the sentence that says why and what to do."""
    self._undo(staging, moved)
    needed = _nbytes(_variables_of(self.checkpoint))
    free = _free_bytes(self.directory)
    reason = short_reason(e).rsplit("; ", 1)[-1]  # the file it names is TF's temp file: noise here
    kept = "the earlier checkpoints are intact" if self._on_disk() else "nothing was written"
    return CheckpointError(
        f"cannot save checkpoint {name} in {self.directory} ({reason}): it needs about {needed:,} "
        f"bytes and {free:,} are free there; {kept}, so free some space (or make the directory "
        "writable) and restart.")

  def _undo(self, staging: str, moved: list[str]) -> None:
    """Remove every file of a failed save (best effort: the disk may still be full or read-only)."""
    found = os.listdir(self.directory) if os.path.isdir(self.directory) else []
    leftovers = [f for f in found if _LEFTOVER.match(f)]
    for f in list(reversed(moved)) + leftovers:  # the index first, so no whole-looking checkpoint remains
      _remove(self._path(f))
    _remove(staging)

  def _sweep(self) -> None:
    """Delete all but the newest `keep` checkpoints: the state file first, then index, then data."""
    numbers = self._on_disk()
    if len(numbers) <= self.keep:
      return
    self._write_state(numbers[:self.keep])
    old = numbers[self.keep:]
    for number in old:  # an index gone makes its data a leftover, removed at the next restore
      os.remove(self._path(f"{PREFIX}-{number}.index"))
    for number in old:
      for f in self._files_of(f"{PREFIX}-{number}"):
        os.remove(self._path(f))


def _values_now(checkpoint):
  """(the checkpoint's tensors, its registered savers), every variable read now: what Checkpoint.write
  would write at this moment, as eager tensors later updates do not change. TensorFlow's own async
  checkpoint cannot copy Keras 3 variables ("tf.function only supports singleton tf.Variables created
  on the first call", TF 2.18), hence its saver's private steps, which test_checkpoints.py runs."""
  serialized, _, registered, _ = checkpoint._saver._gather_serialized_tensors(None)
  now = type(serialized)()  # keyed by object identity, as TensorFlow's
  for trackable, tensors in serialized.items():
    now[trackable] = {key: ({spec: _read(t) for spec, t in value.items()} if isinstance(value, dict)
                            else _read(value)) for key, value in tensors.items()}
  return now, registered


def _read(value):
  """A tensor of a checkpoint's serialization, read now (a variable's is a closure that reads it)."""
  if isinstance(value, saveable_object.SaveSpec):
    value = value.tensor
  return value() if callable(value) else value


def _remove(path: str) -> None:
  """Delete a file or a directory tree if it is there; errors ignored (cleanup after a failure)."""
  if os.path.isdir(path):
    shutil.rmtree(path, ignore_errors=True)
  else:
    try:
      os.remove(path)
    except OSError:
      pass


def _free_bytes(directory: str) -> int:
  """Bytes an unprivileged writer may still use on the filesystem holding directory (0 if unknown)."""
  path = directory
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  try:
    stat = os.statvfs(path)
  except OSError:
    return 0
  return stat.f_bavail * stat.f_frsize
