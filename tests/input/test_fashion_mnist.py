"""--dataset=fashion_mnist: IDX parsing, the written TFRecords, the missing-package error, a short run."""
import gzip
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from conftest import MODEL, python
from flags.config import ConfigError
from input import fashion_mnist, records
from input.datasets import FASHION_MNIST


def idx(type_code, shape, values=None, magic=b"\x00\x00"):
  """The bytes of an IDX file of `shape`; values default to 0, 1, 2, ... mod 256."""
  count = int(np.prod(shape))
  values = np.arange(count) % 256 if values is None else values
  header = magic + bytes([type_code, len(shape)]) + np.array(shape, ">u4").tobytes()
  return header + np.asarray(values, np.uint8).tobytes()


@pytest.mark.parametrize("data, shape", [
    (idx(0x08, (3,)), (3,)),              # labels: one dimension
    (idx(0x08, (2, 3, 4)), (2, 3, 4)),    # images: count, rows, columns
    (idx(0x08, (0, 28, 28)), (0, 28, 28)),
])
def test_parse_idx_reads_the_header_dimensions(data, shape):
  array = fashion_mnist.parse_idx(data)
  assert array.shape == shape and array.dtype == np.uint8
  np.testing.assert_array_equal(array.ravel(), np.arange(int(np.prod(shape))) % 256)


@pytest.mark.parametrize("data, why", [
    (idx(0x08, (3,), magic=b"\x01\x00"), "magic 01000801"),       # not an IDX file
    (idx(0x0D, (3,)), "magic 00000d01"),                           # floats, not unsigned bytes
    (b"\x00\x00", "magic 0000"),                                   # shorter than the magic
    (b"", "magic missing"),
    (idx(0x08, (2, 3))[:10], "needs 12 bytes, the file has 10"),  # header cut short
    (idx(0x08, (2, 3))[:-1], "need 6 bytes of values, the file has 5"),
    (idx(0x08, (2, 3)) + b"\x00", "need 6 bytes of values, the file has 7"),
])
def test_parse_idx_refuses_what_is_not_a_whole_idx_file(data, why):
  with pytest.raises(ValueError, match=why):
    fashion_mnist.parse_idx(data)


def tiny_source(directory, train=5, test=3):
  """The four gzipped IDX files with `train` and `test` 28x28 images; labels i % 10."""
  rng = np.random.default_rng(0)
  for split, count in (("train", train), ("eval", test)):
    images_file, labels_file = fashion_mnist.FILES[split]
    images = rng.integers(0, 256, (count, 28, 28))
    with gzip.open(os.path.join(directory, images_file), "wb") as fh:
      fh.write(idx(0x08, (count, 28, 28), images.ravel()))
    with gzip.open(os.path.join(directory, labels_file), "wb") as fh:
      fh.write(idx(0x08, (count,), np.arange(count) % 10))
  return str(directory)


def test_load_arrays_reads_the_gzipped_files(tmp_path):
  arrays = fashion_mnist.load_arrays(tiny_source(tmp_path))
  images, labels = arrays["train"]
  assert images.shape == (5, 28, 28, 1) and images.dtype == np.uint8
  np.testing.assert_array_equal(labels, [0, 1, 2, 3, 4])
  assert arrays["eval"][0].shape == (3, 28, 28, 1)


def test_images_and_labels_must_pair_up(tmp_path):
  tiny_source(tmp_path)
  with gzip.open(tmp_path / fashion_mnist.FILES["train"][1], "wb") as fh:
    fh.write(idx(0x08, (4,)))
  with pytest.raises(ValueError, match=r"\(5, 28, 28\) and train-labels-idx1-ubyte.gz \(4,\)"):
    fashion_mnist.load_arrays(str(tmp_path))


SENTENCE = ("Fashion-MNIST's files are not in {}; run make setup "
            "(it installs Debian's dataset-fashion-mnist).")


def test_missing_files_are_one_sentence_naming_make_setup(tmp_path):
  empty = str(tmp_path / "empty")
  os.makedirs(empty)
  assert fashion_mnist.missing(empty) == SENTENCE.format(empty)
  with pytest.raises(ConfigError) as caught:
    fashion_mnist.load_arrays(empty)
  assert str(caught.value) == SENTENCE.format(empty)
  # Three of the four files are as bad as none.
  partial = tiny_source(tmp_path)
  os.remove(os.path.join(partial, fashion_mnist.FILES["eval"][1]))
  assert fashion_mnist.missing(partial) == SENTENCE.format(partial)
  assert fashion_mnist.check(str(tmp_path / "records"), source_dir=partial) == SENTENCE.format(partial)


def test_written_records_need_no_package(tmp_path):
  data_dir = str(tmp_path / "records")
  fashion_mnist.write(data_dir, source_dir=tiny_source(tmp_path))
  assert fashion_mnist.check(data_dir, source_dir=str(tmp_path / "nowhere")) is None


def test_make_setup_refuses_a_package_whose_statistics_are_not_the_constants(tmp_path):
  os.makedirs(tmp_path / "matching")
  # Random grey levels: mean ~0.5, std ~0.29, against Fashion-MNIST's 0.286 and 0.353.
  assert re.search(r"have mean 0\.\d{4} and std 0\.\d{4}, not input/datasets.py.s 0.286 and 0.353",
                   fashion_mnist.constants_problem(tiny_source(tmp_path, train=50)))
  # Two levels, 0 and 184 (0.7216), the second in 621 of 1,568 pixels: mean 0.2858, std 0.3529.
  source = tiny_source(tmp_path / "matching", train=2)
  levels = np.zeros(2 * 28 * 28, np.uint8)
  levels[:621] = 184
  with gzip.open(os.path.join(source, fashion_mnist.FILES["train"][0]), "wb") as fh:
    fh.write(idx(0x08, (2, 28, 28), levels))
  assert fashion_mnist.constants_problem(source) is None


TRAIN, EVAL = 320, 80  # images of the short run's set: 20 a training shard, 20 an eval shard


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
  """train.py on records written from a small set in the package's format (IDX files: the package's
  own are outside the repository; make setup checks them), 4 steps, the full held-out pass.
  The step of Jia et al.'s recipe too (LARS in fp16 with label smoothing), which one run shows as
  well as two: that the ranks agree on it is overflow_check's (tests/multiprocess/test_checks.py).
  4 steps, not 10: fp16 converts every element on a CPU without fp16 arithmetic (14 images/s here),
  and the steps past the second showed nothing more (each is the same traced step)."""
  source = tiny_source(tmp_path_factory.mktemp("idx"), train=TRAIN, test=EVAL)
  data_dir = str(tmp_path_factory.mktemp("fashion_mnist"))
  fashion_mnist.write(data_dir, source_dir=source)
  model_dir = tmp_path_factory.mktemp("run")
  proc = python("train.py", "--dataset=fashion_mnist", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                f"--model={MODEL}", "--max_steps=4", "--log_every=2", "--optimizer=lars", "--precision=fp16",
                "--label_smoothing=0.1", "--base_lr=20", "--lr_schedule=poly", "--export=false", timeout=600)
  return proc, data_dir, source


def test_a_short_run_reports_a_held_out_top1(short_run):
  proc, _, _ = short_run
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary["dataset"] == "fashion_mnist" and summary["steps"] == 4
  assert 0.0 < summary["final_top1"] <= 1.0 and np.isfinite(summary["final_loss"])
  assert (summary["optimizer"], summary["precision"]) == ("lars", "fp16")
  assert "step      4/4" in proc.stdout + proc.stderr


def test_the_written_set_is_the_sources_split_in_its_order(short_run):
  _, data_dir, source = short_run
  arrays = fashion_mnist.load_arrays(source)
  for split, shards, count in (("train", 16, TRAIN), ("eval", 4, EVAL)):
    paths = records.shard_paths(data_dir, split)
    assert len(paths) == shards and sum(records.count_records(p) for p in paths) == count
    labels = np.concatenate(list(tf.data.TFRecordDataset(paths).map(lambda r: records.parse_example(r)[1])
                                 .batch(count).as_numpy_iterator()))
    assert np.bincount(labels).tolist() == [count // 10] * 10  # the source's i % 10, 0-based after reading
    # Shards are round-robin: record k of shard 0 is image k * shards of the files.
    images, file_labels = arrays[split]
    for k, serialized in enumerate(tf.data.TFRecordDataset(paths[0]).take(3)):
      encoded, label = records.parse_example(serialized)
      image = tf.io.decode_png(encoded, channels=1).numpy()
      assert image.shape == (28, 28, 1)
      np.testing.assert_array_equal(image, images[k * shards])
      assert int(label) == file_labels[k * shards]
