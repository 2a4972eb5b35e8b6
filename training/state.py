"""Where a run is and what it holds: one RunState for every run, fixed or elastic.

Position: where training is in the data (the epoch, its worlds' generations, images and updates,
tau, the noise scale's averages, the evaluation completed at its step, AdaScale's pinned base
batch); frozen, moved on by the course (training/course.py) one step, one epoch end, one world at a
time. It is checkpointed inside the checkpoint (training/persist/saving.py) and committed with it.

RunState: the Position and the variables every rank holds alike (weights, BatchNorm statistics,
optimizer slots, the step, the loss scale, PowerSGD's state), a Horovod elastic State:
  share()    rank 0's variables and position to every rank (a fixed run's start, and inside sync)
  save()     the commit: both copied to host memory (make faults times it)
  restore()  back to the last commit (a lost peer's roll-back)
  sync()     share() then save(), at the start of every elastic world
A fixed run is the one-world case: shared once, never committed. Checkpoints written before the
position moved inside them read theirs through `Position.legacy` and `read_legacy`.
"""
import dataclasses
import glob
import json
import os

from horovod.common.elastic import State
from horovod.common.exceptions import HorovodInternalError

from comm import sync
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

  @classmethod
  def legacy(cls, step: int, steps_per_epoch: int, global_batch: int = 0,
             current: Generation | None = None) -> "Position":
    """The position of checkpoint `step`, written before positions were kept, as far as its step says:
    steps_per_epoch an epoch. A fixed run knows its batch (global_batch: the images) and the generation
    its epoch's steps were trained in (current, whose steps are the epoch's so far): it resumes in the
    epoch. An elastic world knows neither (0, None): the epoch starts again."""
    epoch, offset = divmod(step, steps_per_epoch)
    return cls(epoch=epoch, current=dataclasses.replace(current, steps=offset) if current and offset else None,
               images=step * global_batch, step=step)


class RunState(State):
  """A run's variables and Position (the module docstring): `position` is read and moved on by the
  course; `commits` counts save()s and `steps_lost` each roll-back's steps since its commit."""

  def __init__(self, hvd, variables=(), position: Position = Position()):
    super().__init__(bcast_object=lambda obj: hvd.broadcast_object(obj, root_rank=0, name="run_state"),
                     get_rank=hvd.rank if hvd is not None else lambda: 0)
    self.hvd, self.variables, self.position = hvd, list(variables), position
    self.commits = 0
    self.steps_lost = []
    self._values, self._position = None, position

  @classmethod
  def at(cls, position: Position) -> "RunState":
    """A state of one process holding a position alone (arithmetic on a position, and tests)."""
    return cls(None, (), position)

  def share(self) -> None:
    """Rank 0's variables and position, on every rank."""
    # Horovod: identical weights, BatchNorm statistics, optimizer slots, step and position everywhere.
    sync.broadcast_state(self.hvd, self.variables)
    self.position = Position.from_json(self._bcast_object(self.position.to_json()))

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
    """Rank 0's state to every rank of a new world, then committed. Horovod's run_fn calls this outside
    the function it recovers: a peer lost here (a joining host that dies during its ~25 s set-up, while
    the survivors wait in this broadcast) ended every survivor; as a HorovodInternalError it rolls them
    back to the last commit and the world re-forms."""
    with peer_loss_rolls_back():
      self.share()
    self.save()


class peer_loss_rolls_back:
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



def _legacy_path(model_dir: str, step: int) -> str:
  return os.path.join(model_dir, f"position-{step}.json")


def legacy_files(model_dir: str) -> list[str]:
  """The position-N.json files kept beside checkpoints written before the position moved inside them."""
  return glob.glob(os.path.join(model_dir, "position-*.json"))


def read_legacy(model_dir: str, step: int) -> Position | None:
  """The Position of checkpoint `step` from its position-N.json; None: none kept (Position.legacy reads
  such a checkpoint's step)."""
  path = _legacy_path(model_dir, step)
  if not os.path.exists(path):
    return None
  with open(path) as fh:
    return Position.from_json(json.load(fh))
