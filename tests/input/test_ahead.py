"""input/ahead.py on the digits set: the epoch prepared in the background is the epoch a fresh build
gives, batch for batch, and what does not match the request (a resume mid-epoch, another epoch, an
elastic plan, a new Input after a world change or a stop) is built afresh."""
import numpy as np

from conftest import python
from comm.topology import World
from flags.config import DataConfig, Source
from input import ahead, pipeline
from input.datasets import DIGITS


def config(data_dir, prepare=True, ranks=1):
  return DataConfig(dataset=DIGITS, source=Source.DIGITS, tfds_name="", image_size=8, skip_corrupt=False,
                    data_dir=data_dir, create_data_dir=False, batch_size=32, global_batch=32 * ranks,
                    eval_batch_size=50, shuffle_buffer=10_000, prepare_next_epoch=prepare)


def arrays(batches):
  return [(images.numpy(), labels.numpy()) for images, labels in batches]


def assert_same(got, want):
  assert len(got) == len(want)
  for (gi, gl), (wi, wl) in zip(got, want):
    np.testing.assert_array_equal(gl, wl)
    np.testing.assert_array_equal(gi, wi)


def test_the_prepared_next_epoch_is_the_epoch_built_afresh(digits_dir):
  world = World(size=2, rank=1)
  fresh = pipeline.build(config(digits_dir, prepare=False, ranks=2), world, seed=7)
  data = pipeline.build(config(digits_dir, ranks=2), world, seed=7)
  assert isinstance(data, ahead.NextEpoch) and not isinstance(fresh, ahead.NextEpoch)
  assert_same(arrays(data.train_epoch(0)), arrays(fresh.train_epoch(0)))
  assert data._ahead[0] == 1  # epoch 1 was prepared when epoch 0 was asked for
  prepared = data.train_epoch(1)
  assert not hasattr(prepared, "element_spec")  # handed over from the background, not a new dataset
  assert_same(arrays(prepared), arrays(fresh.train_epoch(1)))
  # the run's last steps: only the first `count` of the prepared epoch, as a fresh build's take(count)
  assert_same(arrays(data.train_epoch(2, count=5)), arrays(fresh.train_epoch(2, count=5)))


def test_what_does_not_match_the_request_is_built_afresh(digits_dir):
  world = World()
  fresh = pipeline.build(config(digits_dir, prepare=False), world, seed=3)
  data = pipeline.build(config(digits_dir), world, seed=3)
  data.train_epoch(0)                                  # epoch 1 prepared
  # a resume mid-epoch 1 (a stop there, the same command again): its rest, not the prepared start
  assert_same(arrays(data.train_epoch(1, first_step=10)), arrays(fresh.train_epoch(1, first_step=10)))
  assert data._ahead[0] == 2
  assert_same(arrays(data.train_epoch(4)), arrays(fresh.train_epoch(4)))  # another epoch: 2 is dropped
  plan = data.elastic_plan(5, ())                      # an elastic generation: dealt, not prepared
  assert data._ahead[0] == 5
  assert_same(arrays(data.train_epoch(5, plan=plan)), arrays(fresh.train_epoch(5, plan=plan)))
  assert data._ahead[0] == 5                           # an elastic plan prepares nothing further


def test_a_world_change_during_the_preparation_reads_the_new_worlds_share(digits_dir):
  # The old world's Input prepared epoch 1 for 1 rank; the new world's Input (2 ranks) has its own.
  one = pipeline.build(config(digits_dir), World(), seed=5)
  list(one.train_epoch(0))
  two = [pipeline.build(config(digits_dir, ranks=2), World(size=2, rank=r), seed=5) for r in range(2)]
  fresh = [pipeline.build(config(digits_dir, prepare=False, ranks=2), World(size=2, rank=r), seed=5)
           for r in range(2)]
  for rank in range(2):
    assert_same(arrays(two[rank].train_epoch(1)), arrays(fresh[rank].train_epoch(1)))
  seen = [{(im.tobytes(), int(l)) for images, labels in arrays(two[r].train_epoch(2)) for im, l in zip(images, labels)}
          for r in range(2)]
  assert not seen[0] & seen[1]  # no example twice in an epoch across the new world's ranks


def test_a_stop_while_the_next_epoch_is_prepared_exits_with_its_status(digits_dir):
  # train.py's stop: the run exits (75) with the next epoch's build in flight in its thread.
  proc = python("-c", f"""
import sys
from comm.topology import World
from flags.config import DataConfig, Source
from input import pipeline
from input.datasets import DIGITS
config = DataConfig(dataset=DIGITS, source=Source.DIGITS, tfds_name="", image_size=8, skip_corrupt=False,
                    data_dir={digits_dir!r}, create_data_dir=False, batch_size=32, global_batch=32,
                    eval_batch_size=50, shuffle_buffer=10_000)
data = pipeline.build(config, World(), seed=1)
next(iter(data.train_epoch(0)))
sys.exit(75)
""", timeout=120)
  assert proc.returncode == 75, proc.stderr[-2000:]
