"""Bad input: named when a batch fails, or skipped with --skip_corrupt.

Without --skip_corrupt the pipeline checks nothing per example (that cost 6%
of bench-input, docs/input.md): its batches pass through Diagnosed, which,
when one fails, looks again at that batch's examples (find) and names the
file, or the file:record, behind the failure. With --skip_corrupt every example passes
skipping(), which drops and counts what is damaged. Used by input/pipeline.py.
"""
import sys

import tensorflow as tf

from input import preprocessing
from progress import emit


def skipping(prepare, blank, num_classes: int, skipped: tf.Variable):
  """--skip_corrupt: prepare(encoded, boxes, seed) of the examples that pass the
  bad-input checks (a damaged image, input/preprocessing.looks_complete, or a
  label outside 0..num_classes-1); the rest are counted on stderr and flagged
  for the caller to drop (ok = False)."""
  def fn(encoded, label, boxes, where, seed):
    ok = preprocessing.looks_complete(encoded) & (label >= 0) & (label < num_classes)
    report = tf.cond(ok, lambda: tf.constant(0, tf.int64), lambda: skipped.assign_add(1))
    note = tf.cond(ok, tf.no_op, lambda: tf.print(tf.strings.join([
        "input: skipped ", where, f" (damaged image, or label outside 0..{num_classes - 1}); ",
        tf.strings.as_string(report), " skipped on this rank so far (--skip_corrupt)"]),
        output_stream=sys.stderr))
    with tf.control_dependencies([note]):
      image = tf.cond(ok, lambda: prepare(encoded, boxes, seed), lambda: blank)
    return image, label, ok
  return fn


def labels_in_range(num_classes: int):
  """Batch map: stop on a label outside 0..num_classes-1 (one check per batch;
  Diagnosed then names the record)."""
  def fn(images, labels):
    ok = tf.reduce_all((labels >= 0) & (labels < num_classes))
    with tf.control_dependencies([tf.debugging.Assert(ok, [f"input: label outside 0..{num_classes - 1}"])]):
      return images, tf.identity(labels)
  return fn


class Diagnosed:
  """Batches of a dataset; when reading or preparing one fails, the error names
  the file (and record) behind it.

  Checking every example as it passes cost 5% of bench-input (and the names,
  carried along, 1%), so the fast path checks nothing per example: a failure
  surfaces at its own batch (deterministic order), and only then does
  `find(position)` look again at that batch's examples, by name and one at a
  time, or at the files themselves when the reading failed (a TFRecord CRC).
  """

  def __init__(self, dataset, find, first_position: int, batch_size: int):
    self.dataset, self.find, self.first, self.batch_size = dataset, find, first_position, batch_size

  def __iter__(self):
    done = 0
    try:
      for item in self.dataset:
        yield item
        done += 1
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
      emit(f"input: a batch failed ({first_line(error)}); looking for the damaged file")
      found = self.find(self.first + done * self.batch_size, self.batch_size)
      if found is None:
        raise
      raise tf.errors.InvalidArgumentError(
          None, None, f"input: {found}; replace the file, or pass --skip_corrupt to skip it") from error


def first_line(error) -> str:
  """The first line of a TensorFlow error's message, at most 200 characters."""
  return (getattr(error, "message", None) or str(error)).strip().splitlines()[0][:200]


def find(named, files, start: int, count: int, check) -> str | None:
  """'<where> <what is wrong>' of the first bad example among positions
  [start, start + count) of `named` (enumerated (encoded, label, boxes, where)),
  or of the first unreadable file among `files` when reading itself fails."""
  try:
    for i, (encoded, label, boxes, where) in named.skip(start).take(count):
      problem = check(encoded, label, boxes, i)
      if problem:
        return f"{where.numpy().decode()} {problem}"
  except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
    pass  # the records themselves are damaged: find the file
  for path in files:
    try:
      for _ in tf.data.TFRecordDataset(path, buffer_size=1 << 20):
        pass
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
      return f"{path} is a damaged record file ({first_line(error)})"
  return None
