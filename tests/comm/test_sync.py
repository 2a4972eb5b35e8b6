"""comm/sync.py's peer_failure: which errors mean another rank died (a table; the real
SIGKILLed Gloo peer is tests/multiprocess/test_faults.py's); first_error and agree_on_data over a
stand-in gather (the real one over 2 ranks: tests/multiprocess/scripts/data_check.py)."""
import dataclasses
import socket

import pytest
import tensorflow as tf

from comm import sync
from flags.config import Source
from comm import agreement
from input import sources


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


# ------------------------------------------- first_error and agree_on_data --

class Gathering:
  """horovod.tensorflow's allgather_object as rank 0 of a world would see it: this rank's report
  first, then the others', each this rank's with `others`' fields replaced (host, held, message)."""

  def __init__(self, *others):
    self.others, self.names = others, []

  def allgather_object(self, report, name=None):
    self.names.append(name)
    return [report] + [dataclasses.replace(report, **other) for other in self.others]


FULL = agreement.Fingerprint(train=1497, eval=300, files=5, classes=10, damaged=0, layout="a" * 12)
SHORT = agreement.Fingerprint(train=1122, eval=300, files=4, classes=10, damaged=0, layout="b" * 12)


def scanned_like(fingerprint):
  """A Scanned whose fingerprint is `fingerprint`'s counts (its layout digest is its own)."""
  names = [f"train-{i:05d}-of-{fingerprint.files - 1:05d}" for i in range(fingerprint.files - 1)]
  counts = [fingerprint.train // len(names)] * (len(names) - 1)
  counts.append(fingerprint.train - sum(counts))
  info = sources.imagenet_like("imagenet", fingerprint.classes, 32, fingerprint.train, fingerprint.eval)
  return sources.Scanned(info=info, source=Source.IMAGENET,
                         train=sources.Split(tuple(f"/d/{n}" for n in names), tuple(counts)),
                         eval=sources.Split(("/d/validation-00000-of-00001",), (fingerprint.eval,)))


def test_first_error_also_compares_what_the_ranks_hold_in_the_same_gather():
  mine = scanned_like(FULL)
  host = socket.gethostname()
  hvd = Gathering({"host": "hostB", "held": SHORT})
  assert sync.first_error(hvd, None, mine) == (
      f"the ranks do not hold the same data: rank 0 on {host} has 1,497 training / 300 held-out records in 5 "
      "files, rank 1 on hostB has 1,122 / 300 in 4 files; make --data_dir hold the same files on every host.")
  assert len(hvd.names) == 1  # one round trip for both: start-up pays nothing more
  # A rank's own problem comes first (its data may be why the counts differ).
  # Found on one host only: the line every rank prints says where.
  assert sync.first_error(Gathering({"host": "hostB", "held": None, "message": "--data_dir=/x does not exist"}),
                          None, mine) == "rank 1 on hostB: --data_dir=/x does not exist"
  # The same data everywhere (and synthetic, with nothing scanned) agrees.
  assert sync.first_error(Gathering({"host": "hostB"}), None, mine) is None
  assert sync.first_error(Gathering({"host": "hostB"}), None) is None
  assert sync.first_error(Gathering({"host": "hostB"}), "bad flag") == "bad flag"  # every rank's: no host named


def test_agree_on_data_is_one_gather_of_what_each_rank_holds():
  # --elastic: called at the start of each world, by every rank of it.
  hvd = Gathering({"host": "hostB", "held": SHORT}, {"host": "hostC"})
  sentence = sync.agree_on_data(hvd, scanned_like(FULL))
  assert sentence.startswith(f"the ranks do not hold the same data: ranks 0 on {socket.gethostname()} and 2 on "
                             "hostC have 1,497 training / 300 held-out records in 5 files, rank 1 on hostB has "
                             "1,122 / 300 in 4 files"), sentence
  assert len(hvd.names) == 1
  assert sync.agree_on_data(Gathering({"host": "hostB"}), scanned_like(FULL)) is None
  assert sync.agree_on_data(Gathering({"host": "hostB"}), None) is None
