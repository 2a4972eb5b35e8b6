"""Elastic training's plan of an epoch (input/sharding.partition, Input.elastic_plan): when the
world changes mid-epoch, the new ranks train on what the epoch has left, every example once."""
import numpy as np
import pytest

from comm.topology import World
from input import pipeline, sharding
from input.sharding import Generation
from tests.input.test_digits import data_config

EPOCH = 1


@pytest.mark.parametrize("remaining, size, step_batch, steps, shares", [
    (range(10), 2, 2, 2, [[0, 1, 2, 3], [4, 5, 6, 7]]),           # 8, 9 wait for the next epoch
    ([1, 4, 5, 7, 8, 9], 3, 2, 1, [[1, 4], [5, 7], [8, 9]]),
    ([1, 4, 5, 7, 8], 2, 2, 1, [[1, 4], [5, 7]]),
    ([3], 2, 1, 0, [[], []]),                                      # less than a global batch left
])
def test_partition(remaining, size, step_batch, steps, shares):
  got_steps, got = sharding.partition(np.asarray(remaining), size, step_batch)
  assert (got_steps, [s.tolist() for s in got]) == (steps, shares)


def inputs(digits_dir, size, batch_size):
  return [pipeline.build(data_config(digits_dir, batch_size=batch_size, ranks=size), World(size=size, rank=r),
                         seed=2, elastic=True) for r in range(size)]


def images(batches) -> list[bytes]:
  """The examples of batches as a sorted multiset."""
  return sorted(im.tobytes() for ims, _ in batches for im in ims.numpy())


def at(digits_dir, positions) -> list[bytes]:
  """The examples at these line positions of the epoch (one rank reading them one at a time)."""
  reader = inputs(digits_dir, 1, 1)[0]
  return images(reader.train_epoch(EPOCH, plan=pipeline.ElasticPlan(0, len(positions), np.sort(positions))))


def test_a_whole_epoch_is_dealt_as_without_elastic(digits_dir):
  for data in inputs(digits_dir, 2, 16):
    plain = [x.numpy() for batch in data.train_epoch(EPOCH) for x in batch]
    plan = data.elastic_plan(EPOCH, ())
    assert plan.steps == data.steps_per_epoch
    dealt = [x.numpy() for batch in data.train_epoch(EPOCH, plan=plan) for x in batch]
    assert len(plain) == len(dealt) and all(np.array_equal(a, b) for a, b in zip(plain, dealt))


def test_a_world_that_shrinks_mid_epoch_trains_on_the_rest_once(digits_dir):
  old = inputs(digits_dir, 3, 16)  # 3 ranks train 5 steps of the epoch, then one leaves
  history = (Generation(size=3, step_batch=16, steps=5),)
  trained = [images(d.train_epoch(EPOCH, count=5)) for d in old]
  new = inputs(digits_dir, 2, 16)
  plans = [d.elastic_plan(EPOCH, history) for d in new]
  total = new[0].source.train.total
  assert {p.generation for p in plans} == {1} and len({p.steps for p in plans}) == 1
  assert plans[0].steps == (total - 3 * 5 * 16) // 32
  left = new[0]._remaining(EPOCH, history)
  read = np.setdiff1d(np.arange(total), left)
  assert len(read) == 3 * 5 * 16
  # What the three ranks trained on is what the plan says they did (their reading order replayed).
  assert sorted(sum(trained, [])) == at(digits_dir, read)
  dealt = np.concatenate([p.positions for p in plans])
  assert len(np.unique(dealt)) == len(dealt) and not np.intersect1d(dealt, read).size
  rest = np.setdiff1d(left, dealt)
  assert len(rest) < 2 * 16  # fewer than a global batch waits for the next epoch
  # Every example of the epoch once: the old world's, the new world's and the few left.
  again = [images(d.train_epoch(EPOCH, plan=p)) for d, p in zip(new, plans)]
  assert sorted(sum(trained, []) + sum(again, []) + at(digits_dir, rest)) == at(digits_dir, np.arange(total))


def test_generations_after_generations_never_deal_an_example_twice(digits_dir):
  history = (Generation(3, 16, 5), Generation(2, 16, 7), Generation(4, 8, 3))
  data = inputs(digits_dir, 3, 16)
  total = data[0].source.train.total
  trained = 3 * 5 * 16 + 2 * 7 * 16 + 4 * 3 * 8
  for n in range(len(history) + 1):
    assert len(data[0]._remaining(EPOCH, history[:n])) == total - sum(g.size * g.steps * g.step_batch
                                                                      for g in history[:n])
  plans = [d.elastic_plan(EPOCH, history) for d in data]
  dealt = np.concatenate([p.positions for p in plans])
  assert len(np.unique(dealt)) == len(dealt) == 3 * 16 * plans[0].steps
  assert plans[0].steps == (total - trained) // 48


def test_a_change_of_accumulation_steps_mid_epoch_trains_the_rest_once(digits_dir):
  # --batch_policy=adaptive in a fixed world of 2 ranks: 4 steps at K=1, then K=3 (training/
  # course.Course.resized puts the first stretch in the epoch's history): the rest of the epoch at
  # the new step batch, every example once.
  config = data_config(digits_dir, batch_size=16, ranks=2)
  worlds = [World(size=2, rank=r) for r in range(2)]
  old = [pipeline.build(config, w, seed=2) for w in worlds]
  trained = [images(d.train_epoch(EPOCH, count=4)) for d in old]
  new = [pipeline.build(config.with_accumulation(3, 2), w, seed=2) for w in worlds]
  history = (Generation(size=2, step_batch=16, steps=4, readers=getattr(old[0], "readers", 0)),)
  plans = [d.elastic_plan(EPOCH, history) for d in new]
  total = new[0].source.train.total
  assert plans[0].steps == (total - 2 * 4 * 16) // (2 * 48) == new[0].steps_per_epoch - 1
  again = [images(d.train_epoch(EPOCH, plan=p)) for d, p in zip(new, plans)]
  assert all(len(a) == plans[0].steps * 48 for a in again)
  rest = np.setdiff1d(new[0]._remaining(EPOCH, history), np.concatenate([p.positions for p in plans]))
  assert sorted(sum(trained, []) + sum(again, []) + at(digits_dir, rest)) == at(digits_dir, np.arange(total))


def in_order(batches) -> list[bytes]:
  return [im.tobytes() for ims, _ in batches for im in ims.numpy()]


def test_a_change_of_accumulation_steps_reads_on_in_the_same_shares(digits_dir):
  # What Course.resized records (continued): the same world, K 1 -> 3 after 4 steps. Each rank
  # reads on where it stopped, in its own share and order, nothing dealt again or replayed: its
  # examples are the ones it would have read at K=1, and then a world change deals the rest once.
  config = data_config(digits_dir, batch_size=16, ranks=2)
  worlds = [World(size=2, rank=r) for r in range(2)]
  old = [pipeline.build(config, w, seed=2) for w in worlds]
  plain = [in_order(d.train_epoch(EPOCH)) for d in old]
  trained = [in_order(d.train_epoch(EPOCH, count=4)) for d in old]
  new = [pipeline.build(config.with_accumulation(3, 2), w, seed=2) for w in worlds]
  readers = getattr(old[0], "readers", 0)
  resized = (Generation(size=2, step_batch=16, steps=4, readers=readers, continued=True),)
  plans = [d.elastic_plan(EPOCH, resized) for d in new]
  assert [(p.generation, p.skip) for p in plans] == [(0, 64), (0, 64)]
  assert plans[0].steps == (old[0].steps_per_epoch * 16 - 64) // 48
  again = [in_order(d.train_epoch(EPOCH, plan=p, count=2)) for d, p in zip(new, plans)]
  for rank in range(2):
    assert trained[rank] + again[rank] == plain[rank][:64 + 96]
  # Then the world grows to 3 ranks: the epoch's rest, after both stretches, dealt again once.
  history = (resized[0], Generation(size=2, step_batch=48, steps=2, readers=readers))
  total = new[0].source.train.total
  left = new[0]._remaining(EPOCH, history)
  assert len(left) == total - 2 * (64 + 96)
  assert sorted(sum(trained, []) + sum(again, [])) == at(digits_dir, np.setdiff1d(np.arange(total), left))
  grown = [pipeline.build(data_config(digits_dir, batch_size=16, ranks=3), World(size=3, rank=r), seed=2)
           for r in range(3)]
  plans = [d.elastic_plan(EPOCH, history) for d in grown]
  assert {p.generation for p in plans} == {2} and {p.skip for p in plans} == {0}
  dealt = np.concatenate([p.positions for p in plans])
  assert len(np.unique(dealt)) == len(dealt) and not np.setdiff1d(dealt, left).size


def test_dealings_group_the_generations_a_world_read_on(digits_dir):
  g = lambda size, continued=False, readers=0: Generation(size, 16, 2, readers, continued)
  history = (g(2, True), g(2, True), g(2), g(3, True), g(2), g(2, True, readers=4), g(2))
  assert [(first, len(gens)) for first, gens in sharding.dealings(history, readers=1)] == [
      (0, 3), (3, 1), (4, 1), (5, 1), (6, 1)]  # a size or a reading width changed: dealt again
  assert [(first, len(gens)) for first, gens in sharding.dealings(history, readers=4)] == [
      (0, 3), (3, 1), (4, 1), (5, 2)]
