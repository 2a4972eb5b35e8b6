"""comm/sync.py's peer_failure: which errors mean another rank died (a table; the real
SIGKILLed Gloo peer is tests/multiprocess/test_faults.py's)."""
import pytest
import tensorflow as tf

from comm import sync


class HorovodInternalError(RuntimeError):  # the name horovod.common.exceptions gives it
  pass


SHUT_DOWN = ("Graph execution error:\n\nDetected at node HorovodAllreduce_agree_codes_0\n"
             "Horovod has been shut down. This was caused by an exception on one of the ranks or an "
             "attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished "
             "execution. [[{{node HorovodAllreduce_agree_codes_0}}]]")


PAIR = "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:27583"


@pytest.mark.parametrize("error, want", [
    (tf.errors.UnknownError(None, None, SHUT_DOWN), SHUT_DOWN.splitlines()[3]),  # the line that says it
    (tf.errors.AbortedError(None, None, SHUT_DOWN), SHUT_DOWN.splitlines()[3]),
    (tf.errors.UnknownError(None, None, PAIR), "Connection closed by peer [127.0.0.1]:27583"),
    (RuntimeError("gloo::IoException: Read error [127.0.0.1]: Connection reset by peer"),
     "gloo::IoException: Read error [127.0.0.1]: Connection reset by peer"),
    (HorovodInternalError("ring failed"), "ring failed"),
    # a bug, not a lost peer: the traceback stays
    (tf.errors.FailedPreconditionError(None, None, "Mismatched allreduce tensor shapes: "
                                       "[{{node HorovodAllreduce_grads_0}}]"), None),
    (tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor"), None),
    (ValueError("Horovod has been shut down"), None),  # not an op's error
])
def test_peer_failure(error, want):
  assert sync.peer_failure(error) == want
