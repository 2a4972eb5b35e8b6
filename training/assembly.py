"""What train.py builds a run from: the model with its optimizer and loss scale, and the callables the
run is handed, each a named object, so that train.py wires with keyword arguments and no closure
(STYLE.md, principle 13): the input a world reads, the cross-rank operations the run's parts call
(each names its Horovod collective), and the worlds a mode runs (training/modes.py: once, or once per
--elastic world).
"""
import dataclasses
from typing import Callable

import keras
import tensorflow as tf

from comm import sync
from comm.exchange import choose_auto
from input import pipeline
from models import build_model
from optimizers import build_optimizer, precision
from training import shape


def model_and_optimizer(config, info, log):
  """The network for the data's classes and image shape, its optimizer and the loss scale."""
  keras.utils.set_random_seed(config.run.seed)
  # Mixed precision (Jia et al.): bf16/fp16 layers, fp32 master weights, logits and BatchNorm statistics.
  keras.mixed_precision.set_global_policy(precision.POLICIES[config.optim.precision])
  model = build_model(config.model.name, info.num_classes, info.image_shape,
                      zero_init_residual=config.model.zero_init_residual)
  log("model %s: %s trainable parameters, precision %s", config.model.name,
      f"{sum(int(tf.size(v)) for v in model.trainable_variables):,}", config.optim.precision)
  if not tf.config.list_physical_devices("GPU") and (slow := precision.slow_on_cpu(config.optim.precision,
                                                                                  precision.cpu_flags())):
    log("warning: %s", slow)  # a choice the user may have made for a GPU or an AMX machine: said, not refused
  optimizer = build_optimizer(config.optim, model.trainable_variables)
  return model, optimizer, precision.for_precision(config.optim.precision)  # loss scale: identity unless fp16


@dataclasses.dataclass(frozen=True)
class InputFor:
  """input_for(config, world) -> this rank's input for a world at config's batch, its images in the
  compute dtype (bf16: half the bytes); scanned: what --data_dir holds, read once at start-up."""
  seed: int
  dtype: object
  scanned: object
  elastic: bool

  @classmethod
  def of(cls, config, scanned, elastic: bool) -> "InputFor":
    dtype = keras.mixed_precision.Policy(precision.POLICIES[config.optim.precision]).compute_dtype
    return cls(config.run.seed, dtype, scanned, elastic)

  def __call__(self, config, world):
    return pipeline.build(config.data, world, self.seed, dtype=self.dtype, scanned=self.scanned,
                          elastic=self.elastic)


@dataclasses.dataclass(frozen=True)
class Collectives:
  """The cross-rank operations of one model's run, named by what they do."""
  hvd: object
  model: object

  def average_statistics(self) -> None:
    """BatchNorm's moving statistics averaged over ranks (one grouped allreduce) before each evaluation,
    save, commit and the export: what is measured, saved and served is one model."""
    sync.average_statistics(self.hvd, sync.statistics_of(self.model))

  def decide(self, value):
    """Rank 0's decision on every rank (one broadcast): the batch controller's choices."""
    return self.hvd.broadcast_object(value, root_rank=0, name="choice")

  def any_rank(self, flag: bool) -> bool:
    """Whether any rank's weights hold inf/NaN before a save (one allreduce)."""
    return sync.any_rank(self.hvd, flag, "nonfinite_state")

  def average_residuals(self, tensors):
    """PowerSGD's residuals averaged over ranks (one grouped allreduce) before a save or a commit."""
    return self.hvd.grouped_allreduce(tensors, op=self.hvd.Average, name="powersgd_residuals")


@dataclasses.dataclass(frozen=True)
class Rechoose:
  """--compression=auto under --elastic: a new world's compression, its links priced again
  (comm.exchange.choose_auto: collectives of that world)."""
  hvd: object
  variables: list
  log: Callable

  @classmethod
  def of(cls, config, hvd, model, log) -> "Rechoose | None":
    """Under --compression=auto; None otherwise (each world keeps start-up's compression)."""
    return cls(hvd, model.trainable_variables, log) if config.comm.compression == "auto" else None

  def __call__(self, world, current):
    return choose_auto(current, self.hvd, world, self.variables, self.log)


@dataclasses.dataclass(frozen=True)
class BeforeCommit:
  """Every rank before each --elastic commit: PowerSGD's residuals averaged, so a new world starts from
  their mean rather than rank 0's (changes no later update); nothing without PowerSGD."""
  powersgd: object
  average: Callable

  def __call__(self) -> None:
    if self.powersgd is not None:
      self.powersgd.average_residuals(self.average)


class Worlds:
  """What a mode runs (training/modes.py): run_world(world, config, data, course) trains one world
  (training/shape.Run); rebuild(world, position, later) -> (config, input) of a new --elastic world, the
  global batch as the flags' policy sets it and AdaScale's base batch the position's.
  build_config(world, base_batch=, later_world=): the flags' config for a world (flags.build_config)."""

  def __init__(self, parts: shape.Parts, build_config: Callable):
    self.parts, self.build_config, self.count = parts, build_config, 0

  def run_world(self, world, config, data, course):
    self.count += 1
    return shape.Run(self.parts, world, config, data, course, later=self.count > 1).train()

  def rebuild(self, world, position, later: bool):
    config = self.build_config(world, base_batch=position.base_batch, later_world=later)
    return config, self.parts.input_for(config, world)
