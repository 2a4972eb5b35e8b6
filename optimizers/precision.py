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

# Where bf16 / fp16 train faster than fp32 on a CPU, by the /proc/cpuinfo flags of the x86
# instructions oneDNN computes them with. Measured, one process (docs/recipe.md):
#   amx_bf16 (a Xeon with AMX-BF16): ResNet-50, 224x224, batch 32: 4.4 images/s fp32, 6.0 bf16 (1.36x);
#   avx512_bf16 without amx_bf16 (a Xeon with AVX512-BF16, no AMX): the same run, 4.2-4.3 fp32 and
#     3.0-3.1 bf16 (0.72x, slower);
#   neither (an AVX2-only AMD EPYC, 2026-12-01): ResNet-8, 28x28, batch 512: 538 fp32, 91 bf16 (0.17x),
#     TensorFlow converting every element to fp32 and back.
# So only the matrix unit (AMX) counts as fast. fp16 was measured on no CPU: it gets the same rule
# by analogy, AMX-FP16 (amx_fp16) fast, AVX512-FP16 (avx512_fp16, e.g. a Sapphire Rapids Xeon,
# which has amx_bf16 but no amx_fp16) presumed no faster than fp32, neither (f16c only converts)
# presumed several times slower; its warnings say that it was not measured.
CPU_FLAGS = {"bf16": ("amx_bf16", "avx512_bf16"), "fp16": ("amx_fp16", "avx512_fp16")}  # (fast, vector only)

# (precision, what the CPU has) -> (the finding: the flags and the measurement behind it, the cost)
FINDINGS = {
    ("bf16", "vector"): (
        "this CPU has AVX512-BF16 but no AMX-BF16 (amx_bf16 absent from /proc/cpuinfo), and on a Xeon "
        "with these flags ResNet-50 (224x224, batch 32, one process) trained 3.0-3.1 images/s in bf16 "
        "against 4.2-4.3 in fp32",
        "trains slower than fp32 (about 0.72x, measured)"),
    ("bf16", "none"): (
        "this CPU has no bf16 arithmetic (neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo), and on "
        "an AVX2-only AMD EPYC ResNet-8 (28x28, batch 512, one process) trained 91 images/s in bf16 "
        "against 538 in fp32",
        "converts every element and trains several times slower than fp32 (0.17x, measured)"),
    ("fp16", "vector"): (
        "this CPU has AVX512-FP16 but no AMX-FP16 (amx_fp16 absent from /proc/cpuinfo); fp16 was not "
        "measured on such a CPU, but bf16 with the matching flags (AVX512-BF16, no AMX) trained "
        "ResNet-50 at 0.72x fp32's images/s",
        "is not expected to train faster than fp32 (not measured)"),
    ("fp16", "none"): (
        "this CPU has no fp16 arithmetic (neither avx512_fp16 nor amx_fp16 in /proc/cpuinfo; f16c only "
        "converts); fp16 was not measured on such a CPU, but bf16 without its instructions trained "
        "ResNet-8 at 0.17x fp32's images/s on an AVX2-only AMD EPYC",
        "converts every element and is expected to train several times slower than fp32 (not measured)"),
}


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


def _finding(precision: str, flags: frozenset[str]) -> tuple[str, str] | None:
  """FINDINGS's (finding, cost) for a CPU with these flags, or None where `precision` is fp32, or
  trains faster than fp32 (AMX), or the flags are unknown (not Linux on x86: nothing to say)."""
  if precision not in CPU_FLAGS or not flags:
    return None
  fast, vector = CPU_FLAGS[precision]
  if fast in flags:
    return None
  return FINDINGS[precision, "vector" if vector in flags else "none"]


def cpu_lacks(precision: str, flags: frozenset[str]) -> str | None:
  """What a CPU with these flags lacks for `precision` to train faster than fp32, with the
  measurement behind it (one clause, no full stop: bench/time_to_accuracy/__main__.py quotes it), or
  None (fp32; AMX for it; unknown flags)."""
  found = _finding(precision, flags)
  return found and found[0]


def slow_on_cpu(precision: str, flags: frozenset[str]) -> str | None:
  """cpu_lacks's finding as the start-up warning: what it costs and what to pass instead."""
  found = _finding(precision, flags)
  return found and f"{found[0]}, so --precision={precision} {found[1]}; use --precision=fp32 on it"


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
  that evolve identically on every rank (same verdict each step) and are
  checkpointed (training/persist/saving.py): a resumed run goes on at the scale it had.
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
