"""The time ledger: where a run's wall time went, in parts that add up to it.

One clock and one part at a time: `enter(part)` charges the seconds since the last change to the
part the run was in, so the parts sum to the wall time by construction, and time that no code names
falls in UNACCOUNTED (what summary.json's `time.unaccounted` reports). After Google's
ml-goodput-measurement, which splits a job's time into goodput (the steps) and badput (start-up,
data loading, checkpointing, disruptions) so that a user sees where it went.

A part is `group.detail` or a bare group. The groups, in summary.json's order:

  startup        imports, Horovod's init and the config, the data checks (and a data set written
                 once), the model and optimizer, the restore and the broadcast of the state, a world's
                 begin (exchange, probes), and the run's first step, which traces the step function
  steps          compute (a traced step: forward, backward, exchange, update, as one call), and the
                 input wait between steps inside an epoch (the next batch not ready)
  epoch_input    an epoch's iterator ending, the next one built and its first batch (shuffle fill)
  evaluation     the held-out evaluation, its batches and the allreduce of its sums
  statistics     BatchNorm's statistics averaged over ranks before an evaluation, save or commit
  checkpoint     a save (rank 0 writes; the others wait for its verdict)
  commit         --elastic's commit (a copy of the state to host memory)
  resize         --batch_policy=adaptive's change of K: the input at the new batch, its first trace
  world_change   --elastic: a world re-forming (rank 0's checkpoint of the commit, Horovod's shutdown
                 and init, the state's sync, the new world's config, input and probes, its first step)
  export         rank 0's SavedModel
  finish         the check that every rank holds the same weights, the ledgers gathered
  unaccounted    what no part names

Under --elastic each world change's own world_change parts are kept apart too (Ledger.changes: a loss
and a return are two), as summary.json's time.world_changes.

The exchange's share of a step is not split out: the step is one traced call in which the exchange
overlaps the backward pass, so only a profile (or bench/bench_comm.py's timing of it alone) tells.
"""
import time

UNACCOUNTED = "unaccounted"
GROUPS = ("startup", "steps", "epoch_input", "evaluation", "statistics", "checkpoint", "commit", "resize",
          "world_change", "export", "finish", UNACCOUNTED)
STEPS = "steps"  # the productive group: productive share = its seconds / the wall's
WORLD_CHANGE = "world_change"


def group(part: str) -> str:
  """The group a part belongs to: 'startup.imports' -> 'startup' (pure)."""
  return part.split(".", 1)[0]


class Ledger:
  """Seconds per part since `start` (a clock() reading; the process's start in train.py).

  clock: seconds, the same clock `start` was read on (train.py: time.time, as its wall_seconds).
  Images are counted with the steps that trained them: `images` in every step, `step_images` in
  the steps charged to the steps group (a first step's tracing is start-up), for the step rate.
  """

  def __init__(self, start: float | None = None, clock=time.time, part: str = UNACCOUNTED):
    self.clock = clock
    self.start = clock() if start is None else start
    self.part, self.since = part, self.start
    self.seconds: dict[str, float] = {}
    self.images = self.step_images = 0
    self._epoch_mark: dict[str, float] = {}
    # --elastic: each world change's own world_change parts ({detail: seconds}, in order): a change
    # starts at the first world_change part after a step, so the parts of a loss and of a return apart.
    self.changes: list[dict[str, float]] = []
    self._stepped_since_change = True

  def enter(self, part: str) -> str:
    """The run is in `part` from now; the seconds since the last change go to the part it was in.
    Returns that part (for `during`)."""
    now = self.clock()
    spent = now - self.since
    self.seconds[self.part] = self.seconds.get(self.part, 0.0) + spent
    if group(self.part) == WORLD_CHANGE and self.changes:
      detail = self.part.split(".", 1)[-1]
      self.changes[-1][detail] = self.changes[-1].get(detail, 0.0) + spent
    if group(part) == WORLD_CHANGE:
      if self._stepped_since_change:
        self.changes.append({})
      self._stepped_since_change = False
    elif group(part) == STEPS:
      self._stepped_since_change = True
    previous, self.part, self.since = self.part, part, now
    return previous

  def during(self, part: str, fn, *args, **kwargs):
    """fn(*args, **kwargs) charged to `part`, then the run is back in the part it was in."""
    previous = self.enter(part)
    try:
      return fn(*args, **kwargs)
    finally:
      self.enter(previous)

  def timed(self, part: str, fn):
    """fn wrapped so that every call is charged to `part` (a callable passed to the loop)."""
    return lambda *args, **kwargs: self.during(part, fn, *args, **kwargs)

  def stepped(self, images: int, timed: bool) -> None:
    """A step trained `images` (global); timed: charged to the steps group (not a first trace)."""
    self.images += images
    if timed:
      self.step_images += images

  def now(self) -> dict[str, float]:
    """Seconds per part up to now, the current part's running seconds included (nothing changes)."""
    out = dict(self.seconds)
    out[self.part] = out.get(self.part, 0.0) + (self.clock() - self.since)
    return out

  def wall(self) -> float:
    return self.clock() - self.start

  def since_epoch_mark(self) -> dict[str, float]:
    """Seconds per group since the last call (TensorBoard's per-epoch parts); the first call counts
    from the start."""
    groups = by_group(self.now())
    delta = {g: s - self._epoch_mark.get(g, 0.0) for g, s in groups.items()}
    self._epoch_mark = groups
    return delta


def by_group(parts: dict[str, float]) -> dict[str, float]:
  """{group: seconds} of {part: seconds}, in GROUPS' order, groups with no time left out (pure)."""
  out: dict[str, float] = {}
  for part, seconds in parts.items():
    out[group(part)] = out.get(group(part), 0.0) + seconds
  return {g: out[g] for g in sorted(out, key=lambda g: GROUPS.index(g) if g in GROUPS else len(GROUPS))}


def block(parts: dict[str, float], wall: float, images: int, step_images: int, ranks: list[dict] = (),
          resumed_step: int = 0, changes: list[dict] = ()) -> dict:
  """summary.json's `time` block (pure): rank 0's parts and groups, the productive share, the step
  rate and the wall rate, and where another rank's part is larger (`slowest`).

  parts: rank 0's {part: seconds}; wall: its wall seconds (the parts sum to it); images: trained in
  this process, step_images: in the steps group; ranks: every rank's {part: seconds}, in rank order
  (empty: one rank); resumed_step: the step this process started from (its own clock, said so);
  changes: --elastic's world changes, each {detail: seconds} (Ledger.changes), as `world_changes`.
  """
  groups = by_group(parts)
  steps = groups.get(STEPS, 0.0)
  out = {
      "clock": ("this process, from its start; it resumed at step %d, and earlier processes' time is not "
                "in it" % resumed_step) if resumed_step else "this process, from its start",
      "wall_seconds": round(wall, 2),
      "productive_share": round(steps / wall, 3) if wall > 0 else None,
      "images_per_step_second": round(step_images / steps, 1) if steps > 0 and step_images else None,
      "images_per_wall_second": round(images / wall, 1) if wall > 0 else None,
      "groups": {g: round(s, 2) for g, s in groups.items()},
      "parts": {p: round(s, 3) for p, s in sorted(parts.items(), key=lambda kv: _order(kv[0]))},
  }
  if changes:  # each change's total first, then its parts in the order they came
    out["world_changes"] = [{"seconds": round(sum(c.values()), 2), **{d: round(v, 3) for d, v in c.items()}}
                            for c in changes]
  slowest = slowest_parts(ranks)
  if slowest:
    out["slowest"] = slowest
  return out


def slowest_parts(ranks: list[dict], floor_seconds: float = 0.1, ratio: float = 1.05) -> dict:
  """{group: {"rank": r, "seconds": s}} where some rank's group took over `ratio` times rank 0's and
  at least `floor_seconds` more (pure): where the ranks' views differ (rank 0 writes a checkpoint
  while the others wait for it in the next collective)."""
  if len(ranks) < 2:
    return {}
  per_rank = [by_group(r) for r in ranks]
  out = {}
  for g in GROUPS:
    mine = per_rank[0].get(g, 0.0)
    rank, most = max(enumerate(r.get(g, 0.0) for r in per_rank), key=lambda rs: rs[1])
    if rank and most > mine * ratio and most - mine >= floor_seconds:
      out[g] = {"rank": rank, "seconds": round(most, 2), "rank0_seconds": round(mine, 2)}
  return out


def line(time_block: dict) -> str:
  """The end-of-run line: the productive share and the three largest other groups (pure)."""
  groups = dict(time_block["groups"])
  steps = groups.pop(STEPS, 0.0)
  others = sorted(groups.items(), key=lambda gs: -gs[1])[:3]
  rest = ", ".join(f"{NAMES.get(g, g)} {s:.1f} s" for g, s in others)
  share = time_block["productive_share"]
  return (f"time: {time_block['wall_seconds']:.1f} s wall, {steps:.1f} s in steps (productive share "
          f"{share if share is not None else 0:.2f}); most of the rest: {rest or 'nothing'} "
          "(summary.json's time block has every part)")


NAMES = {"startup": "start-up", "epoch_input": "epoch input", "statistics": "BatchNorm statistics",
         "world_change": "world changes"}  # the end-of-run line's words for the groups


def _order(part: str) -> tuple:
  g = group(part)
  return (GROUPS.index(g) if g in GROUPS else len(GROUPS), part)
