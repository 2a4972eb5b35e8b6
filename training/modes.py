"""How a run meets its ranks: one world for the whole run (Fixed), or worlds that change as
hosts are lost and come back (Elastic, --elastic: Horovod elastic on Gloo, training/elastic.py).

train.py chooses once (`of`) and asks the mode wherever the two differ; nothing else tests
--elastic. Where they differ, and why:

                     Fixed                           Elastic
  launcher           any                             horovodrun --gloo --min-np M --host-discovery-script S
  collectives        path check, input barrier,      none: a rank that joins later would meet none
  before the loop    broadcast of the state          there and hang (horovod#2652); the state's sync
  stall watchdog     on                              off: a world change renumbers the ranks
  input              one writer per node             every rank writes what is missing; one reader width
  resuming           the checkpoint's step           and its position-N.json (where in the data)
  the loop           once                            once per world, from the last commit; rank 0
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
from training import checkpoints, course as course_lib, elastic


@dataclasses.dataclass(frozen=True)
class WorldRun:
  """What train.py's run_world returns: the world and config it trained in, the loop's Ending,
  the exchange's plan and the images/s of its steps."""
  world: object
  config: object
  ending: object
  plan: list
  images_per_sec: float | None


class Fixed:
  """One world from start to end, whatever launched it."""
  elastic_input = False  # pipeline.build's reader layout

  def __init__(self, hvd, world):
    self.hvd, self.world = hvd, world
    self.log = logger(lambda: self.world.is_chief)  # lines on rank 0 of the world of the moment

  def launcher_problem(self) -> str | None:
    return None

  def stall_timeout(self, seconds: float) -> float:
    return seconds

  def first_error(self, problem: str | None) -> str | None:
    """Every rank's verdict gathered (paths can differ between hosts): all stop together."""
    return sync.first_error(self.hvd, problem)

  def prepare_input(self, data_config) -> None:
    pipeline.prepare(data_config, self.world)
    sync.barrier(self.hvd, "input_ready")  # wait for the node's writer before anyone reads

  def restored(self, model_dir: str, step: int, steps_per_epoch: int) -> None:
    """The step alone says where a fixed run is."""

  def start(self, variables) -> None:
    # Horovod: identical initial weights, BN statistics, optimizer slots and step everywhere.
    sync.broadcast_state(self.hvd, variables)

  def run(self, run_world, config, data, step: int, *, variables, saver, rebuild) -> WorldRun:
    return run_world(self.world, config, data, course_lib.Steps(step, config.run))

  def summary_keys(self) -> dict:
    return {}


class Elastic(Fixed):
  """Worlds that change (training/elastic.py): the loop runs once per world from the last commit."""
  elastic_input = True

  def __init__(self, hvd, world, ranks_per_node: int):
    super().__init__(hvd, world)
    self.ranks_per_node = ranks_per_node
    self.position = elastic.Position()  # rank 0's, once restored; the state's sync sends it
    self.record = {"worlds": [], "commits": 0, "steps_lost": [], "commit_seconds": []}

  def launcher_problem(self) -> str | None:
    if os.environ.get("HOROVOD_ELASTIC") != "1":
      return ("--elastic needs Horovod's elastic launcher: horovodrun --gloo -np N --min-np M "
              "--host-discovery-script S --blacklist-cooldown-range 10 20 python train.py --elastic "
              "(see docs/faults.md), or drop --elastic.")
    return None

  def stall_timeout(self, seconds: float) -> float:
    return 0  # the heartbeats are named by ranks, which a world change renumbers

  def first_error(self, problem: str | None) -> str | None:
    return problem  # each rank judges its own paths: no collective before the elastic loop

  def prepare_input(self, data_config) -> None:
    pipeline.prepare(data_config, self.world, every_rank=True)

  def restored(self, model_dir: str, step: int, steps_per_epoch: int) -> None:
    self.position = elastic.read_position(model_dir, step, steps_per_epoch, self.log)

  def start(self, variables) -> None:
    """The state's sync broadcasts them at the start of every world."""

  def run(self, run_world, config, data, step: int, *, variables, saver, rebuild) -> WorldRun:
    """run_world once per world until the run ends. variables: what a commit keeps (weights,
    slots, step, the fp16 loss scale: a rank that joins must scale as the others do);
    rebuild(world) -> (config, data) of a new world (the global batch may change)."""
    built = {self.world: (config, data)}  # the world's config and input, built once
    state = elastic.TrainingState(self.hvd, variables, self.position)

    def one_world(state):
      now = comm.world(self.hvd, self.ranks_per_node)
      if now not in built:
        built.clear()
        try:
          built[now] = rebuild(now)
        except ConfigError as e:  # --global_batch_size that no longer divides: the run ends here
          raise ConfigError(f"the world changed to {now.size} ranks: {e}") from None
      config_now, data_now = built[now]
      self.world = now  # rank 0 of this world logs and writes
      self._joined(state, now, config_now)
      course = course_lib.Elastic(state, config_now.faults.elastic_commit_every, config_now.run,
                                  data_now.info.num_train, now, config_now.data)
      try:
        return run_world(now, config_now, data_now, course)
      finally:
        self.record.update(commits=state.commits, steps_lost=list(state.steps_lost))
        self.record["commit_seconds"] += course.commit_seconds

    def keep_commit():
      """Before the world re-forms: rank 0 (of the old world) checkpoints the committed state, so
      a job whose world never re-forms (fewer than --min-np ranks) resumes from it, and says so."""
      if not (self.world.is_chief and saver.manager):
        return
      step = state.position.step
      try:
        if not saver.save(step, position=state.position, agree=False):
          raise checkpoints.NonFiniteWeights(f"weights at step {step} hold inf or NaN")
      except checkpoints.CheckpointError as e:
        self.log("the world is changing; the commit at step %d could not be checkpointed: %s", step, e)
        return
      self.log("the world is changing (a rank lost or a host added); checkpoint %s holds the commit at step %d; "
               "waiting for Horovod to form the new world (horovodrun waits --elastic-timeout for --min-np ranks)",
               saver.newest, step)

    return elastic.run(self.hvd, one_world, before_reset=keep_commit)(state)

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


def of(config, hvd, world) -> Fixed:
  """The mode of this run: the one place --elastic is read."""
  if config.faults.elastic:
    return Elastic(hvd, world, config.comm.ranks_per_node)
  return Fixed(hvd, world)
