"""Elastic training (--elastic): Horovod elastic on Gloo, with a state of our own.

When a host is lost, `horovodrun --gloo --min-np M --host-discovery-script S` keeps the
surviving ranks; when a host comes back, its ranks join. Each time, every rank rolls back to
the last commit (TrainingState), Horovod re-forms the world, rank 0's state is broadcast (a
new rank receives it) and training goes on from that commit in a new world: the epoch's
remaining examples are dealt again (input/sharding.partition), the exchange's process sets
and plan are rebuilt for the new node groups, and the global batch and LR follow the
policy of train.py's batch flags.

Horovod's own TensorFlow states predate Keras 3 (horovod 0.28.1's TensorFlowKerasState
calls optimizer.variables(), a property in Keras 3) and its elastic.run recovers only from
errors naming HorovodAllreduce/Allgather/Broadcast, so a failure inside a grouped allreduce
or a reduce-scatter (what flat and hier call) ended the job; run() here recovers from every
error comm.sync.peer_failure recognises.
"""
import dataclasses
import glob
import json
import os

from horovod.common.elastic import State, run_fn
from horovod.common.exceptions import HorovodInternalError

from comm import hierarchical, sync
from input.sharding import Generation


@dataclasses.dataclass(frozen=True)
class Position:
  """Where training is, in the data: `images` and `step` (updates) since the run began, the
  epoch, its earlier generations (worlds) and the current one's steps so far (input/pipeline's
  elastic_plan deals the rest of the epoch from these); `ranks` and `global_batch`: the world
  of the newest step (a resumed run says what changed); `tau`: under --lr_scaling=adascale, the
  base-batch steps the LR schedule has counted (optimizers/adascale.py); `noise`: the noise
  scale's averages (NoiseScale.state), which AdaScale's gain is computed from, alike on every rank;
  `evaluated`: the held-out evaluation completed at `step`, if one did (training/loop.py: not repeated
  after a resume, and a target it met ends a restarted run), as {"step", "top1", "top5", "loss",
  "count", "seconds", "epoch"}; `base_batch`: AdaScale's B0 as the run pinned it at its first world
  (0: not pinned, the linear rule), which every later world and restart reads its clock in."""
  epoch: int = 0
  history: tuple[Generation, ...] = ()
  current: Generation | None = None
  images: int = 0
  step: int = 0
  ranks: int = 0
  global_batch: int = 0
  tau: float = 0.0
  noise: dict | None = None
  evaluated: dict | None = None
  base_batch: int = 0

  def world_changed(self, continued: bool = False) -> "Position":
    """The position a new world starts from: the current generation joins the epoch's history.
    continued: the world stays and the step batch changes, so the next generation reads on in
    the same shares (input/sharding.dealings) instead of the epoch's rest being dealt again."""
    done = (dataclasses.replace(self.current, continued=continued),) if self.current and self.current.steps else ()
    return dataclasses.replace(self, history=self.history + done, current=None)

  def after_step(self, size: int, step_batch: int, global_batch: int, readers: int = 0,
                 tau: float = 0.0) -> "Position":
    """tau: how far the step moved AdaScale's clock (its gain r; 0 under the linear rule, or for
    a step fp16 loss scaling skipped)."""
    steps = self.current.steps + 1 if self.current else 1
    return dataclasses.replace(self, current=Generation(size, step_batch, steps, readers),
                               images=self.images + global_batch, step=self.step + 1, ranks=size,
                               global_batch=global_batch, tau=self.tau + tau, evaluated=None)

  def next_epoch(self) -> "Position":
    return dataclasses.replace(self, epoch=self.epoch + 1, history=(), current=None)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, d: dict) -> "Position":
    gens = tuple(Generation(**g) for g in d.get("history", ()))
    current = Generation(**d["current"]) if d.get("current") else None
    return cls(epoch=d["epoch"], history=gens, current=current, images=d["images"], step=d["step"],
               ranks=d.get("ranks", 0), global_batch=d.get("global_batch", 0), tau=d.get("tau", 0.0),
               noise=d.get("noise"), evaluated=d.get("evaluated"), base_batch=d.get("base_batch", 0))


class TrainingState(State):
  """What a commit keeps on every rank, a reset rolls back to and a new rank is sent: the
  variables (weights, BatchNorm statistics, optimizer slots, the loss scale, the step) and the Position.

  save() copies the variables to host memory (the commit's cost, measured by make faults),
  restore() puts them back, sync() broadcasts rank 0's to every rank.
  """

  def __init__(self, hvd, variables, position: Position):
    super().__init__(bcast_object=lambda obj: hvd.broadcast_object(obj, root_rank=0, name="elastic_state"),
                     get_rank=hvd.rank)
    self.hvd, self.variables, self.position = hvd, list(variables), position
    self.commits = 0
    self.steps_lost = []  # per roll-back: the steps trained since the commit it went back to
    self.save()

  def save(self):
    self._values = [v.numpy() for v in self.variables]
    self._position = self.position
    self.commits += 1

  def restore(self):
    for v, value in zip(self.variables, self._values):
      v.assign(value)
    self.steps_lost.append(self.position.step - self._position.step)
    self.position = self._position

  def sync(self):
    """Rank 0's state to every rank of a new world. Horovod's run_fn calls this outside the
    function it recovers (run's `recovering`): a peer lost here (a joining host that dies during
    its ~25 s set-up, while the survivors wait in this broadcast) ended every survivor; as a
    HorovodInternalError it rolls them back to the last commit and the world re-forms."""
    with _peer_loss_rolls_back():
      sync.broadcast_state(self.hvd, self.variables)
      self.position = Position.from_json(self._bcast_object(self.position.to_json()))
    self.save()


class _peer_loss_rolls_back:
  """A context in which any error comm.sync.peer_failure recognises becomes HorovodInternalError,
  the one error Horovod's elastic loop answers by rolling back and re-forming the world."""

  def __enter__(self):
    return self

  def __exit__(self, kind, error, tb):
    if error is None or isinstance(error, HorovodInternalError) or not isinstance(error, Exception):
      return False
    if sync.peer_failure(error) is None:
      return False
    raise HorovodInternalError(error) from error


def run(hvd, fn, before_reset=lambda: None):
  """fn(state) under Horovod's elastic loop: a lost peer (any error comm.sync.peer_failure
  recognises) rolls every survivor back to the last commit; a host added or removed by the
  discovery script interrupts at the next commit; after either, Horovod is started again for
  the new world and fn runs again from the synchronised state. before_reset() runs on each
  rank first, in the old world, on the committed state (train.py: rank 0 checkpoints it, so a
  world that never re-forms, fewer than --min-np ranks, leaves it resumable)."""
  def recovering(state):
    with _peer_loss_rolls_back():
      return fn(state)

  def reset():
    before_reset()
    hvd.shutdown()
    hierarchical.register.cache_clear()  # the old world's process sets are gone with it
    hvd.init(process_sets="dynamic")

  return run_fn(recovering, reset)


def position_path(model_dir: str, step: int) -> str:
  return os.path.join(model_dir, f"position-{step}.json")


def position_files(model_dir: str) -> list[str]:
  """The position-N.json files of checkpoints written before issue 39 (read_position's)."""
  return glob.glob(os.path.join(model_dir, "position-*.json"))


def read_position(model_dir: str, step: int) -> Position | None:
  """The Position of checkpoint `step` as checkpoints before issue 39 kept it, in position-N.json
  beside it (training/persist/saving.py keeps it inside the checkpoint now); None: a checkpoint written
  before positions were kept."""
  path = position_path(model_dir, step)
  if not os.path.exists(path):
    return None
  with open(path) as fh:
    return Position.from_json(json.load(fh))
