"""train.py fed from every ImageNet format: TFRecords and an image folder here, a tfds set in
test_tfds_imagenet.py (prepared by tfds's own imagenet2012 builder), one process each (how each is
dealt to ranks: test_sources.py). Tiny images, a few steps."""
import json
import os
import re


from bench.harness import samples
from conftest import MODEL, python
from input import convert


def summary_of(proc):
  found = re.findall(r"^(?:\[\d+,\d+\]<stdout>:)?(\{.*\})$", proc.stdout, re.M)
  assert found, f"no summary line\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
  return json.loads(found[-1])


def train_args(model_dir, dataset, data_dir):
  return ("train.py", f"--model_dir={model_dir}", f"--dataset={dataset}", f"--data_dir={data_dir}",
          f"--model={MODEL}", "--image_size=32", "--batch_size=8", "--max_steps=2", "--log_every=1",
          "--export=false")


def test_trains_from_imagenet_tfrecords(tmp_path):
  folder = samples.imagenet_folder(str(tmp_path / "folder"))
  convert.convert(folder, str(tmp_path / "records"), train_shards=4, validation_shards=2, workers=1,
                  progress=open(os.devnull, "w"))
  proc = python(*train_args(tmp_path / "run", "imagenet", tmp_path / "records"), timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = summary_of(proc)
  assert (summary["dataset"], summary["steps"]) == ("imagenet", 2)
  assert summary["final_top1"] is not None  # evaluated on the 20 validation records


def test_trains_from_an_image_folder(tmp_path):
  # One process: how a folder is dealt to ranks is test_sources.py's (every example once, 2 and 4 ranks).
  folder = samples.imagenet_folder(str(tmp_path / "folder"))
  proc = python(*train_args(tmp_path / "run", "folder", folder), timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = summary_of(proc)
  assert (summary["dataset"], summary["global_batch"], summary["steps"]) == ("folder", 8, 2)
  assert summary["final_top1"] is not None

