"""A world's trainer (orbit's Trainer role): the gradient exchange for the world's links, the train
step at each K traced once and kept, the switch between the plain and the compressed exchange, and
the timings the batch controller's prior starts from. The shape's transitions (training/shape.py)
say which K and which exchange; the trainer has the steps for them.
"""
import functools

import tensorflow as tf

from comm import compression_choice, exchange as exchange_lib, sync
from training import step as step_lib
from training.adaptive import goodput

NONE, POWERSGD = "none", "powersgd"  # what a step sends: every gradient whole, or PowerSGD's P and Q


class Trainer:
  """The train steps of one world. parts: training/shape.Parts (the model, optimizer, loss scale,
  Horovod, the compression and its variable, the step variable, the noise scale)."""

  def __init__(self, parts, world, config):
    self.parts, self.world = parts, world
    # hybrid probes the links here, unless --compression=auto did (its model is reused)
    self.exchange = exchange_lib.make_gradient_exchange(parts.hvd, config.comm, world, parts.log,
                                                        model=parts.compression.cost)
    self.steps: dict[int, object] = {}  # K -> this world's traced train step
    self.compressing = NONE

  def set_compression(self, compression: str) -> None:
    """Steps from here send PowerSGD's P and Q (POWERSGD) or every gradient whole (NONE): one variable
    the traced steps read, so no retrace."""
    if self.parts.use_powersgd is None:
      return
    self.compressing = compression
    self.parts.use_powersgd.assign(compression == POWERSGD)

  def step_for(self, k: int, config, num_classes: int):
    """The train step at K micro-batches of config's batch, traced once in this world and kept (as fast
    as the fixed-K step it is: bench/step_cache measures it)."""
    if k not in self.steps:
      p = self.parts
      sizes = p.noise and step_lib.noise_sizes(self.world.size, config.data.batch_size, k)  # shape says why not
      self.steps[k] = step_lib.make_train_step(
          p.model, p.optimizer, self.exchange, p.loss_scale, num_classes,
          options=step_lib.StepOptions(
              label_smoothing=config.optim.label_smoothing, accumulation_steps=k, agree=sync.agree_max(p.hvd),
              noise=sizes[0] if sizes else None, average=functools.partial(p.hvd.allreduce, op=p.hvd.Average),
              identical_norms=bool(config.optim.adascale_base), powersgd=p.compression.powersgd,
              compressing=(lambda: p.use_powersgd) if p.use_powersgd is not None else None,
              step=lambda: p.step_var, seed=config.run.seed))
    return self.steps[k]

  def prior(self, config, info) -> goodput.Prior:
    """The batch controller's prior for this world (training/adaptive/goodput.Prior): a micro-batch's
    compute timed alone, the exchange timed alone each way this run may send, the overlap prior."""
    p = self.parts
    variables = p.model.trainable_variables
    spec = tf.TensorSpec([config.data.batch_size, *info.image_shape], p.model.compute_dtype)
    exchange = {NONE: step_lib.time_exchange(self.exchange, variables)}
    if p.compression.powersgd is not None:
      exchange[POWERSGD] = step_lib.time_exchange(
          lambda grads: self.exchange.compressed(grads, p.compression.powersgd)[0], variables)
    return goodput.Prior(micro=step_lib.time_compute(p.model, p.loss_scale, info.num_classes, spec),
                         exchange=exchange, overlap=compression_choice.OVERLAP)
