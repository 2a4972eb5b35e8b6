"""The model a user serves: a SavedModel that takes encoded images and returns class
probabilities and the top-5 classes, with the evaluation preprocessing inside.

  model = tf.saved_model.load("<model_dir>/export")
  out = model.signatures["serving_default"](images=tf.constant([open("cat.jpg", "rb").read()]))
  out["probabilities"], out["top5_classes"]

The preprocessing is input/preprocessing.held_out_image with TensorFlow's own
ops (portable), not the project's kernel, so the SavedModel loads wherever
TensorFlow does: TF Serving, or a process that never built input/kernels.
"""
import glob
import os
import shutil
import threading

import tensorflow as tf

from flags.config import DatasetInfo, Source
from input import preprocessing
from training.persist import checkpoints

EXPORT_DIR = "export"  # under --model_dir


def serving_function(model, info: DatasetInfo):
  """A tf.function serve(images: string (N,) of encoded JPEG/PNG/GIF/BMP bytes) ->
  {probabilities: float32 (N, classes), top5_classes: int32 (N, min(5, classes)),
  top5_probabilities: float32 (N, min(5, classes))}: each image prepared as the held-out
  split is (central crop for ImageNet-like sets, as it is for digits), then the model."""
  k = min(5, info.num_classes)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
  def serve(images):
    pixels = tf.map_fn(lambda encoded: preprocessing.held_out_image(encoded, info, portable=True), images,
                       fn_output_signature=tf.TensorSpec(info.image_shape, tf.float32))
    probabilities = tf.nn.softmax(tf.cast(model(pixels, training=False), tf.float32))
    top = tf.math.top_k(probabilities, k=k)
    return {"probabilities": probabilities, "top5_classes": top.indices, "top5_probabilities": top.values}

  return serve


def export(model, info: DatasetInfo, model_dir: str) -> str:
  """Write the SavedModel to <model_dir>/export/ (replacing an older one) and return its path.

  Written beside it first and renamed, so a reader never finds half a SavedModel.
  """
  path = os.path.join(model_dir, EXPORT_DIR)
  tmp = f"{path}.tmp-{os.getpid()}"
  module = tf.Module()
  module.model = model  # tracked: the SavedModel holds its variables
  module.serve = serving_function(model, info)
  try:
    tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
  finally:
    if not os.path.exists(os.path.join(tmp, "saved_model.pb")):
      shutil.rmtree(tmp, ignore_errors=True)  # half a SavedModel (a full disk): not left beside the run
  shutil.rmtree(path, ignore_errors=True)
  os.replace(tmp, path)
  return path


def unless_stopped(work, stopped, poll_seconds: float = 0.5):
  """work() run in a thread of its own and waited for, unless stopped() turns true first: its result,
  or None when abandoned (the thread is left to the process's exit; what it half wrote is removed at
  the next start, remove_leftovers). A SavedModel takes minutes for ResNet-50, longer than a
  preemption notice (Slurm's --signal=B:USR1@120): a stop during it must not wait for it."""
  result = []
  thread = threading.Thread(target=lambda: result.append(work()), name="export", daemon=True)
  thread.start()
  while thread.is_alive():
    if stopped():
      return None
    thread.join(poll_seconds)
  return result[0] if result else None


def remove_leftovers(model_dir: str, log) -> None:
  """Delete what an export killed on the way (SIGKILL, a lost host) left: export.tmp-<pid>/ whose
  process is gone (a live one may be another process's export under way), with one line. Rank 0
  at start-up: a run's directory does not collect them for good."""
  gone = []
  for path in sorted(glob.glob(os.path.join(model_dir, f"{EXPORT_DIR}.tmp-*"))):
    pid = path.rsplit("-", 1)[1]
    if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
      continue
    shutil.rmtree(path, ignore_errors=True)
    gone.append(os.path.basename(path))
  if gone:
    log("removed what an interrupted export left: %s", ", ".join(gone))


def for_run(model, info: DatasetInfo, config, log, newest: str | None = None) -> dict:
  """summary.json's {"export": path} after writing the run's SavedModel into <model_dir>/export/,
  {} for synthetic batches, which have no image format to serve (said in the log), or
  {"export_error": sentence} when the export failed (a full disk, a tracing error): train.py
  writes summary.json before the export, so a failure or a kill here loses nothing else, and
  the failure is one line, not a traceback that turned a finished run into exit 1."""
  if config.data.source is Source.SYNTHETIC:
    log("export skipped: synthetic batches have no image format to serve")
    return {}
  try:
    return {"export": export(model, info, config.run.model_dir)}
  except Exception as e:  # noqa: BLE001  (whatever failed, the trained run stands: one sentence)
    kept = f"checkpoint {newest} and summary.json are" if newest else "summary.json is"
    sentence = (f"the SavedModel could not be written to {os.path.join(config.run.model_dir, EXPORT_DIR)} "
                f"({checkpoints.short_reason(e)}); the run's {kept} kept, so free some space (or fix the "
                "cause) and run the same command: a finished run exports again")
    log("error: %s", sentence)
    return {"export_error": sentence}
