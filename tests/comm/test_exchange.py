"""comm/exchange.py: the dtype gradients travel in, the plan's description, and (over a stand-in
for Horovod on one rank) the names and plans of its calls, PowerSGD's two among them."""
import numpy as np
import pytest
import tensorflow as tf

from comm.exchange import GradientExchange, describe, make_powersgd, wire_dtype
from flags.config import CommConfig


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


class OneRank:
  """Horovod's collectives on one rank (each mean is its input), recording every call's tensor
  name and the dtypes it sends."""
  Average = "average"

  def __init__(self):
    self.calls = []

  def grouped_allreduce(self, tensors, op, name):
    self.calls.append((name, [t.dtype for t in tensors]))
    return list(tensors)

  def allreduce(self, tensor, op, name):
    self.calls.append((name, [tensor.dtype]))
    return tensor


SHAPES = [(3, 3, 4, 16), (16,), (20, 12)]  # at rank 2: (36, 16) compressed, the vector whole, (20, 12) compressed


def grads():
  return [tf.constant(np.random.default_rng(0).standard_normal(s), tf.float32) for s in SHAPES]


@pytest.mark.parametrize("allreduce, names", [
    ("flat", ["bucket_0", "bucket_1", "powersgd_p_bucket_0", "powersgd_p_bucket_1"]),
    ("horovod", ["grad_0", "grad_1", "grad_2", "powersgd_p_grad_0", "powersgd_p_grad_1", "powersgd_p_grad_2"]),
])
def test_a_named_call_sends_under_names_of_its_own_and_plans_beside_the_plain_one(allreduce, names):
  # Horovod matches collectives across ranks by name: PowerSGD's calls in the same step must not
  # reuse the plain exchange's. The plain call's plan stays what it was (no 'call' key).
  hvd = OneRank()
  exchange = GradientExchange(hvd, CommConfig(allreduce, fusion_threshold_mb=0.002), world=None)
  exchange(grads())
  plain = list(exchange.plan)
  exchange(grads(), name="powersgd_p")
  assert [name for name, _ in hvd.calls] == names
  if allreduce == "flat":
    assert [b["tensors"] for b in plain] == [1, 2] and all("call" not in b for b in plain)
    assert exchange.plan == plain + [{**b, "call": "powersgd_p"} for b in plain]


def test_powersgd_sends_ps_with_the_whole_vectors_then_qs_in_two_calls():
  hvd = OneRank()
  config = CommConfig("flat", compression="powersgd", powersgd_rank=2, powersgd_wire="fp16")
  exchange = GradientExchange(hvd, config, world=None)
  compressor = make_powersgd(config, [tf.Variable(tf.zeros(s)) for s in SHAPES], seed=3)
  assert compressor.views == ((36, 16), None, (20, 12))
  out, update = exchange.compressed(grads(), compressor)
  # fp16 on the wire for all of it: P's and Q's (PowerSGD's cast) and the vector (the exchange's).
  assert hvd.calls == [("powersgd_p_bucket_0", [tf.float16] * 3), ("powersgd_q_bucket_0", [tf.float16] * 2)]
  assert [b.get("call") for b in exchange.plan] == ["powersgd_p", "powersgd_q"]
  assert [o.shape for o in out] == [tf.TensorShape(s) for s in SHAPES] and len(update.qs) == 2
  alone = make_powersgd(config, [tf.Variable(tf.zeros(s)) for s in SHAPES], seed=3)(grads(), list)[0]
  alone[1] = tf.cast(tf.cast(alone[1], tf.float16), tf.float32)  # the vector's round trip through fp16
  for a, b in zip(out, alone):  # one rank: the exchange's mean is the identity
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_no_powersgd_without_its_compression():
  assert make_powersgd(CommConfig(compression="fp16"), [tf.Variable(tf.zeros((8, 8)))], seed=0) is None
