"""python -m input.convert: an ImageNet-layout folder -> TFRecords in ImageNet's layout."""
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from bench.harness import samples
from conftest import python
from input import convert, records, sources


def read_all(paths):
  out = []
  for serialized in tf.data.TFRecordDataset(paths):
    ex = tf.train.Example.FromString(serialized.numpy()).features.feature
    out.append((ex["image/encoded"].bytes_list.value[0], ex["image/class/label"].int64_list.value[0],
                ex["image/class/synset"].bytes_list.value[0].decode(), ex["image/filename"].bytes_list.value[0].decode()))
  return out


def test_plan_deals_a_fixed_permutation_in_contiguous_runs():
  files, labels = [f"f{i}" for i in range(10)], list(range(10))
  shards = convert.plan(files, labels, 3, shuffle=False)
  assert [[p for p, _ in pairs] for _, pairs in shards] == [["f0", "f1", "f2"], ["f3", "f4", "f5"], ["f6", "f7", "f8", "f9"]]
  shuffled = convert.plan(files, labels, 3, shuffle=True)
  assert shuffled == convert.plan(files, labels, 3, shuffle=True)  # the same on a rerun
  assert sorted(p for _, pairs in shuffled for p, _ in pairs) == sorted(files)
  assert [p for _, pairs in shuffled for p, _ in pairs] != files


def test_cli_writes_the_imagenet_layout_byte_for_byte(tmp_path):
  src = samples.imagenet_folder(str(tmp_path / "folder"))
  proc = python("-m", "input.convert", "--src", src, "--dst", str(tmp_path / "out"),
                "--train_shards", "4", "--validation_shards", "2", "--workers", "2", timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "100 training and 20 validation images of 100 classes" in proc.stdout
  assert "convert: 6/6 shards" in proc.stderr  # the progress line
  names = sorted(os.listdir(tmp_path / "out"))
  assert names == [sources.INFO_FILE, records.INDEX_FILE] + [f"train-0000{i}-of-00004" for i in range(4)] + \
      ["validation-00000-of-00002", "validation-00001-of-00002"]
  classes = sorted(os.listdir(os.path.join(src, "train")))
  by_name = {os.path.basename(p): p for p in samples.sample_files()}
  got = read_all(records.shard_paths(str(tmp_path / "out"), "train"))
  assert len(got) == 100
  for encoded, label, synset, filename in got:
    assert classes[label - 1] == synset == filename.split("_")[0]  # 1-based labels, sorted wnids
    assert encoded == open(by_name[filename], "rb").read()
  meta = json.load(open(tmp_path / "out" / sources.INFO_FILE))
  assert meta["num_classes"] == 100 and meta["train_examples"] == 100 and meta["validation_examples"] == 20


def test_a_rerun_writes_only_the_missing_shards(tmp_path):
  src = samples.imagenet_folder(str(tmp_path / "folder"), val_every=50)
  dst = str(tmp_path / "out")
  devnull = open(os.devnull, "w")
  convert.convert(src, dst, 3, 1, workers=1, progress=devnull)
  kept, lost = os.path.join(dst, "train-00000-of-00003"), os.path.join(dst, "train-00001-of-00003")
  before = open(lost, "rb").read()
  os.utime(kept, (1, 1))
  os.remove(lost)
  convert.convert(src, dst, 3, 1, workers=1, progress=devnull)
  assert os.stat(kept).st_mtime == 1  # untouched
  assert open(lost, "rb").read() == before  # rewritten identically
  assert not [n for n in os.listdir(dst) if ".tmp-" in n]


def test_png_is_reencoded_and_a_damaged_image_is_named_or_skipped(tmp_path):
  src = tmp_path / "folder"
  os.makedirs(src / "train" / "n0")
  png = io.BytesIO()
  Image.fromarray(np.full((20, 30, 3), 200, np.uint8)).save(png, format="PNG")
  (src / "train" / "n0" / "a.png").write_bytes(png.getvalue())
  jpeg = open(samples.sample_files()[0], "rb").read()
  (src / "train" / "n0" / "b.JPEG").write_bytes(jpeg[: len(jpeg) // 3])
  devnull = open(os.devnull, "w")
  with pytest.raises(ValueError, match="b.JPEG cannot be decoded.*--skip_corrupt"):
    convert.convert(str(src), str(tmp_path / "out"), 1, 1, workers=1, progress=devnull)
  assert not os.listdir(tmp_path / "out")  # nothing that looks complete
  meta = convert.convert(str(src), str(tmp_path / "out"), 1, 1, workers=1, skip_corrupt=True, progress=devnull)
  assert meta["train_examples"] == 1
  (encoded, label, _, _), = read_all(records.shard_paths(str(tmp_path / "out"), "train"))
  assert encoded[:2] == b"\xff\xd8" and label == 1
  assert tf.io.decode_jpeg(encoded).shape == (20, 30, 3)
