"""comm/exchange.py's pure parts: the dtype gradients travel in, and the plan's description."""
import pytest
import tensorflow as tf

from comm.exchange import describe, wire_dtype


@pytest.mark.parametrize("dtype, compression, want", [
    (tf.float32, "none", tf.float32), (tf.float32, "fp16", tf.float16),
    (tf.float16, "none", tf.float16), (tf.float16, "fp16", tf.float16),
    (tf.bfloat16, "none", tf.float32), (tf.bfloat16, "fp16", tf.float32),
    (tf.float64, "fp16", tf.float16),
])
def test_wire_dtype(dtype, compression, want):
  assert wire_dtype(dtype, compression) == want


def test_describe_plan():
  plan = [{"algorithm": "hier", "bytes": 32 << 20}, {"algorithm": "flat", "bytes": 1 << 19}]
  assert describe(plan) == "hier:32.0 flat:0.5"
