"""Which examples each rank reads in an epoch: one shared shuffle, partitioned.

Goyal et al. (2017, sec. 2.3) use one random shuffle of the training set per
epoch, partitioned across the workers; a per-worker shuffle of fixed shards
changes what a mini-batch is. Every rank computes the same permutation of the
data set's files from (seed, epoch), lays the files end to end, and takes its
own contiguous run of `quota` examples from that line: files are dealt to ranks
before they are opened (a rank reads only its own), no example is read twice
within an epoch, and the few left over (fewer than one global batch) change
from epoch to epoch. A file split between two ranks is read from an offset.
Pure numpy: the plan is a table test away from being checked.

Elastic training (--elastic) splits an epoch into generations, one per world:
when ranks leave or join mid-epoch, the examples the epoch has not yet trained
on are dealt again to the new ranks (partition), so no example is seen twice in
the epoch and none is skipped but fewer than one global batch. A change of the step batch
within one world (--batch_policy=adaptive) is a generation too, but not dealt again: its ranks
read on in their shares (`continued`, dealings), so the change costs no replay of the order.
"""
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Generation:
  """A stretch of an epoch trained by one world: `size` ranks of `step_batch` examples a step
  for `steps` steps, each rank reading `readers` files at a time (0: as the input reading now
  does), the width its reading order is replayed with (an epoch's history is a tuple of these)."""
  size: int
  step_batch: int
  steps: int
  readers: int = 0
  # The next generation read on from where this one's ranks stopped, in their shares and order
  # (the step batch changed, the world did not: training/course.Course.resized), if its world
  # is the same size and reads as wide; otherwise the epoch's rest was dealt again.
  continued: bool = False


def dealings(history: tuple[Generation, ...], readers: int) -> list[tuple[int, tuple[Generation, ...]]]:
  """history cut into dealings: (the index of its first generation, its generations), each dealt
  once (partition, at its first generation's step batch) and read through by the rest of its
  generations; readers: the width of a generation that says 0 (as the input reads now)."""
  out = []
  for i, g in enumerate(history):
    last = history[i - 1] if i else None
    if last is not None and reads_on(last, g.size, g.readers or readers, readers):
      out[-1] = (out[-1][0], out[-1][1] + (g,))
    else:
      out.append((i, (g,)))
  return out


def reads_on(last: Generation, size: int, width: int, readers: int) -> bool:
  """Whether a generation of `size` ranks reading `width` files at a time reads on from `last`."""
  return last.continued and last.size == size and (last.readers or readers) == width


def partition(remaining: np.ndarray, size: int, step_batch: int) -> tuple[int, list[np.ndarray]]:
  """(steps, [positions of rank r]): `size` ranks of `step_batch` examples a step share the
  epoch's `remaining` line positions (sorted) in contiguous runs of steps * step_batch, in line
  order; the last len(remaining) % (size * step_batch) wait for the next epoch, as at an epoch's
  end. The whole epoch (remaining = all positions) is dealt as the non-elastic plan deals it."""
  steps = len(remaining) // (size * step_batch)
  share = steps * step_batch
  return steps, [np.asarray(remaining[r * share:(r + 1) * share]) for r in range(size)]


def epoch_order(num_files: int, seed: int, epoch: int) -> np.ndarray:
  """The permutation of file indices for (seed, epoch); identical on every rank."""
  return np.random.default_rng([seed, epoch, 0x5EED]).permutation(num_files)


def segments(counts, order, start: int, length: int) -> list[tuple[int, int, int]]:
  """(file, first record, records) runs covering positions [start, start+length)
  of the line made by the files in `order`, each file holding counts[file] records."""
  counts = np.asarray(counts, np.int64)[np.asarray(order, np.int64)]
  ends = np.cumsum(counts)
  if start < 0 or start + length > (ends[-1] if len(ends) else 0):
    raise ValueError(f"positions [{start}, {start + length}) exceed the {int(ends[-1]) if len(ends) else 0} records")
  runs = []
  position, stop = start, start + length
  i = int(np.searchsorted(ends, position, side="right"))
  while position < stop:
    file_start = int(ends[i] - counts[i])
    take = min(int(ends[i]), stop) - position
    if take:
      runs.append((int(order[i]), position - file_start, take))
    position += take
    i += 1
  return runs


def rank_share(total: int, size: int, rank: int) -> tuple[int, int]:
  """(start, length) of rank's contiguous share when `total` examples are split
  as evenly as possible over `size` ranks (evaluation: every example once)."""
  base, extra = divmod(total, size)
  return rank * base + min(rank, extra), base + (rank < extra)
