"""The epoch plan of input/sharding.py: runs of files per rank, shares of the held-out split, on tables."""
import numpy as np
import pytest

from input import sharding


@pytest.mark.parametrize("counts, order, start, length, runs", [
    ([3, 2, 4], [0, 1, 2], 0, 9, [(0, 0, 3), (1, 0, 2), (2, 0, 4)]),
    ([3, 2, 4], [2, 0, 1], 0, 9, [(2, 0, 4), (0, 0, 3), (1, 0, 2)]),
    ([3, 2, 4], [2, 0, 1], 3, 4, [(2, 3, 1), (0, 0, 3)]),          # a file split between ranks
    ([3, 2, 4], [0, 1, 2], 4, 2, [(1, 1, 1), (2, 0, 1)]),
    ([5], [0], 2, 2, [(0, 2, 2)]),                                  # several ranks, one file
    ([1, 0, 1], [1, 0, 2], 0, 2, [(0, 0, 1), (2, 0, 1)]),           # an empty file is passed over
])
def test_segments(counts, order, start, length, runs):
  assert sharding.segments(counts, order, start, length) == runs


def test_segments_of_all_ranks_cover_the_epoch_once():
  counts = np.random.default_rng(0).integers(1, 30, 37)
  for ranks in (1, 2, 3, 8):
    quota = int(counts.sum()) // ranks
    order = sharding.epoch_order(len(counts), seed=5, epoch=2)
    seen = [(f, r) for rank in range(ranks)
            for f, first, n in sharding.segments(counts, order, rank * quota, quota) for r in range(first, first + n)]
    assert len(seen) == len(set(seen)) == ranks * quota


@pytest.mark.parametrize("total, size, shares", [
    (20, 4, [(0, 5), (5, 5), (10, 5), (15, 5)]),
    (10, 4, [(0, 3), (3, 3), (6, 2), (8, 2)]),
    (2, 3, [(0, 1), (1, 1), (2, 0)]),
])
def test_rank_share(total, size, shares):
  assert [sharding.rank_share(total, size, r) for r in range(size)] == shares


def test_epoch_order_is_shared_and_changes_per_epoch():
  np.testing.assert_array_equal(sharding.epoch_order(50, 1, 3), sharding.epoch_order(50, 1, 3))
  assert not np.array_equal(sharding.epoch_order(50, 1, 3), sharding.epoch_order(50, 1, 4))
