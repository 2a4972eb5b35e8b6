"""The one seam where gradients cross ranks.

train.py calls the function that make_gradient_exchange returns between
tape.gradient and the optimizer, and nowhere else are gradients communicated.
"""
import tensorflow as tf

from flags.comm import CommConfig


def make_gradient_exchange(config: CommConfig, hvd):
  """A function list[tf.Tensor] -> list[tf.Tensor] that averages gradients over all ranks.

  'horovod' is the stock baseline: one Horovod allreduce per gradient, left to
  Horovod's own tensor fusion (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME).
  """
  if config.allreduce != "horovod":
    raise ValueError(f"unknown allreduce algorithm {config.allreduce!r}")

  def exchange(grads):
    # Horovod: average, so the update equals the single-worker update on the
    # global batch (Goyal et al. eq. 3); stable names let Horovod's
    # coordinator match the same tensor across ranks.
    return [hvd.allreduce(tf.convert_to_tensor(g), op=hvd.Average, name=f"grad_{i}")
            for i, g in enumerate(grads)]

  return exchange
