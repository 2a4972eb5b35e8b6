"""The next epoch prepared while this one trains: its pipeline built and its first batch read in a
background thread, so an epoch's end does not wait for a new dataset and its shuffle buffer's fill.

`make train` spent 0.3-1 s an epoch there (docs/time.md: epoch_input) against ~1.1 s of steps;
ImageNet's 10,000-record shuffle buffer takes longer to fill. The prepared epoch is the one a fresh
build gives (the same (seed, epoch) gives the same batches: input/pipeline.py), used only when the
loop asks for that epoch from its first step without an elastic plan; anything else (a resume
mid-epoch, a world change, another K: a new Input) builds afresh and what was prepared is dropped.
Its cost: a second pipeline alive at once (two shuffle buffers for a while) and its build's CPU
during the epoch's steps; --prepare_next_epoch=false turns it off.
"""
import concurrent.futures
import itertools


class NextEpoch:
  """An input/pipeline.Input (`inner`, and the same interface) whose epoch e + 1 is prepared in the
  background when epoch e is asked for."""

  def __init__(self, inner):
    self.inner = inner
    self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="next-epoch")
    self._ahead: tuple[int, concurrent.futures.Future] | None = None  # (epoch, its first batch and the rest)

  def train_epoch(self, epoch, first_step=0, count=None, plan=None):
    """The inner Input's batches of the epoch, taken from what was prepared where it is that epoch
    from its start (the first `count` of the whole epoch: the same prefix a fresh build takes)."""
    ready = self._take(epoch) if first_step == 0 and plan is None else None
    if plan is None:
      self._prepare(epoch + 1)
    if ready is None:
      return self.inner.train_epoch(epoch, first_step=first_step, count=count, plan=plan)
    return itertools.islice(ready, count) if count is not None else ready

  def __getattr__(self, name):  # the rest is the inner Input's: info, steps_per_epoch, readers, eval, ...
    return getattr(self.inner, name)

  def _prepare(self, epoch: int) -> None:
    if self._ahead is None or self._ahead[0] != epoch:
      self._ahead = (epoch, self._pool.submit(_first_batch, self.inner, epoch))

  def _take(self, epoch: int):
    """The prepared epoch's batches (its first already read; an error reading it raised here, as a
    fresh build would raise it at its first batch), or None when another epoch was prepared."""
    ahead, self._ahead = self._ahead, None
    if ahead is None or ahead[0] != epoch:
      return None
    first, rest = ahead[1].result()
    return rest if first is None else itertools.chain([first], rest)


def _first_batch(inner, epoch: int):
  """(the epoch's first batch or None when it has none, an iterator over the rest)."""
  batches = iter(inner.train_epoch(epoch))
  return next(batches, None), batches
