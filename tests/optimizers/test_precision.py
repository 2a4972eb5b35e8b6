"""Mixed precision: the Keras policies, the loss-scale state machine, the CPU warning (the fp16 step over
real ranks: tests/multiprocess/test_checks.py; LARS in fp16 through train.py: test_fashion_mnist.py)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from models import build_model
from optimizers import precision

# (scale, good_steps, finite) -> (scale, good_steps), growth_interval=3, factor=2, min_scale=1
@pytest.mark.parametrize("scale, good, finite, want", [
    (1024.0, 0, True, (1024.0, 1)),
    (1024.0, 1, True, (1024.0, 2)),
    (1024.0, 2, True, (2048.0, 0)),   # third finite step in a row: grow, restart the count
    (1024.0, 2, False, (512.0, 0)),   # overflow: halve, restart the count
    (1.0, 0, False, (1.0, 0)),        # never below min_scale
    (1.5, 1, False, (1.0, 0)),
])
def test_next_state(scale, good, finite, want):
  s, g = precision.next_state(tf.constant(scale), tf.constant(good, tf.int64), tf.constant(finite),
                              growth_interval=3, factor=2.0, min_scale=1.0)
  assert (float(s), int(g)) == want


EPYC_AVX2 = frozenset({"sse4_2", "avx", "avx2", "f16c", "fma"})  # this machine's kind (2026-12-01)
AVX512_BF16 = EPYC_AVX2 | {"avx512f", "avx512_bf16"}  # a Xeon (Cooper Lake) or Zen 4: no AMX
SAPPHIRE_RAPIDS = AVX512_BF16 | {"amx_bf16", "amx_tile", "avx512_fp16"}  # AMX for bf16, not for fp16
GRANITE_RAPIDS = SAPPHIRE_RAPIDS | {"amx_fp16"}


# (precision, flags) -> None (no warning) or words the warning must hold: the measured ratio, or
# that fp16 was not measured. Only AMX trains faster than fp32 (optimizers/precision.py's table).
@pytest.mark.parametrize("prec, flags, says", [
    ("fp32", EPYC_AVX2, None), ("fp32", frozenset(), None),
    ("bf16", SAPPHIRE_RAPIDS, None),                                # AMX-BF16: 1.36x
    ("bf16", AVX512_BF16, ("AVX512-BF16 but no AMX-BF16", "3.0-3.1 images/s in bf16 against 4.2-4.3",
                           "slower than fp32 (about 0.72x, measured)")),
    ("bf16", EPYC_AVX2, ("no bf16 arithmetic", "AVX2-only AMD EPYC", "91 images/s in bf16 against 538",
                         "several times slower than fp32 (0.17x, measured)")),
    ("bf16", frozenset(), None),                                    # flags unknown (not x86 Linux): nothing said
    ("fp16", GRANITE_RAPIDS, None),                                 # AMX-FP16, by analogy (not measured)
    ("fp16", SAPPHIRE_RAPIDS, ("AVX512-FP16 but no AMX-FP16", "not measured", "0.72x")),
    ("fp16", EPYC_AVX2, ("no fp16 arithmetic", "f16c only converts", "not measured", "several times slower")),
    ("fp16", frozenset(), None),
])
def test_slow_on_cpu(prec, flags, says):
  why = precision.slow_on_cpu(prec, flags)
  lacks = precision.cpu_lacks(prec, flags)
  if says is None:
    assert why is None and lacks is None
    return
  assert why.startswith(lacks) and not lacks.endswith(".")  # bench/time_to_accuracy/__main__.py quotes it
  assert f"--precision={prec}" in why and why.endswith("use --precision=fp32 on it")
  for words in says:
    assert words in why, words


def test_cpu_flags_reads_the_first_processor(tmp_path):
  info = tmp_path / "cpuinfo"
  info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
  assert precision.cpu_flags(str(info)) == {"fpu", "avx2", "amx_bf16"}
  assert precision.cpu_flags(str(tmp_path / "missing")) == frozenset()


@pytest.mark.parametrize("values, want", [
    ([[1.0, 2.0], [3.0]], True), ([[1.0, np.inf], [3.0]], False),
    ([[1.0], [np.nan]], False), ([[-np.inf]], False), ([[0.0], []], True),
])
def test_all_finite(values, want):
  assert bool(precision.all_finite([tf.constant(v, tf.float32) for v in values])) == want


def test_disabled_scale_is_the_identity_and_never_applies_a_non_finite_update():
  ls = precision.for_precision("bf16")
  loss, grads = tf.constant(2.5), [tf.constant([np.inf])]
  assert ls.scale_loss(loss) is loss and ls.unscale(grads) is grads
  calls = []
  assert not bool(ls.apply_if_finite(grads, lambda: calls.append(1)))
  assert calls == [] and float(ls.scale) == 1.0
  assert bool(ls.apply_if_finite([tf.constant([1.0])], lambda: calls.append(1)))
  assert calls == [1]
  # The caller's verdict (every rank's loss) overrides finite gradients.
  assert not bool(ls.apply_if_finite([tf.constant([1.0])], lambda: calls.append(1), tf.constant(False)))
  assert calls == [1]


def test_fp16_skips_overflow_and_unscales_to_the_true_gradient():
  ls = precision.for_precision("fp16")
  assert float(ls.scale) == 2.0 ** 15
  w = tf.Variable([3.0, -1.0])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(w * w) * 1e-6  # true gradient 2e-6 * w
    scaled = ls.scale_loss(loss)
  (g,) = ls.unscale(tape.gradient(scaled, [w]))
  np.testing.assert_allclose(g.numpy(), [6e-6, -2e-6], rtol=1e-6)
  applied = []
  assert not bool(ls.apply_if_finite([tf.constant([np.nan])], lambda: applied.append(1)))
  assert applied == [] and float(ls.scale) == 2.0 ** 14
  assert bool(ls.apply_if_finite([g], lambda: applied.append(1)))
  assert applied == [1] and int(ls.good_steps) == 1


@pytest.fixture
def policy():
  """Set a global Keras policy for one test, then restore float32 for the rest of the session."""
  yield keras.mixed_precision.set_global_policy
  keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("name, compute", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_mixed_policy_keeps_fp32_variables_logits_and_bn_statistics(policy, name, compute):
  policy(precision.POLICIES[name])
  model = build_model("resnet20", 10, (8, 8, 1))
  assert all(v.dtype == "float32" for v in model.variables)  # fp32 master weights
  assert model.get_layer("stage1_block1_conv1").compute_dtype == compute
  assert model.get_layer("fc").compute_dtype == "float32"  # softmax/loss in fp32
  logits = model(tf.random.normal((4, 8, 8, 1)), training=True)
  assert logits.dtype == tf.float32
  bn = model.get_layer("stage1_block1_bn1")
  assert bn.moving_mean.dtype == "float32" and bn.moving_variance.dtype == "float32"
  assert not np.allclose(bn.moving_mean.numpy(), 0.0)  # statistics were updated, in fp32
