"""Agreement between ranks outside the gradient path: initial state, errors and the data they hold."""
import dataclasses
import re
import socket

import numpy as np
import tensorflow as tf

from comm import agreement

# What a collective raises on the ranks that survive a peer's death: Horovod's
# background thread shuts down on the transport's error and every pending and
# later op fails with "Horovod has been shut down ..." (both strings are in
# horovod 0.28.1's mpi_lib); Gloo's IoException text may come through instead.
# A Horovod error of another kind (mismatched shapes: a bug) is not one of these.
_PEER_WORDS = ("horovod has been shut down", "connection closed by peer", "connection reset by peer",
               "ioexception")


def broadcast_state(hvd, variables, root_rank: int = 0, name: str = "state") -> None:
  """Give every rank root_rank's values of these Keras or tf variables: one in-place broadcast op
  over their resource handles for each device they are on (the op hvd.broadcast_ runs), a collective.

  Each variable is keyed by `name` and its position in the list, not by its own name (two tf.Variables
  may share one), so every rank passes the same list in the same order, as hvd.broadcast_variables
  needed too. That one traced a tf.function of one broadcast per variable at its first call: 0.70 s
  for ResNet-20's 174 variables and SGD's momentum on one rank, against 0.01 s for this (2026-12-08),
  paid at every start-up and by a joining rank while the survivors wait for it in the state's sync.
  A Keras 3 variable is not a resource variable itself: the tf.Variable it wraps (.value) is.
  """
  plain = [v.value if not isinstance(v, tf.Variable) else v for v in variables]
  by_device: dict[str, list[int]] = {}
  for i, v in enumerate(plain):
    by_device.setdefault(v.device, []).append(i)
  for k, (device, indices) in enumerate(by_device.items()):
    with tf.device(device):
      hvd.mpi_ops.MPI_LIB.horovod_broadcast_inplace_resource(
          [plain[i].handle for i in indices], variable_names=[f"{name}.{i}" for i in indices], name=f"{name}.{k}",
          root_rank=root_rank, process_set_id=0)


def statistics_of(model) -> list:
  """The variables each rank updates from its own batches: BatchNorm's moving mean and variance
  (Keras's non-trainable floating variables; a dropout seed's integer state is not one)."""
  return [v for v in model.non_trainable_variables if tf.as_dtype(v.dtype).is_floating]


def average_statistics(hvd, variables) -> None:
  """Give every rank the mean over ranks of these variables (statistics_of's), in one grouped
  allreduce: a collective, every rank calls it at the same point.

  Goyal et al. keep BatchNorm's statistics per worker in training, where only the batch's own
  are used; the moving averages are what evaluation and serving use, and each rank's follow
  its own batches, so ranks held different models: a 2-rank digits run printed top-1 0.8433 at
  an epoch end, and the same checkpoint (rank 0's statistics) gave 0.8567. Their mean, agreed
  before every evaluation, save, commit and export, makes what is measured, saved and served
  one model (a few KB: ResNet-50's are 53 layers x 2 vectors, 0.2 MB). Training is unchanged:
  a training step reads the batch's statistics, not these.
  """
  if not variables:
    return
  plain = [v.value if not isinstance(v, tf.Variable) else v for v in variables]
  means = hvd.grouped_allreduce([tf.convert_to_tensor(v) for v in plain], op=hvd.Average, name="bn_statistics")
  for v, mean in zip(plain, means):
    v.assign(mean)


def barrier(hvd, name: str) -> None:
  """Return once every rank has called it.

  A one-element allreduce rather than hvd.join(): join is Horovod's tool for
  uneven data and leaves per-rank join state in the coordinator, whose
  interplay with the response cache has had hang bugs (horovod PR #1571).
  With join here, two of our test runs hung early in training with no stall
  warning (no tensor pending: the coordinator itself was stuck).
  """
  hvd.allreduce(tf.zeros([], tf.int32), op=hvd.Sum, name=f"barrier_{name}")


@dataclasses.dataclass(frozen=True)
class _Report:
  """What one rank says before training: its problem ("" for none), the fingerprint of the data
  it will read (comm/agreement.py; None when nothing was scanned) and its host's name."""
  message: str
  held: agreement.Fingerprint | None
  host: str


def _disagreement(reports: list[_Report]) -> str | None:
  return agreement.disagreement([(rank, r.host, r.held) for rank, r in enumerate(reports)])


def first_error(hvd, message: str | None, scanned=None) -> str | None:
  """Every rank's message gathered; the first non-empty one, else the sentence naming the ranks
  whose data differ (scanned: this rank's input.sources.Scanned, or None), identical on all ranks.

  Lets a check that only some ranks can make (a path on one host, a shard missing there) stop every
  rank with the same sentence, naming the rank and host that found it, instead of leaving the others waiting in a collective; and ranks whose
  copies of --data_dir differ stop here instead of drifting apart, or hanging at the first epoch's
  end, later. Horovod: one allgather_object for both, the start-up's one round trip.
  """
  reports = hvd.allgather_object(_Report(message or "", agreement.of(scanned), socket.gethostname()),
                                 name="first_error")
  said = [(rank, r) for rank, r in enumerate(reports) if r.message]
  if not said:
    return _disagreement(reports)
  rank, first = said[0]
  if len(said) == len(reports) and len({r.message for _, r in said}) == 1:
    return first.message  # every rank's own verdict (a bad flag): no host to name
  # A problem some ranks found (a path on one host): the others' line says where it is.
  return f"rank {rank} on {first.host}: {first.message}"


def agree_on_data(hvd, scanned) -> str | None:
  """None when every rank of this world holds the same data (scanned: this rank's
  input.sources.Scanned, or None), else the sentence naming the ranks, hosts and counts.

  --elastic: call it at the start of every world, on every rank of it (it is a collective; a rank
  that joins later meets it in its first world, where first_error's gather before the elastic loop
  would leave it hanging, horovod#2652). Horovod: one allgather_object.
  """
  reports = hvd.allgather_object(_Report("", agreement.of(scanned), socket.gethostname()), name="agree_on_data")
  return _disagreement(reports)


def agreed_stop(hvd, code: int, name: str) -> int:
  """The largest stop request over ranks (0: none), in one small allreduce, eager; a barrier too."""
  return int(hvd.allreduce(tf.constant(code, tf.int32), op=hvd.Max, name=f"stop_{name}").numpy())


def any_rank(hvd, flag: bool, name: str) -> bool:
  """Whether flag is true on any rank (eager; one small allreduce, the same answer everywhere)."""
  return bool(hvd.allreduce(tf.constant(int(flag), tf.int32), op=hvd.Max, name=f"any_{name}").numpy())


def agree_max(hvd):
  """agree(codes) -> codes' elementwise max over all ranks, for inside a tf.function.

  The stop and divergence verdicts of training/step.py: one small int32
  allreduce per step, which Horovod's coordinator negotiates in the same
  cycle as the step's gradients (a separate eager call would cost a cycle
  and a host sync of its own).
  """
  return lambda codes: hvd.allreduce(codes, op=hvd.Max, name="agree_codes")


def peer_failure(error: BaseException) -> str | None:
  """The line of error that says a collective failed because another rank died or became
  unreachable, or None for any other error (pure: the exception's type and text; a SIGKILLed
  Gloo peer left its survivor a traceback)."""
  if type(error).__name__ == "HorovodInternalError":  # horovod.common.exceptions, elastic mode
    text = str(error).strip()
    return text.splitlines()[0] if text else "HorovodInternalError"
  if not isinstance(error, (tf.errors.OpError, RuntimeError)):
    return None
  # TensorFlow puts "Graph execution error:" first; the cause is on a later line, and Gloo's
  # starts with the source file it was raised in ("[/tmp/pip-install-.../pair.cc:598] ").
  line = next((line for line in str(error).splitlines() if any(w in line.lower() for w in _PEER_WORDS)), None)
  return re.sub(r"^\[[^\]]*\]\s*", "", line.strip()) if line is not None else None


def fingerprint(variables) -> tf.Tensor:
  """float64 (3 * len(variables),): per variable sum, sum of squares and position-weighted sum.

  Equal bits give equal fingerprints; replicas that drifted apart almost surely do not.
  """
  parts = []
  for v in variables:
    x = tf.reshape(tf.cast(v, tf.float64), [-1])
    position = tf.range(1, tf.size(x) + 1, dtype=tf.float64)
    parts += [tf.reduce_sum(x), tf.reduce_sum(x * x), tf.reduce_sum(x * position)]
  return tf.stack(parts)


def replicas_identical(hvd, variables) -> bool:
  """Whether every rank holds bit-for-bit the same values (one small allgather).

  Data-parallel SGD applies the same averaged update everywhere, so trainable
  weights and optimizer slots must stay identical, and BatchNorm's moving
  statistics are after average_statistics: train.py passes every variable of
  the model and the optimizer. NaN in the same places on
  every rank counts as identical: weights that are non-finite everywhere are
  a divergence of the run, not of one rank from the others.
  """
  prints = hvd.allgather(fingerprint(variables)[None], name="replica_fingerprint").numpy()
  return all(np.array_equal(p, prints[0], equal_nan=True) for p in prints)
