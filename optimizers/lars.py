"""LARS: layer-wise adaptive rate scaling (You, Gitman and Ginsburg 2017, arXiv 1708.03888).

Each layer's step is the global (scheduled) LR times a trust ratio

    local = eta * ||w|| / (||g|| + weight_decay * ||w|| + epsilon)

so a layer moves by about eta of its own norm per step whatever the scale of
its gradient; that is what let Jia et al. train at batch 64K. Weight decay is
added to the gradient inside the update, as in You et al. Variables whose path
matches `exclude` (biases and BatchNorm's gamma/beta by default, as Jia et al.
and the MLPerf reference) skip both the trust ratio and weight decay and take
plain momentum SGD at the global LR.

The velocity holds LR-scaled steps (as the MLPerf TF reference and Keras SGD):

    v = momentum * v + lr * local * (g + weight_decay * w)
    w = w - v                                           (classic)
    w = w - (momentum * v + lr * local * (g + weight_decay * w))   (Nesterov)

LARS must see true fp32 gradients: a loss-scaled gradient would shrink the
trust ratio by the loss scale (train.py unscales before the update).
"""
import re

import keras
import tensorflow as tf

# Biases and BatchNorm parameters: no trust ratio, no weight decay.
DEFAULT_EXCLUDE = ("bias", "gamma", "beta")


@keras.saving.register_keras_serializable(package="imagenet_minutes")
class LARS(keras.optimizers.Optimizer):
  """Momentum SGD with a per-layer trust ratio; a Keras 3 optimizer.

  Args:
    learning_rate: the global LR (a float, a schedule, or a variable assigned every step).
    momentum: in [0, 1).
    weight_decay: L2 coefficient added to the gradient of non-excluded variables.
    eta: trust coefficient (MLPerf: 0.001).
    epsilon: keeps the trust ratio finite when ||g|| + weight_decay * ||w|| is tiny.
    nesterov: Nesterov momentum instead of classic.
    exclude: name substrings or regexes, searched in each variable's path
      ('stage1_block1_bn1/gamma'); a match skips the trust ratio and weight decay.
  """

  def __init__(self, learning_rate=0.1, momentum=0.9, weight_decay=1e-4, eta=0.001,
               epsilon=0.0, nesterov=False, exclude=DEFAULT_EXCLUDE, name="lars", **kwargs):
    # Keras's own weight_decay is decoupled (w -= lr * wd * w); ours lives in
    # the trust ratio and the gradient, so the base class gets none.
    kwargs.pop("weight_decay", None)
    super().__init__(learning_rate=learning_rate, name=name, weight_decay=None, **kwargs)
    if not 0.0 <= momentum < 1.0:
      raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
    if weight_decay < 0 or eta <= 0 or epsilon < 0:
      raise ValueError(f"need weight_decay >= 0, eta > 0, epsilon >= 0; got {weight_decay}, {eta}, {epsilon}")
    self.momentum = float(momentum)
    self.lars_weight_decay = float(weight_decay)
    self.eta = float(eta)
    self.epsilon = float(epsilon)
    self.nesterov = bool(nesterov)
    self.exclude = tuple(exclude or ())
    self._exclude_re = [re.compile(p) for p in self.exclude]

  def excluded(self, variable) -> bool:
    """Whether this variable skips the trust ratio and weight decay (decided by its path)."""
    path = getattr(variable, "path", None) or variable.name
    return any(p.search(path) for p in self._exclude_re)

  def build(self, variables):
    if self.built:
      return
    super().build(variables)
    self.velocities = self.add_optimizer_variables(variables, "velocity")
    # Decided once from the Keras paths: update_step may receive the bare tf.Variable.
    self._adapt = [not self.excluded(v) for v in variables]

  def trust_ratio(self, w, g):
    """The factor a non-excluded layer's LR is multiplied by, given its weight and the gradient
    the optimizer is handed (under PowerSGD, the low-rank update: bench/compression/trust.py
    measures what that does). A zero weight (a fresh zero-init gamma, if not excluded) or a zero
    gradient falls back to 1, the plain LR, instead of 0 or NaN."""
    w_norm = tf.norm(w)
    g_norm = tf.norm(g)
    ratio = self.eta * w_norm / (g_norm + self.lars_weight_decay * w_norm + self.epsilon)
    return tf.where(tf.logical_and(w_norm > 0.0, g_norm > 0.0), ratio, tf.ones_like(ratio))

  def update_step(self, gradient, variable, learning_rate):
    lr = tf.cast(learning_rate, variable.dtype)
    g = tf.cast(gradient, variable.dtype)
    w = tf.convert_to_tensor(variable)
    index = self._get_variable_index(variable)
    if self._adapt[index]:
      lr = lr * self.trust_ratio(w, g)
      g = g + self.lars_weight_decay * w
    step = lr * g
    v = self.velocities[index]
    self.assign(v, self.momentum * v + step)
    if self.nesterov:
      self.assign_sub(variable, self.momentum * v + step)
    else:
      self.assign_sub(variable, v)

  def get_config(self):
    config = super().get_config()
    config.update(momentum=self.momentum, weight_decay=self.lars_weight_decay, eta=self.eta,
                  epsilon=self.epsilon, nesterov=self.nesterov, exclude=list(self.exclude))
    return config
