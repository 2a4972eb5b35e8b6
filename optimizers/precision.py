"""Mixed precision: the Keras compute policy of --precision, and dynamic loss scaling for fp16.

Jia et al. run forward and backward in fp16 and the update in fp32 on fp32
master weights. Keras's mixed policies do that split: variables stay float32,
layers compute in bf16/fp16, the logits layer is float32 (models/), and
BatchNorm computes its statistics in float32 (Keras upcasts them).

bf16 has fp32's exponent range, so it needs no loss scaling. fp16 does: small
gradients underflow unless the loss is multiplied by a scale S first. The
order of one fp16 step (train.py) is

  scaled loss -> scaled grads -> exchange (comm/) -> unscale in fp32 ->
  one finite check -> update, or skip the step (and, fp16 only, lower S)

The check runs on the exchanged gradients, which are identical on every rank
(an inf or NaN on any rank makes the average non-finite everywhere), so every
rank takes the same branch without another collective. Unscaling comes before
the optimizer because LARS's trust ratio divides by ||g||: a scaled gradient
would shrink every layer's step by S.
"""
import tensorflow as tf

POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}

# The /proc/cpuinfo flags of the x86 instructions oneDNN computes bf16 / fp16 with. Without
# them TensorFlow converts each element to fp32 and back: ResNet-8 at 28x28, batch 512, one
# process on an AMD EPYC with AVX2 only trained 91 images/s in bf16 against 538 in fp32
# (2026-12-01); with AMX-BF16, ResNet-50 at 224 ran 1.36x faster in bf16 (docs/recipe.md).
NATIVE_CPU_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
  """The CPU's feature flags (the first processor's), empty where the file is missing."""
  try:
    with open(path) as fh:
      for line in fh:
        if line.startswith("flags"):
          return frozenset(line.split(":", 1)[1].split())
  except OSError:
    pass
  return frozenset()


def cpu_lacks(precision: str, flags: frozenset[str]) -> str | None:
  """What a CPU with these flags lacks to compute `precision`, or None (fp32, or the CPU computes
  it natively). Unknown flags (not Linux on x86) say nothing."""
  native = NATIVE_CPU_FLAGS.get(precision)
  if native is None or not flags or any(f in flags for f in native):
    return None
  return f"this CPU has no {precision} arithmetic ({' or '.join(native)} absent from /proc/cpuinfo)"


def slow_on_cpu(precision: str, flags: frozenset[str]) -> str | None:
  """cpu_lacks's finding as the start-up warning: what it costs and what to pass instead."""
  lacks = cpu_lacks(precision, flags)
  return lacks and (f"{lacks}, so --precision={precision} converts every element and trains several times "
                    "slower than fp32 (6x for ResNet-8 on an AVX2-only EPYC); use --precision=fp32 on it")


def next_state(scale, good_steps, finite, growth_interval, factor, min_scale):
  """(scale, good_steps) after one step: on overflow divide by factor (not below min_scale)
  and restart the count; after growth_interval finite steps in a row multiply by factor."""
  grown = good_steps + 1 >= growth_interval
  scale = tf.where(finite, tf.where(grown, scale * factor, scale), tf.maximum(scale / factor, min_scale))
  good_steps = tf.where(tf.logical_and(finite, tf.logical_not(grown)), good_steps + 1,
                        tf.zeros_like(good_steps))
  return scale, good_steps


def all_finite(grads) -> tf.Tensor:
  """A scalar bool: no inf or NaN in any gradient."""
  return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])


class DynamicLossScale:
  """Loss scale S for fp16, or the identity when not enabled (fp32, bf16).

  Defaults as NVIDIA's AMP and Keras: S starts at 2**15, halves on every
  overflow, doubles after 2000 finite steps in a row. S lives in tf.Variables
  that evolve identically on every rank (same verdict each step); it is not
  checkpointed, so a resumed fp16 run finds its scale again within a few
  skipped steps.
  """

  def __init__(self, enabled: bool, initial_scale: float = 2.0 ** 15, growth_interval: int = 2000,
               factor: float = 2.0, min_scale: float = 1.0):
    self.enabled = enabled
    self.growth_interval = growth_interval
    self.factor = factor
    self.min_scale = min_scale
    self.scale = tf.Variable(initial_scale if enabled else 1.0, trainable=False, dtype=tf.float32,
                             name="loss_scale")
    self.good_steps = tf.Variable(0, trainable=False, dtype=tf.int64, name="loss_scale_good_steps")

  def scale_loss(self, loss):
    return loss * tf.cast(self.scale, loss.dtype) if self.enabled else loss

  def unscale(self, grads):
    """Gradients of the true loss, in float32."""
    if not self.enabled:
      return grads
    return [tf.cast(g, tf.float32) / self.scale for g in grads]

  def apply_if_finite(self, grads, apply, finite=None) -> tf.Tensor:
    """Call apply() if every gradient is finite, else skip it; update S (fp16). Returns the verdict.

    finite: the verdict when the caller has one (training/step.py adds every
    rank's loss to it), else taken from grads. fp32 and bf16 skip a
    non-finite update too, so inf/NaN never reaches the weights; the training
    loop then stops the run (divergence), while fp16 lowers S and goes on.
    """
    finite = all_finite(grads) if finite is None else finite

    def update():
      apply()
      return tf.constant(True)

    tf.cond(finite, update, lambda: tf.constant(False))
    if self.enabled:
      scale, good_steps = next_state(self.scale, self.good_steps, finite, self.growth_interval,
                                     self.factor, self.min_scale)
      self.scale.assign(scale)
      self.good_steps.assign(good_steps)
    return finite


def for_precision(precision: str) -> DynamicLossScale:
  """The loss scale a --precision needs: dynamic for fp16, the identity otherwise."""
  return DynamicLossScale(enabled=precision == "fp16")
