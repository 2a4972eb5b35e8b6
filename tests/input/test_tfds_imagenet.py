"""ImageNet prepared the way tensorflow-datasets documents it, then trained on by 2 ranks.

A new user runs tfds's own imagenet2012 builder over the two archives in a
manual dir, then `--dataset=tfds:imagenet2012`. Here the archives are tiny,
made from the 100 sample JPEGs in ImageNet's layout: ILSVRC2012_img_train.tar
holds one inner tar per class (n01440764.tar, plain file names inside),
ILSVRC2012_img_val.tar holds ILSVRC2012_val_%08d.JPEG. No label file is
needed: tfds ships labels.txt (the 1,000 wnids) and validation_labels.txt (the
wnid of each validation file in sorted name order) inside the package, so the
10 validation files take the first 10 labels of that list, whatever they show.

tfds 4.9.10 accepts the tiny set as it is: a generator-based builder records the
split sizes it wrote and checks none, and a manual-dir builder has no URLs, so
there are no checksums to skip or register (DownloadConfig needs only
manual_dir). It does not download: GCS is off in this release
(gcs_utils._is_gcs_disabled) and the preparation below runs in a network
namespace of its own (unshare --net, loopback only) with Python's socket calls
audited; a connection attempt fails the test. Before make setup installed
importlib_resources, this same preparation failed with "No module named
'importlib_resources'" (tfds imports it and does not declare it).

  python tests/input/test_tfds_imagenet.py MANUAL_DIR DATA_DIR   # prepare; prints JSON
"""
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
VAL_EVERY = 10  # 100 training photographs, 10 validation files


def _add(tar, name, data):
  info = tarfile.TarInfo(name)
  info.size = len(data)
  tar.addfile(info, io.BytesIO(data))


def manual_dir(root, files):
  """root holding the two archives of ImageNet's layout, made from the JPEG `files`."""
  os.makedirs(root, exist_ok=True)
  with tarfile.open(os.path.join(root, TRAIN_TAR), "w") as outer:
    for i, path in enumerate(files):
      wnid = os.path.basename(path).split("_", 1)[0]
      inner = io.BytesIO()
      with tarfile.open(fileobj=inner, mode="w") as per_class:
        _add(per_class, f"{wnid}_{i}.JPEG", open(path, "rb").read())
      _add(outer, f"{wnid}.tar", inner.getvalue())
  with tarfile.open(os.path.join(root, VAL_TAR), "w") as val:
    for i, path in enumerate(files[::VAL_EVERY]):
      _add(val, f"ILSVRC2012_val_{i + 1:08d}.JPEG", open(path, "rb").read())
  return str(root)


def prepare(manual, data_dir):
  """tfds's documented preparation; {split: [(file_name, label)]} of what it wrote."""
  import tensorflow_datasets as tfds
  builder = tfds.builder("imagenet2012", data_dir=data_dir)
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual))
  names = builder.info.features["label"].names
  return {split: sorted((ex["file_name"].decode(), names[ex["label"]])
                        for ex in tfds.as_numpy(builder.as_dataset(split=split)))
          for split in ("train", "validation")}


def test_tfds_builder_output_trains(tmp_path):
  # Imported here, not above: run as a script, this file needs tfds alone.
  from bench.harness import samples
  from conftest import MODEL, REPO, python
  from test_train_on_sources import summary_of
  files = samples.sample_files()
  manual = manual_dir(tmp_path / "manual", files)
  data_dir = str(tmp_path / "tensorflow_datasets")
  proc = subprocess.run(["unshare", "--net", sys.executable, __file__, manual, data_dir], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result["connections"] == []

  # Training files keep their names and take their wnid's label (the inner tar's name).
  written = result["examples"]
  assert [name.split("_")[0] for name, _ in written["train"]] == [label for _, label in written["train"]]
  assert sorted(name for name, _ in written["train"]) == sorted(
      f"{os.path.basename(p).split('_')[0]}_{i}.JPEG" for i, p in enumerate(files))
  # Validation files take the package's list, in sorted name order.
  package = importlib.util.find_spec("tensorflow_datasets").submodule_search_locations[0]
  with open(os.path.join(package, "datasets", "imagenet2012", "validation_labels.txt")) as fh:
    first = fh.read().split()[:len(files[::VAL_EVERY])]
  assert written["validation"] == [[f"ILSVRC2012_val_{i + 1:08d}.JPEG", w] for i, w in enumerate(first)]

  # 100 images, batch 16: 6 steps an epoch, so 4 steps end in one held-out pass. One process: how
  # a tfds split is dealt to ranks is test_sources.py's (every example once, across 2 and 4 ranks).
  run = python("train.py", f"--model_dir={tmp_path / 'run'}", "--dataset=tfds:imagenet2012",
               f"--data_dir={data_dir}", "--image_size=32", f"--model={MODEL}", "--batch_size=16",
               "--max_steps=4", "--log_every=1", "--export=false", timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  summary = summary_of(run)
  assert (summary["dataset"], summary["steps"]) == ("tfds:imagenet2012", 4)
  assert summary["final_top1"] is not None


if __name__ == "__main__":
  connections = []

  def audit(event, args):
    if event in ("socket.connect", "socket.getaddrinfo"):
      connections.append(f"{event} {args[1] if event == 'socket.connect' else args[:2]}")
  sys.addaudithook(audit)
  examples = prepare(*sys.argv[1:3])
  print(json.dumps({"connections": connections, "examples": examples}))
