"""bench/harness/samples.py: the 100 JPEGs the input tests and bench-input read, made from
the photographs inside installed packages; what those tests rely on."""
import os

import pytest
import tensorflow as tf

from bench.harness import samples


@pytest.fixture(scope="module")
def files():
  return samples.sample_files()


def test_one_hundred_distinct_jpegs_one_real_wnid_each(files):
  # tfds's imagenet2012 builder (test_tfds_imagenet.py) labels a class by its wnid's place in this file.
  from tensorflow_datasets.datasets.imagenet2012 import imagenet_common
  known = open(imagenet_common.label_names_file()).read().split()
  names = [os.path.basename(p) for p in files]
  assert len(files) == 100 and names == sorted(names)
  wnids = [n.split("_", 1)[0] for n in names]
  assert len(set(wnids)) == 100 and set(wnids) <= set(known)
  assert all(os.path.dirname(p) == os.path.dirname(files[0]) and p.endswith(".JPEG") for p in files)
  data = [open(p, "rb").read() for p in files]
  assert len(set(data)) == 100
  # test_sources flips a byte 3,000 bytes into a record and cuts 1,000 off a shard's last one.
  assert min(map(len, data)) > 4000


def test_they_decode_to_imagenet_like_shapes(files):
  shapes = [tuple(tf.io.decode_jpeg(open(p, "rb").read()).shape) for p in files]
  assert sum(c == 1 for _, _, c in shapes) == 4  # grey, decoded to 3 channels by the pipeline
  longest = [max(h, w) for h, w, _ in shapes]
  assert longest.count(500) >= 60 and min(longest) < 300 and max(longest) > 1000
  assert sum(w < h for h, w, _ in shapes) >= 5  # some portrait
  assert min(min(h, w) for h, w, _ in shapes) >= 95  # no smaller than the real sample's smallest, 95x95


def test_the_same_bytes_on_every_generation(files, tmp_path):
  again = samples.generate(str(tmp_path))
  assert [os.path.basename(p) for p in again] == [os.path.basename(p) for p in files]
  assert all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(again, files))


def test_imagenet_folder_layout(tmp_path):
  root = samples.imagenet_folder(str(tmp_path), val_every=5)
  assert len(os.listdir(os.path.join(root, "train"))) == 100
  val = os.listdir(os.path.join(root, "val"))
  assert len(val) == 20 and all(len(os.listdir(os.path.join(root, "val", w))) == 1 for w in val)
  with pytest.raises(FileNotFoundError, match="folder of <wnid>_<name>.JPEG"):
    samples.sample_files(str(tmp_path / "missing"))
