"""Optimizers, learning-rate schedules and mixed precision."""
import keras

from flags.config import OptimConfig
from optimizers.lars import DEFAULT_EXCLUDE, LARS

# No weight decay on biases and BatchNorm's gamma/beta (Jia et al.; MLPerf);
# LARS also gives them the plain LR instead of a trust ratio.
NO_DECAY = DEFAULT_EXCLUDE


def build_optimizer(config: OptimConfig, variables):
  """A built Keras optimizer for these variables; the LR is assigned every step by train.py.

  Built here, before the first step, so its slots exist for the broadcast
  from rank 0 and for checkpoint restore.
  """
  exclude = list(NO_DECAY) if config.no_decay_on_bias_bn else []
  if config.optimizer == "lars":
    optimizer = LARS(learning_rate=0.0, momentum=config.momentum, weight_decay=config.weight_decay,
                     eta=config.lars_eta, exclude=exclude)
  else:
    optimizer = keras.optimizers.SGD(learning_rate=0.0, momentum=config.momentum,
                                     weight_decay=config.weight_decay or None)
    if config.weight_decay and exclude:
      optimizer.exclude_from_weight_decay(var_names=exclude)
  optimizer.build(variables)
  return optimizer
