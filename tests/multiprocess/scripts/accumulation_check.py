"""checks.py accumulation FLAGS: gradient accumulation against more ranks. Run it under
horovodrun -np 4 with --accumulation_steps=1, or as one plain process with
--accumulation_steps=4 (and any other train.py flags, e.g. --batch_size=8 --data_dir=DIGITS_DIR).
Both see the same global batches, split into the same micro-batches: rank r's batch of 4 ranks is
micro-batch r of the one process. Each trains a model without BatchNorm for
STEPS updates with train.py's step, optimizer, exchange and LR schedule; rank 0
writes the weights (after, then before), the steps per epoch and the whole LR schedule to --out (.npz).
"""
import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf
from absl import flags as absl_flags

from comm import sync
from comm.exchange import make_gradient_exchange
from flags import train_flags
from input import pipeline
from optimizers import build_optimizer, precision, schedules
from training.step import StepOptions, make_train_step

STEPS = 3
# train.py's flags, parsed from this check's arguments (absl: once per process).
train_flags.define_flags()
OUT = absl_flags.DEFINE_string("out", "", "Where rank 0 writes the .npz of weights and schedule.")


def run(world, args):
  """Trains STEPS updates and writes --out on rank 0; args: train.py's flags and --out."""
  absl_flags.FLAGS(["accumulation", *args])  # an unknown flag raises here, naming it
  config = train_flags.build_config(absl_flags.FLAGS, world)
  d = config.data
  pipeline.prepare(d, world)
  steps_per_epoch = pipeline.build(d, world, config.run.seed).steps_per_epoch
  schedule = schedules.from_epochs(   # as train.py lays it out
      base_lr=config.optim.base_lr, global_batch=d.global_batch, steps_per_epoch=steps_per_epoch,
      epochs=config.run.epochs, warmup_epochs=config.optim.warmup_epochs,
      warmup_start_lr=config.optim.warmup_start_lr, kind=config.optim.lr_schedule,
      decay_epochs=config.optim.decay_epochs)

  keras.utils.set_random_seed(0)  # the same initial weights in either launch
  model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                            keras.layers.Flatten(), keras.layers.Dense(10)])
  optimizer = build_optimizer(config.optim, model.trainable_variables)
  sync.broadcast_state(hvd, model.variables + optimizer.variables)
  step = make_train_step(model, optimizer, make_gradient_exchange(hvd, config.comm, world),
                         precision.for_precision("fp32"), 10, options=StepOptions(agree=sync.agree_max(hvd),
                         accumulation_steps=d.accumulation_steps))
  initial = [v.numpy() for v in model.trainable_variables]
  rng = np.random.default_rng(7)
  mine = slice(world.rank * d.step_batch, (world.rank + 1) * d.step_batch)
  for s in range(STEPS):
    images = rng.standard_normal((d.global_batch, 8, 8, 1)).astype(np.float32)
    labels = rng.integers(0, 10, d.global_batch).astype(np.int32)
    lr = tf.constant(schedule(s), tf.float32)
    finite = step(tf.constant(images[mine]), tf.constant(labels[mine]), lr).finite
    assert bool(finite)
  if world.is_chief:
    np.savez(OUT.value, *[v.numpy() for v in model.trainable_variables], *initial,
             steps_per_epoch=steps_per_epoch, global_batch=d.global_batch,
             lrs=[schedule(s) for s in range(schedule.total_steps)])
