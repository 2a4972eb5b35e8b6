"""training/persist/export.py: the SavedModel of a real run, loaded in a fresh process that never
loaded the project's kernel, gets the run's own held-out top-1 from encoded images."""
import json
import os

from conftest import MODEL, python

# A fresh interpreter: only TensorFlow and the records' parser, no model code, no input/kernels.
SERVE = """
import json, sys
import tensorflow as tf
from input import records
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
data = tf.data.TFRecordDataset(records.shard_paths(sys.argv[2], "eval")).map(records.parse_example).batch(64)
hits = count = 0
for encoded, labels in data:
  out = serve(images=encoded)
  probabilities, top5 = out["probabilities"].numpy(), out["top5_classes"].numpy()
  assert abs(probabilities.sum(1) - 1).max() < 1e-5 and (top5[:, 0] == probabilities.argmax(1)).all()
  hits += int((top5[:, 0] == labels.numpy()).sum())
  count += len(labels)
assert "input.image_ops" not in sys.modules
print(json.dumps({"top1": hits / count, "count": count}))
"""


def test_the_export_serves_the_runs_held_out_top1_in_a_fresh_process(tmp_path, digits_dir):
  # A target out of reach, too: the run says so and still exits 0 and exports.
  run = python("train.py", f"--model_dir={tmp_path}", f"--data_dir={digits_dir}", f"--model={MODEL}", "--max_steps=25",
               "--warmup_epochs=0.2", "--target_top1=1", "--stall_timeout=0", timeout=400)
  assert run.returncode == 0, run.stderr[-3000:]
  summary = json.loads(run.stdout.strip().splitlines()[-1])
  assert summary["target_reached"] is False and summary["time_to_target_seconds"] is None
  assert "target not reached: --target_top1=1 by the end, step 25" in run.stderr
  assert summary["export"] == os.path.join(tmp_path, "export")
  assert 0.2 < summary["final_top1"] < 1  # trained (chance: 0.1), and not every image right
  served = python("-c", SERVE, summary["export"], digits_dir, timeout=300)
  assert served.returncode == 0, served.stderr[-3000:]
  got = json.loads(served.stdout.strip().splitlines()[-1])
  assert got["count"] == 300
  assert abs(got["top1"] - summary["final_top1"]) < 1e-6, (got, summary["final_top1"])


def test_a_failed_export_is_one_sentence_in_the_summary_not_a_traceback(tmp_path):
  # A full disk or a tracing error at the export turned a finished run into exit 1 with a traceback.
  import types
  import keras
  from flags.config import Source
  from input.datasets import DIGITS
  from training.persist import export
  model = keras.Sequential([keras.Input(DIGITS.image_shape), keras.layers.Flatten(), keras.layers.Dense(10)])
  (tmp_path / "run").write_text("a file where the run's directory should be")
  config = types.SimpleNamespace(data=types.SimpleNamespace(source=Source.DIGITS),
                                 run=types.SimpleNamespace(model_dir=str(tmp_path / "run")))
  lines = []
  out = export.for_run(model, DIGITS, config, lambda fmt, *a: lines.append(fmt % a), newest="D/ckpt-9")
  assert set(out) == {"export_error"} and "\n" not in out["export_error"]
  assert out["export_error"].startswith(f"the SavedModel could not be written to {tmp_path}/run/export (")
  assert "checkpoint D/ckpt-9 and summary.json are kept" in out["export_error"]
  assert lines == [f"error: {out['export_error']}"]


def test_what_a_killed_export_left_is_removed_at_the_next_start(tmp_path):
  from training.persist import export
  dead = tmp_path / "export.tmp-999999999"  # beyond pid_max: no process has it
  (dead / "variables").mkdir(parents=True)
  live = tmp_path / f"export.tmp-{os.getpid()}"  # a process still exporting: not ours to remove
  live.mkdir()
  (tmp_path / "export").mkdir()
  lines = []
  export.remove_leftovers(str(tmp_path), lambda fmt, *args: lines.append(fmt % args))
  assert not dead.exists() and live.exists() and (tmp_path / "export").exists()
  assert lines == ["removed what an interrupted export left: export.tmp-999999999"]
  export.remove_leftovers(str(tmp_path), lines.append)
  assert len(lines) == 1  # nothing left to say


def test_a_stop_during_the_export_abandons_it_and_an_export_left_alone_ends():
  import threading
  from training.persist import export
  never = threading.Event()  # an export that does not end while the test runs (ResNet-50's take minutes)
  polls = []
  assert export.unless_stopped(lambda: never.wait(60) or {"export": "x"}, lambda: polls.append(1) or len(polls) > 2,
                               poll_seconds=0.01) is None
  never.set()
  assert export.unless_stopped(lambda: {"export": "x"}, lambda: False, poll_seconds=0.01) == {"export": "x"}
