"""Optimizers and learning-rate schedules."""
import keras

from flags.optim import OptimConfig

# No weight decay on biases and BatchNorm's gamma/beta (Jia et al.; MLPerf).
NO_DECAY = ("bias", "gamma", "beta")


def build_optimizer(config: OptimConfig, variables):
  """A built Keras optimizer for these variables; the LR is assigned every step by train.py.

  Built here, before the first step, so its slots exist for the broadcast
  from rank 0 and for checkpoint restore.
  """
  optimizer = keras.optimizers.SGD(learning_rate=0.0, momentum=config.momentum,
                                   weight_decay=config.weight_decay or None)
  if config.weight_decay:
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
  optimizer.build(variables)
  return optimizer
