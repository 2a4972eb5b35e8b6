"""How a run meets its ranks: one world for the whole run (Fixed), or worlds that change as
hosts are lost and come back (Elastic, --elastic: Horovod elastic on Gloo, training/elastic.py).

train.py chooses once (`of`) and asks the mode wherever the two differ; nothing else tests
--elastic. A fixed run is the one-world case of one path (`run`): each world's stretch is set up,
given a Course and trained the same way; the modes differ in how often it runs, how a world is
entered and whether it commits. Where they differ, and why:

                     Fixed                           Elastic
  launcher           any                             horovodrun --gloo --min-np M --host-discovery-script S
  collectives        one gather of the path checks   none: a rank that joins later would meet none
  before the loop    and of what each rank reads,    there and hang (horovod#2652); the state's sync
                     input barrier, broadcast of     and the agreement on the data open each world
                     the state and the position
  stall watchdog     on, the ranks' heartbeats       on, each rank on its own progress (a world
                     name the one that stalled       change renumbers the ranks); no limit while
                                                     the world re-forms (Horovod bounds it)
  input              one writer per node             every rank writes what is missing; one reader width
  resuming           the checkpoint's position (where in the data: epoch, images, generations; the
                     evaluation completed at it), broadcast with the weights / sent by the state's sync
  another world      at a resume: the epoch's rest   at every world change, the same way
                     dealt again to the new world
  the one path       once, never committed           once per world, from the last commit (committed
                                                     every --elastic_commit_every steps); rank 0
                                                     checkpoints the commit before a world re-forms
"""
import dataclasses
import os
import statistics

import comm
from comm import sync
from flags.config import ConfigError
from input import pipeline
from progress import logger
from input.sharding import Generation
from training import course as course_lib, elastic
from training.state import Position, RunState
from training.persist import checkpoints


@dataclasses.dataclass(frozen=True)
class WorldRun:
  """What train.py's run_world returns: the world and config it trained in, the loop's Ending and
  the exchange's plan."""
  world: object
  config: object
  ending: object
  plan: list


class Fixed:
  """One world from start to end, whatever launched it."""
  elastic_input = False  # pipeline.build's reader layout

  def __init__(self, hvd, world):
    self.hvd, self.world = hvd, world
    self.log = logger(lambda: self.world.is_chief)  # lines on rank 0 of the world of the moment

  def launcher_problem(self) -> str | None:
    return None

  watch_peers = True  # the watchdog's heartbeats name the rank that stalled

  def first_error(self, problem: str | None, scanned=None) -> str | None:
    """Every rank's verdict gathered (paths can differ between hosts), and what each will read
    (scanned: its input.sources.Scanned): all stop together, also when their data differ."""
    return sync.first_error(self.hvd, problem, scanned)

  def prepare_input(self, data_config, stop_code: int = 0) -> int:
    """The data written once (digits, Fashion-MNIST), then every rank waits for its node's writer
    in one allreduce that also agrees the ranks' stop requests: the agreed code (0: go on). A notice
    during start-up's data checks (ImageNet's files scanned, a data set written) stops the run here,
    with nothing to lose, instead of after the first step's tracing (minutes for ResNet-50)."""
    pipeline.prepare(data_config, self.world)
    return sync.agreed_stop(self.hvd, stop_code, "input_ready")

  def restored(self, newest: str, step: int, position, config, data) -> Position:
    """Rank 0 after restoring checkpoint `newest` at `step`, whose position is `position` (None: a
    checkpoint written before positions were kept, read as a run of this world wrote it): the position,
    and the line that says where the run resumes and, when the world or the batch changed, what that does."""
    if position is None:
      position = Position.legacy(step, data.steps_per_epoch, config.data.global_batch,
                                 Generation(self.world.size, config.data.step_batch, 0, getattr(data, "readers", 0)))
    course = course_lib.Course(RunState.at(self._for_world(position, config, data)), config.run, self.world,
                               config.data, base_batch=config.optim.adascale_base, num_train=data.info.num_train)
    spe = data.steps_per_epoch
    where = (f"resumed from {newest} at step {step}: epoch {course.epochs(spe):.2f}, {position.images:,} images "
             "trained")
    if config.optim.adascale_base:
      where += f" (AdaScale: tau {position.tau:.1f} base-batch steps)"
    if config.data.adaptive and position.global_batch:
      where += f"; --batch_policy=adaptive goes on near its global batch {position.global_batch:,}"
    elif position.global_batch and position.global_batch != config.data.global_batch:
      follows = ("AdaScale's gain follows the new global batch" if config.optim.adascale_base else
                 "the LR follows the new global batch")
      where += (f"; the global batch was {position.global_batch:,} on {position.ranks} ranks and is "
                f"{config.data.global_batch:,} on {self.world.size} now: the schedule goes on from epoch "
                f"{course.epochs(spe):.2f} (step {round(course.nominal_step(spe))} of {course.last_step(spe)}"
                f"{' base-batch steps' if config.optim.adascale_base else ' at this batch'}) and {follows}")
      if course.into_epoch(spe):
        where += "; the epoch's untrained examples are dealt to this world"
    self.log("%s", where)
    return position

  def _for_world(self, position, config, data):
    """The position this world trains from: a checkpoint of another world's batch, or of another
    reading width, mid-epoch, leaves its generation to the epoch's history (what it read is
    replayed, the rest dealt to this world); otherwise the step within the epoch says where."""
    last = position.current
    now = (self.world.size, config.data.step_batch, getattr(data, "readers", 0))
    if last and (last.size, last.step_batch, last.readers) != now:
      return position.world_changed()
    return position

  def start(self, state: RunState) -> None:
    """Every rank starts from rank 0's restored (or initial) state."""
    state.share()

  def run(self, run_world, config, data, state: RunState, *, saver, rebuild, watchdog, ledger,
          before_commit=None) -> WorldRun:
    """run_world(world, config, data, course) in each world of the run, from `state`: one path for
    both modes (_Worlds.one), which a fixed run takes once and --elastic once per world (_loop); the
    modes differ in world_for, commit_every and world_ended.
    rebuild(world, position, later) -> (config, data) of a new world (the global batch may change;
    AdaScale's base batch is the position's, pinned at the run's first world; later: not the first);
    watchdog: told when a world begins (first-time work again) and when one re-forms (no limit);
    ledger: the time ledger, which charges a world's set-up and a world change's parts
    (training/ledger.py); before_commit(): every rank, before each commit (PowerSGD's residuals
    averaged, so a new world starts from their mean, not rank 0's)."""
    worlds = _Worlds(self, state, run_world, config, data, saver, rebuild, watchdog, ledger, before_commit)
    return self._loop(worlds, state)

  def _loop(self, worlds, state: RunState) -> WorldRun:
    """How often the one path runs: a fixed run's one world, once."""
    return worlds.one(state)

  def world_for(self, worlds, state: RunState):
    """(world, config, data) the next stretch trains in, the state's position made that world's."""
    state.position = self._for_world(state.position, worlds.config, worlds.data)
    return self.world, worlds.config, worlds.data

  def commit_every(self, config) -> int:
    return 0  # one world: nothing to roll back to

  def world_ended(self, state: RunState, course) -> None:
    """A world's stretch ended (returned or raised)."""

  def summary_keys(self) -> dict:
    return {}


class Elastic(Fixed):
  """Worlds that change (training/elastic.py): the loop runs once per world from the last commit."""
  elastic_input = True
  scanned = None  # this rank's input.sources.Scanned, kept by first_error for each world's agreement
  built: dict  # (world, base batch) -> (config, input) of the world of the moment (_loop, world_for)

  def __init__(self, hvd, world, ranks_per_node: int):
    super().__init__(hvd, world)
    self.ranks_per_node = ranks_per_node
    self.record = {"worlds": [], "commits": 0, "steps_lost": [], "commit_seconds": []}

  def launcher_problem(self) -> str | None:
    if os.environ.get("HOROVOD_ELASTIC") != "1":
      return ("--elastic needs Horovod's elastic launcher: horovodrun --gloo -np N --min-np M "
              "--host-discovery-script S --blacklist-cooldown-range 10 20 python train.py --elastic "
              "(see docs/faults.md), or drop --elastic.")
    return None

  watch_peers = False  # the heartbeats are named by ranks, which a world change renumbers

  def first_error(self, problem: str | None, scanned=None) -> str | None:
    """This rank's own verdict: no collective before the elastic loop. scanned is kept for the
    agreement on the data that each world makes instead (sync.agree_on_data(hvd, self.scanned))."""
    self.scanned = scanned
    return problem

  def prepare_input(self, data_config, stop_code: int = 0) -> int:
    """Every rank writes what it lacks; its own stop request (no collective before the elastic loop:
    the first step agrees it with the others)."""
    pipeline.prepare(data_config, self.world, every_rank=True)
    return 0

  def restored(self, newest: str, step: int, position, config, data) -> Position:
    """Rank 0 after restoring: the position; a checkpoint of a run without positions starts its epoch again."""
    if position is None:
      position = Position.legacy(step, data.steps_per_epoch)
      if step % data.steps_per_epoch:
        self.log("checkpoint %d has no position (written before positions were kept): epoch %d starts again "
                 "in this world", step, position.epoch)
    self.log("resumed from %s at step %d: epoch %d, %s images trained", newest, step, position.epoch,
             f"{position.images:,}")
    return position

  def start(self, state: RunState) -> None:
    """The state's sync shares it at the start of every world."""

  def _loop(self, worlds, state: RunState) -> WorldRun:
    """The one path once per world until the run ends, from the state's last commit (its variables:
    the fp16 loss scale too, a rank that joins must scale as the others do)."""
    self.built = {(self.world, state.position.base_batch): (worlds.config, worlds.data)}  # a world's, built once
    state.save()  # the first commit: what a world lost before any other (or in the first sync) rolls back to
    return elastic.run(self.hvd, worlds.one, before_reset=worlds.keep_commit)(state)

  def world_for(self, worlds, state: RunState):
    now = comm.world(self.hvd, self.ranks_per_node)
    key = (now, state.position.base_batch)  # a joining rank builds with rank 0's pinned base batch
    if key not in self.built:
      self.built.clear()
      try:
        self.built[key] = worlds.rebuild(now, state.position, worlds.later)
      except ConfigError as e:  # --global_batch_size that no longer divides: the run ends here
        raise ConfigError(f"the world changed to {now.size} ranks: {e}") from None
    config, data = self.built[key]
    problem = sync.agree_on_data(self.hvd, self.scanned)  # a collective every rank of this world makes
    if problem:
      raise ConfigError(problem)
    self.world = now  # rank 0 of this world logs and writes
    self._joined(state, now, config)
    return now, config, data

  def commit_every(self, config) -> int:
    return config.faults.elastic_commit_every

  def world_ended(self, state: RunState, course) -> None:
    self.record.update(commits=state.commits, steps_lost=list(state.steps_lost))
    self.record["commit_seconds"] += course.commit_seconds

  def keep_commit(self, state: RunState, saver, watchdog, ledger) -> None:
    """Before the world re-forms: rank 0 (of the old world) checkpoints the committed state, so
    a job whose world never re-forms (fewer than --min-np ranks) resumes from it, and says so."""
    watchdog.mark("world")
    ledger.enter("world_change.checkpoint")
    try:
      if not (self.world.is_chief and saver.manager):
        return
      step = state.position.step
      try:
        if not saver.save(step, position=state.position, agree=False):
          raise checkpoints.NonFiniteWeights(f"weights at step {step} hold inf or NaN")
        saver.wait()  # written before the world re-forms (a world that never does resumes from it)
      except checkpoints.CheckpointError as e:
        self.log("the world is changing; the commit at step %d could not be checkpointed: %s", step, e)
        return
      self.log("the world is changing (a rank lost or a host added); checkpoint %s holds the commit at step %d; "
               "waiting for Horovod to form the new world (horovodrun waits --elastic-timeout for --min-np "
               "ranks)", saver.newest, step)
    finally:
      ledger.enter("world_change.reinit")  # Horovod's shutdown and init, and the state's sync, follow

  def _joined(self, state, now, config) -> None:
    """The state's position for a new world, and the line that says where it starts."""
    self.record["worlds"].append(now.size)
    state.position = state.position.world_changed()
    p = state.position
    lost = ""
    if len(state.steps_lost) > len(self.record["steps_lost"]):  # a rank was lost: rolled back
      lost = f"; rolled back {state.steps_lost[-1]} steps to the last commit"
    self.log("world: %d ranks on %d hosts at step %d (epoch %d, %d of its examples trained%s); batch %d per rank, "
             "global %d", now.size, now.cross_size, p.step, p.epoch,
             sum(g.size * g.step_batch * g.steps for g in p.history), lost, config.data.batch_size,
             config.data.global_batch)

  def summary_keys(self) -> dict:
    """How the worlds went (make faults' elastic rows read these)."""
    r = self.record
    return {"elastic": {"worlds": r["worlds"], "commits": r["commits"], "steps_lost": r["steps_lost"],
                        "commit_seconds_median": statistics.median(r["commit_seconds"] or [0.0])}}


class _Worlds:
  """The worlds of one run: what each needs, and the one path each takes (`one`)."""

  def __init__(self, mode, state, run_world, config, data, saver, rebuild, watchdog, ledger, before_commit):
    self.mode, self.state, self.run_world, self.config, self.data = mode, state, run_world, config, data
    self.saver, self.rebuild, self.watchdog, self.ledger = saver, rebuild, watchdog, ledger
    self.before_commit = before_commit
    self.later = False  # a world before this one

  def one(self, state: RunState) -> WorldRun:
    """One world's stretch: its set-up (the ledger's startup.world, or world_change.setup after a
    change), its course, run_world, and the mode told that it ended."""
    self.ledger.enter("world_change.setup" if self.later else "startup.world")
    self.watchdog.new_world()
    world, config, data = self.mode.world_for(self, state)
    self.later = True
    course = course_lib.Course(state, config.run, world, config.data, getattr(data, "readers", 0),
                               config.optim.adascale_base, data.info.num_train,
                               commit_every=self.mode.commit_every(config), before_commit=self.before_commit)
    try:
      return self.run_world(world, config, data, course)
    finally:
      self.mode.world_ended(state, course)

  def keep_commit(self) -> None:
    self.mode.keep_commit(self.state, self.saver, self.watchdog, self.ledger)


def of(config, hvd, world) -> Fixed:
  """The mode of this run: the one place --elastic is read."""
  if config.faults.elastic:
    return Elastic(hvd, world, config.comm.ranks_per_node)
  return Fixed(hvd, world)
