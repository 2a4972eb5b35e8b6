"""What the benchmarks time as a training step: train.py's own (training.step.make_train_step) with
train.py's default optimizer, so a benchmark's step costs what a user's does."""
import types

# The one line each benchmark report carries beside its step timings.
NOTE = ("The timed training step is train.py's own (training/step.py make_train_step, fp32, train.py's "
        "default momentum SGD with weight decay); the step without exchange is the same step with an "
        "identity exchange.")


def default_optim():
  """OptimConfig of train.py with every flag at its default (flags/optim.py): momentum SGD, fp32."""
  # Imported here: the drivers read NOTE without loading Keras (flags/ imports models/).
  from absl import flags as absl_flags

  from flags import optim as optim_flags
  from flags import train_flags
  train_flags.define_flags()
  f = absl_flags.FLAGS
  defaults = types.SimpleNamespace(**{name: f[name].default for name in f})
  return optim_flags.build(defaults, defaults.batch_size)


def default_optimizer(model):
  """train.py's default optimizer, built for the model's variables (slots exist before the first step)."""
  from optimizers import build_optimizer
  return build_optimizer(default_optim(), model.trainable_variables)
