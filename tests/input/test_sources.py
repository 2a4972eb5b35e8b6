"""ImageNet-layout sources built from the 100 sample JPEGs (bench/harness/samples.py): folder, TFRecords
(through the converter) and a locally prepared tfds set; the shared per-epoch
shuffle partitioned across ranks; evaluation coverage; bad input."""
import json
import os
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf

from bench.harness import samples
from comm.topology import World
from flags import data as data_flags
from flags.config import ConfigError
from comm import agreement
from input import convert, pipeline, records, sources

NUM = 100       # sample images; one class each, so a training label is the example's id
NUM_EVAL = 20   # every 5th sample is also in val/


def data_config(dataset, data_dir, batch_size=8, world=World(), image_size=32, skip_corrupt=False):
  """A DataConfig through the real flag validation."""
  f = types.SimpleNamespace(dataset=dataset, data_dir=data_dir, batch_size=batch_size, global_batch_size=0,
                            eval_batch_size=0, shuffle_buffer=64, image_size=image_size,
                            prepare_next_epoch=True,
                            skip_corrupt=skip_corrupt, accumulation_steps=1,
                            batch_policy="fixed", max_global_batch=0, batch_decide_every=50)
  return data_flags.build(f, world)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  return samples.imagenet_folder(str(tmp_path_factory.mktemp("folder")))


@pytest.fixture(scope="module")
def tfrecords(folder, tmp_path_factory):
  dst = str(tmp_path_factory.mktemp("tfrecords"))
  convert.convert(folder, dst, train_shards=7, validation_shards=3, workers=1, progress=open(os.devnull, "w"))
  return dst


def labels_of(dataset):
  return np.concatenate([labels.numpy() for _, labels in dataset]) if dataset is not None else np.array([])


def test_sources_describe_what_the_directory_holds(folder, tfrecords):
  for dataset, path in (("folder", folder), ("imagenet", tfrecords)):
    info = sources.scan(data_config(dataset, path)).info
    assert (info.num_classes, info.num_train, info.num_eval, info.image_shape) == (NUM, NUM, NUM_EVAL, (32, 32, 3))
  assert [c for c in sources.scan(data_config("imagenet", tfrecords)).train.counts] == [14, 14, 14, 15, 14, 14, 15]


@pytest.mark.parametrize("dataset", ["folder", "imagenet"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_each_epoch_is_one_shuffle_partitioned_across_ranks(dataset, ranks, folder, tfrecords):
  path = folder if dataset == "folder" else tfrecords
  epochs = []
  for epoch in (0, 1):
    per_rank = []
    for rank in range(ranks):
      data = pipeline.build(data_config(dataset, path, batch_size=32 // ranks, world=World(ranks, rank)),
                            World(ranks, rank), seed=7)
      batches = list(data.train_epoch(epoch))
      assert len(batches) == data.steps_per_epoch == NUM // 32
      assert all(images.shape == (32 // ranks, 32, 32, 3) for images, _ in batches)
      per_rank.append(np.concatenate([labels.numpy() for _, labels in batches]))
    seen = np.concatenate(per_rank)
    # Every example at most once, and all but fewer than one global batch of them.
    assert len(seen) == len(set(seen)) == (NUM // 32) * 32
    assert set(seen) <= set(range(NUM))
    epochs.append(per_rank)
  # A new shuffle each epoch: each rank's share changes.
  assert all(set(a) != set(b) for a, b in zip(*epochs))


@pytest.mark.parametrize("dataset", ["folder", "imagenet"])
def test_evaluation_covers_every_example_once_across_ranks(dataset, folder, tfrecords):
  path = folder if dataset == "folder" else tfrecords
  want = sorted(int(l) for l in labels_of(pipeline.build(data_config(dataset, path), World(), 0).eval()))
  assert len(want) == NUM_EVAL and len(set(want)) == NUM_EVAL
  for ranks in (3, 4):
    got = np.concatenate([labels_of(pipeline.build(data_config(dataset, path, world=World(ranks, r)),
                                                   World(ranks, r), 0).eval()) for r in range(ranks)])
    assert sorted(got.tolist()) == want


def test_a_resumed_epoch_continues_with_the_same_batches(tfrecords):
  data = pipeline.build(data_config("imagenet", tfrecords, batch_size=16), World(), seed=3)
  full = [b for b in data.train_epoch(1)]
  rest = [b for b in data.train_epoch(1, first_step=2, count=3)]
  assert len(rest) == 3
  for (a_images, a_labels), (b_images, b_labels) in zip(full[2:5], rest):
    np.testing.assert_array_equal(a_labels, b_labels)
    np.testing.assert_array_equal(a_images, b_images)  # same crops and flips, not only the same order


def test_output_dtype_follows_the_requested_precision(folder):
  data = pipeline.build(data_config("folder", folder), World(), seed=0, dtype=tf.bfloat16)
  images, labels = next(iter(data.train_epoch(0)))
  assert images.dtype == tf.bfloat16 and labels.dtype == tf.int32


# --------------------------------------------------------------------- tfds --

def prepare_tfds_samples(data_dir):
  """Prepare the sample JPEGs as a tfds set `sample_images` in data_dir (no download)."""
  import tensorflow_datasets as tfds

  files = samples.sample_files()
  os.makedirs(data_dir, exist_ok=True)

  # Unregistered, so tfds.builder finds it the way train.py does: from the files alone.
  class SampleImages(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version("1.0.0")
    pkg_dir_path = data_dir  # tfds looks for metadata beside a builder's package; a test has none

    def _info(self):
      return self.dataset_info_from_configs(
          features=tfds.features.FeaturesDict({"image": tfds.features.Image(encoding_format="jpeg"),
                                               "label": tfds.features.ClassLabel(num_classes=NUM)}),
          supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
      return {"train": self._generate_examples(files), "validation": self._generate_examples(files[::5])}

    def _generate_examples(self, paths):
      for path in paths:
        yield os.path.basename(path), {"image": path, "label": files.index(path)}

  SampleImages(data_dir=str(data_dir)).download_and_prepare(download_dir=str(data_dir / "none"))


def test_a_prepared_tfds_set_is_read_without_downloading(tmp_path):
  prepare_tfds_samples(tmp_path)
  config = data_config("tfds:sample_images", str(tmp_path), batch_size=16, world=World(2, 0))
  problem, scanned = data_flags.check(config, World(2, 0))
  assert problem is None and scanned.info.num_train == NUM
  seen = []
  for rank in range(2):
    data = pipeline.build(data_config("tfds:sample_images", str(tmp_path), batch_size=16, world=World(2, rank)),
                          World(2, rank), seed=1, scanned=scanned)
    assert data.info.num_classes == NUM and data.info.num_eval == NUM_EVAL
    seen.append(labels_of(data.train_epoch(0)))
  seen = np.concatenate(seen)
  assert len(seen) == len(set(seen)) == 96


# ---------------------------------------------------------------- bad input --

def check(dataset, path, **kw):
  return data_flags.check(data_config(dataset, path, **kw), World())[0]


def test_bad_directories_get_one_sentence_naming_the_flag_and_the_fix(tmp_path, folder):
  os.makedirs(tmp_path / "empty" / "train")
  assert "no class subfolders under train/" in check("folder", str(tmp_path / "empty"))
  assert "holds no train-*-of-* TFRecord files" in check("imagenet", str(tmp_path / "empty"))
  assert "python -m input.convert" in check("imagenet", str(tmp_path / "empty"))
  assert "cannot be loaded" in check("tfds:sample_images", str(tmp_path / "empty"))  # unknown name
  assert "tfds:mnist is not prepared in --data_dir" in check("tfds:mnist", str(tmp_path / "empty"))
  assert "exceeds the 100 training examples" in check("folder", folder, batch_size=128)
  with pytest.raises(ConfigError, match="--data_dir"):
    data_config("imagenet", "")
  with pytest.raises(ConfigError, match="unknown"):
    data_config("tfds", "/x")


def test_labels_out_of_range_are_refused_before_training(tmp_path):
  jpeg = open(samples.sample_files()[0], "rb").read()
  records.write_shards([(jpeg, 4), (jpeg, 5)], str(tmp_path), "train", 1)
  with open(tmp_path / sources.INFO_FILE, "w") as fh:
    json.dump({"num_classes": 3}, fh)
  problem = check("imagenet", str(tmp_path))
  assert "outside 1..3" in problem and "train-00000-of-00001" in problem


def test_a_truncated_tfrecord_is_named_or_skipped(tmp_path, tfrecords):
  for name in os.listdir(tfrecords):
    shutil.copy(os.path.join(tfrecords, name), tmp_path / name)
  damaged = tmp_path / "train-00002-of-00007"
  damaged.write_bytes(damaged.read_bytes()[:-1000])
  problem = check("imagenet", str(tmp_path))
  assert "train-00002-of-00007 is truncated after 13 complete records" in problem and "--skip_corrupt" in problem
  assert check("imagenet", str(tmp_path), skip_corrupt=True) is None
  source = sources.scan(data_config("imagenet", str(tmp_path), skip_corrupt=True))
  assert source.damaged == (str(damaged),) and source.info.num_train == NUM - 1


def test_start_up_reads_the_writers_record_counts_where_each_shards_size_still_matches(tmp_path, tfrecords):
  for name in os.listdir(tfrecords):
    shutil.copy(os.path.join(tfrecords, name), tmp_path / name)
  index = records.read_index(str(tmp_path))
  walked = {name: records.count_records(str(tmp_path / name)) for name in index}
  assert {name: n for name, (n, _) in index.items()} == walked  # the converter's index holds every shard
  config = data_config("imagenet", str(tmp_path))
  # An index that says 1 more record for one shard is believed (nothing walks it)...
  index["train-00000-of-00007"][0] += 1
  (tmp_path / records.INDEX_FILE).write_text(json.dumps(index))
  assert sources.scan(config).info.num_train == NUM + 1
  # ...until the shard's size differs from the one written (a copy cut short, a rewrite): walked again.
  index["train-00000-of-00007"][1] += 1
  (tmp_path / records.INDEX_FILE).write_text(json.dumps(index))
  assert sources.scan(config).info.num_train == NUM
  (tmp_path / records.INDEX_FILE).write_text("{not json")  # unreadable: every shard walked
  assert sources.scan(config).info.num_train == NUM


@pytest.fixture
def folder_with_a_damaged_jpeg(tmp_path):
  root = samples.imagenet_folder(str(tmp_path))
  wnid = sorted(os.listdir(os.path.join(root, "train")))[3]
  path = os.path.join(root, "train", wnid, os.listdir(os.path.join(root, "train", wnid))[0])
  data = open(path, "rb").read()
  os.remove(path)  # a symlink to the generated sample: replace it, never write through it
  with open(path, "wb") as fh:
    fh.write(data[: len(data) // 2])  # a truncated download
  return root, path


def test_a_damaged_jpeg_stops_the_run_naming_the_file(folder_with_a_damaged_jpeg):
  root, path = folder_with_a_damaged_jpeg
  data = pipeline.build(data_config("folder", root, batch_size=50), World(), seed=0)
  with pytest.raises(tf.errors.InvalidArgumentError, match="--skip_corrupt") as error:
    for _ in data.train_epoch(0):
      pass
  assert path in str(error.value)


def test_with_skip_corrupt_a_damaged_jpeg_is_skipped_and_counted(folder_with_a_damaged_jpeg, capfd):
  root, path = folder_with_a_damaged_jpeg
  data = pipeline.build(data_config("folder", root, batch_size=50, skip_corrupt=True), World(), seed=0)
  seen = labels_of(data.train_epoch(0))
  assert len(seen) == 100 and 3 not in seen  # two full steps: refilled from the rank's share
  assert f"input: skipped {path}" in capfd.readouterr().err


def copy_of(tfrecords, tmp_path):
  for name in os.listdir(tfrecords):
    shutil.copy(os.path.join(tfrecords, name), tmp_path / name)
  return tmp_path


def test_an_image_damaged_inside_is_named_once_its_batch_fails(tmp_path, tfrecords):
  # Starts and ends like a JPEG, so only the decoder can tell: the fast path
  # checks nothing per example, and the failed batch is searched afterwards.
  root = copy_of(tfrecords, tmp_path)
  shard = root / "train-00003-of-00007"
  examples = [records.parse_example(r) for r in tf.data.TFRecordDataset(str(shard))]
  examples = [(e.numpy(), int(l)) for e, l in examples]
  examples[5] = (b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8 + b"\xff\xd9", examples[5][1])
  with tf.io.TFRecordWriter(str(shard)) as writer:
    for encoded, label in examples:
      writer.write(records.make_example(encoded, label))
  data = pipeline.build(data_config("imagenet", str(root), batch_size=10), World(), seed=0)
  with pytest.raises(tf.errors.InvalidArgumentError) as error:
    for _ in data.train_epoch(0):
      pass
  assert f"{shard}:record 5 cannot be decoded" in str(error.value) and "--skip_corrupt" in str(error.value)
  skipping = pipeline.build(data_config("imagenet", str(root), batch_size=10, skip_corrupt=True), World(), seed=0)
  assert len(labels_of(skipping.train_epoch(0))) == 100  # dropped, and refilled from the rank's share


def test_a_record_file_with_a_bad_checksum_is_named(tmp_path, tfrecords):
  root = copy_of(tfrecords, tmp_path)
  shard = root / "train-00005-of-00007"
  data = bytearray(shard.read_bytes())
  first = 12 + int.from_bytes(data[:8], "little") + 4  # the second record: the scan reads the first
  data[first + 12 + 3000] ^= 0xFF  # inside its payload: the CRC no longer matches, the length does
  shard.write_bytes(bytes(data))
  assert sources.scan(data_config("imagenet", str(root))).train.counts[5] == 14  # headers intact
  data = pipeline.build(data_config("imagenet", str(root), batch_size=10), World(), seed=0)
  with pytest.raises(tf.errors.InvalidArgumentError, match="--skip_corrupt") as error:
    for _ in data.train_epoch(0):
      pass
  assert f"{shard} is a damaged record file" in str(error.value)
  data = bytearray(shard.read_bytes())
  data[12 + 3000] ^= 0xFF  # now the first record too: the start-up scan names the file
  shard.write_bytes(bytes(data))
  problem = check("imagenet", str(root))
  assert f"{shard} is damaged" in problem


# ------------------------------------------------------- incomplete shard sets --

@pytest.mark.parametrize("names, want", [
    (["train-00000-of-00002", "train-00001-of-00002"], []),
    (["train-00000-of-00004", "train-00001-of-00004", "train-00003-of-00004"], ["train-00002-of-00004"]),
    (["train-00000-of-00002", "train-00001-of-00002", "validation-00001-of-00002"], ["validation-00000-of-00002"]),
    (["train-00001-of-00003"], ["train-00000-of-00003", "train-00002-of-00003"]),
    # tfds names its files the same way after a prefix of its own
    (["fashion_mnist-train.tfrecord-00000-of-00002"], ["fashion_mnist-train.tfrecord-00001-of-00002"]),
    (["/d/imagenet2012-validation.tfrecord-00000-of-00002", "/d/imagenet2012-validation.tfrecord-00001-of-00002"],
     []),
    # a writer's temporary file and other names say nothing about the set
    (["train-00000-of-00001", "train-00001-of-00002.tmp-123", "README"], []),
    (["/data/x/train-00000-of-00002"], ["train-00001-of-00002"]),
])
def test_missing_shards_are_the_gaps_in_the_of_m_names(names, want):
  assert sources.missing_shards(names) == want


def empty_shards(directory, names):
  os.makedirs(directory, exist_ok=True)
  for name in names:
    open(os.path.join(directory, name), "wb").close()
  return str(directory)


def test_a_missing_shard_is_named_before_any_record_is_counted(tmp_path):
  # Empty files named like shards: the names alone must give it away (today's scan would count 0
  # records and blame the batch size).
  d = empty_shards(tmp_path, ["train-00000-of-00004", "train-00001-of-00004", "train-00003-of-00004",
                              "validation-00000-of-00001"])
  problem = check("imagenet", d)
  assert problem.startswith(f"--data_dir={d} is missing train-00002-of-00004 of the 4 shards of its set; copy it")
  assert "python -m input.convert" in problem
  d = empty_shards(tmp_path / "b", ["train-00000-of-00010"] + ["validation-00000-of-00002"])
  problem = check("imagenet", d)
  assert "is missing 9 shards: train-00001-of-00010, train-00002-of-00010, train-00003-of-00010, " \
         "train-00004-of-00010, train-00005-of-00010 and 4 more" in problem, problem
  assert "validation-00001-of-00002" not in problem  # the first split's gaps are enough to name the fault


def test_a_shard_of_a_prepared_tfds_set_that_is_missing_is_named(tmp_path):
  prepare_tfds_samples(tmp_path)
  shard = next(p for p in tmp_path.rglob("*-train.tfrecord-*-of-*"))
  os.remove(shard)
  problem = check("tfds:sample_images", str(tmp_path))
  assert problem is not None and shard.name in problem and "tfds build sample_images" in problem, problem


def test_the_fingerprint_counts_what_skip_corrupt_leaves(tmp_path, tfrecords):
  # The same files in another directory agree; a copy with one truncated shard, read with
  # --skip_corrupt, holds one record fewer, and the fingerprint says so.
  intact = agreement.of(sources.scan(data_config("imagenet", str(copy_of(tfrecords, tmp_path)))))
  assert intact == agreement.of(sources.scan(data_config("imagenet", tfrecords)))
  damaged = tmp_path / "train-00002-of-00007"
  damaged.write_bytes(damaged.read_bytes()[:-1000])
  cut = agreement.of(sources.scan(data_config("imagenet", str(tmp_path), skip_corrupt=True)))
  assert (cut.train, cut.damaged, intact.train, intact.damaged) == (NUM - 1, 1, NUM, 0)
