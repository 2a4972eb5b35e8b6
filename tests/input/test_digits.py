"""The digits TFRecords and the per-rank pipeline."""
import numpy as np
import tensorflow as tf

from comm.topology import World
from flags.config import DataConfig, Source
from input import digits, pipeline, records
from input.datasets import DIGITS


def read_split(data_dir, split):
  images, labels = [], []
  for serialized in tf.data.TFRecordDataset(records.shard_paths(data_dir, split)):
    encoded, label = records.parse_example(serialized)
    images.append(tf.io.decode_png(encoded, channels=1).numpy())
    labels.append(int(label))
  return np.stack(images), np.array(labels)


def canonical(images, labels):
  """Sort examples by (label, pixels) so two splits can be compared as multisets."""
  keys = [(int(l), im.tobytes()) for im, l in zip(images, labels)]
  order = sorted(range(len(keys)), key=keys.__getitem__)
  return images[order], labels[order]


def test_round_trip_gives_the_same_images_and_labels(digits_dir):
  arrays = digits.load_arrays()
  for split, count in (("train", DIGITS.num_train), ("eval", DIGITS.num_eval)):
    images, labels = read_split(digits_dir, split)
    assert images.shape == (count, 8, 8, 1) and images.dtype == np.uint8
    want_images, want_labels = canonical(*arrays[split])
    got_images, got_labels = canonical(images, labels)
    np.testing.assert_array_equal(got_images, want_images)
    np.testing.assert_array_equal(got_labels, want_labels)


def test_files_follow_the_imagenet_layout(digits_dir):
  assert [p.rsplit("/", 1)[1] for p in records.shard_paths(digits_dir, "eval")] == [
      "validation-00000-of-00002", "validation-00001-of-00002"]
  raw = next(iter(tf.data.TFRecordDataset(records.shard_paths(digits_dir, "train"))))
  example = tf.train.Example.FromString(raw.numpy())
  label = example.features.feature["image/class/label"].int64_list.value[0]
  assert 1 <= label <= 10  # stored 1-based as ImageNet's files


def test_split_is_fixed_and_disjoint():
  a, b = digits.load_arrays(), digits.load_arrays()
  np.testing.assert_array_equal(a["eval"][0], b["eval"][0])
  assert len(a["train"][1]) + len(a["eval"][1]) == 1797


def test_normalisation_constants_match_the_training_split():
  images = digits.load_arrays()["train"][0] / 255.0
  assert abs(images.mean() - DIGITS.mean[0]) < 0.005
  assert abs(images.std() - DIGITS.std[0]) < 0.005


def data_config(data_dir, batch_size=32, ranks=1):
  return DataConfig(dataset=DIGITS, source=Source.DIGITS, tfds_name="", image_size=8, skip_corrupt=False,
                    data_dir=data_dir, create_data_dir=False, batch_size=batch_size,
                    global_batch=batch_size * ranks, eval_batch_size=50, shuffle_buffer=10_000)


def test_ranks_train_on_disjoint_shards_and_evaluate_everything_once(digits_dir):
  seen_train, eval_labels = [], []
  for rank in range(2):
    data = pipeline.build(data_config(digits_dir, ranks=2), World(size=2, rank=rank), seed=1)
    assert data.steps_per_epoch == DIGITS.num_train // 64
    batches = list(data.train_epoch(0))
    assert len(batches) == data.steps_per_epoch
    images, labels = batches[0]
    assert images.shape == (32, 8, 8, 1) and images.dtype == tf.float32
    seen_train.append({im.numpy().tobytes() for im, _ in
                       ((im, l) for b in batches for im, l in zip(*b))})
    eval_labels += [int(l) for _, ls in data.eval() for l in ls]
  assert not seen_train[0] & seen_train[1]
  assert len(eval_labels) == DIGITS.num_eval


def test_same_seed_and_epoch_give_the_same_batches(digits_dir):
  data = pipeline.build(data_config(digits_dir), World(), seed=3)
  first = [l.numpy() for _, l in data.train_epoch(2)]
  again = [l.numpy() for _, l in data.train_epoch(2)]
  other = [l.numpy() for _, l in data.train_epoch(3)]
  np.testing.assert_array_equal(np.concatenate(first), np.concatenate(again))
  assert not np.array_equal(np.concatenate(first), np.concatenate(other))
