"""--compression=auto: which weight matrices PowerSGD compresses, priced by the exchange's
alpha-beta cost model (comm/cost_model.py) against sending every gradient whole.

The exchange of one step without compression (--compression=none) is one call: the gradients
fused into buckets as comm/fusion.py plans them, each bucket one allreduce priced by the model,
about alpha + bytes x beta:

  plain    = sum over the call's buckets of price(bucket)

Compressing a set S of the matrices PowerSGD's plan allows (comm/powersgd.py) sends the P's of S
with every other gradient whole in a first call (P's in --powersgd_wire's dtype, the others in
their own, as under --compression=none; dtypes never share a bucket), then the Q's of S in a
second call, which cannot start before the first ends (P^ needs the averaged P); and each matrix
of S costs its encode and decode on the step's path (compute_p, compute_q, decompress, apply:
measured at start-up by comm/probe.encode_seconds):

  compressed(S) = sum over call 1's buckets of price + sum over call 2's buckets of price
                  + sum over S of encode_i

Fused buckets share their alpha, so a matrix's marginal cost sent whole is its bytes x beta;
compressing it saves (n m x itemsize - r (n + m) x wire itemsize) x beta less its encode_i, and
the second call costs at least one more alpha for the whole set. So the matrices are ranked by
that saving, every prefix of the ranking is priced as above (buckets, both calls, encode), the
cheapest prefix is the compressed candidate, and it is chosen only if it is cheaper than the
plain exchange. The last prefix is every measured matrix (--compression=powersgd's set when the
time bound measured them all), so the choice's prediction is never above either fixed way's: on
a fast link it sends everything whole, on a slow one it compresses the matrices whose bytes cost
more than their encoding.

Overlap with backprop: the plain exchange's buckets start while backprop still runs and hide
part of their time behind it (docs/communication.md measured a third to a half), PowerSGD's
calls start after the last gradient (its P needs every gradient's M) and hide none. So the plain
exchange is charged (1 - overlap) of its price, overlap a prior (OVERLAP) that the batch
controller replaces by the run's own update times (training/adaptive/goodput.py); priced alone, auto
chose PowerSGD in every launch measured, on links where sending everything whole was as fast.
Left out: the encoding competing with the collectives for cores.
Pure: the same inputs give the same choice, so ranks that hold the same model and times (both
agreed over ranks first, comm/exchange.make_compression) make the same one.
"""
import dataclasses
import math
from typing import Callable, Sequence

import tensorflow as tf

from comm import fusion

# price(nbytes, tensors) -> seconds of one bucket of nbytes in `tensors` tensors (cost_model.bucket_time).
Price = Callable[[int, int], float]
OVERLAP = 1 / 3  # the fraction of the plain exchange hidden behind backprop: the low end measured (module docstring)


@dataclasses.dataclass(frozen=True)
class Option:
  """One way to send a step's gradients. mask[i]: whether gradient i is compressed; first_bytes,
  second_bytes: what one rank hands to the first and the second call; exchange_s: the calls'
  predicted seconds; encode_s: the compressed matrices' encode + decode seconds."""
  mask: tuple[bool, ...]
  first_bytes: int
  second_bytes: int
  exchange_s: float
  encode_s: float

  @property
  def layers(self) -> int:
    return sum(self.mask)

  @property
  def nbytes(self) -> int:
    return self.first_bytes + self.second_bytes

  @property
  def seconds(self) -> float:
    return self.exchange_s + self.encode_s


@dataclasses.dataclass(frozen=True)
class Choice:
  """plain: every gradient whole; best: the cheapest set that compresses at least one matrix;
  every: every matrix measured compressed (--compression=powersgd's set when all were); both None
  when no matrix can be (none planned, or none measured). planned: the matrices PowerSGD's plan
  could compress at `rank` (those the start-up's time bound left unmeasured are never compressed)."""
  plain: Option
  best: Option | None
  every: Option | None
  planned: int
  rank: int
  overlap: float = 0.0  # of the plain exchange, hidden behind backprop (module docstring)

  @property
  def plain_visible(self) -> float:
    """Seconds of the plain exchange left after the part that hides behind backprop."""
    return self.plain.seconds * (1 - self.overlap)

  @property
  def chosen(self) -> Option:
    """best if predicted faster than the plain exchange's visible part, else plain (a tie sends whole:
    no state, no second call)."""
    if self.best is not None and self.best.seconds < self.plain_visible:
      return self.best
    return self.plain

  def describe(self) -> str:
    """What was chosen and why, predicted per step, for the start-up line."""
    hidden = f" ({self.plain_visible * 1e3:.1f} ms past backprop)" if self.overlap else ""
    whole = f"{self.plain.nbytes / fusion.MB:.2f} MB whole in {self.plain.seconds * 1e3:.1f} ms{hidden}"
    if self.every is None:
      return f"every gradient whole: {whole}; no matrix to compress at rank {self.rank}"
    every = f"all {self.every.layers}" + ("" if self.every.layers == self.planned else f" measured of {self.planned}")
    if self.chosen is self.plain:
      return f"every gradient whole: {whole}, against {self._powersgd(self.every, every)}"
    return (f"{self._powersgd(self.best, f'{self.best.layers} of {self.planned}')}, against {whole} "
            f"({every} matrices: {self.every.seconds * 1e3:.1f} ms)")

  def _powersgd(self, option: Option, which: str) -> str:
    return (f"PowerSGD rank {self.rank} on {which} matrices: {option.nbytes / fusion.MB:.2f} MB in two allreduces, "
            f"{option.exchange_s * 1e3:.1f} ms + {option.encode_s * 1e3:.1f} ms encode/decode = "
            f"{option.seconds * 1e3:.1f} ms")

  def summary(self) -> dict:
    """summary.json's view: per way to send (uncompressed, as chosen, every measured matrix
    compressed) the matrices compressed, the bytes one rank sends per step and the predicted ms."""
    return {"chose": "none" if self.chosen is self.plain else "powersgd", "rank": self.rank, "overlap": self.overlap,
            "layers_compressed": self.chosen.layers, "layers_planned": self.planned, "gradients": len(self.plain.mask),
            "uncompressed": _summary(self.plain), "chosen": _summary(self.chosen), "all_measured": _summary(self.every)}


def _summary(option: Option | None) -> dict | None:
  if option is None:
    return None
  return {"layers": option.layers, "bytes_per_step": option.nbytes, "predicted_ms": round(option.seconds * 1e3, 3),
          "exchange_ms": round(option.exchange_s * 1e3, 3), "encode_ms": round(option.encode_s * 1e3, 3)}


def call_seconds(tensors: Sequence[tuple[int, str]], price: Price, threshold: int) -> float:
  """Seconds of one call of the exchange: tensors of (elements, dtype name) in gradient order,
  fused into buckets at threshold bytes as comm/fusion.plan fuses them, each bucket priced."""
  nbytes = [count * tf.as_dtype(dtype).size for count, dtype in tensors]
  return sum(price(sum(nbytes[i] for i in bucket), len(bucket)) for bucket in fusion.plan(list(tensors), threshold))


def choose(shapes, views, rank: int, encode_s: Sequence[float], price: Price, threshold: int,
           dtype: str = "float32", wire: str = "float32", overlap: float = 0.0) -> Choice:
  """The Choice for gradients of `shapes` (module docstring's model).

  views: comm/powersgd.plan(shapes, rank), per gradient its (n, m) or None (never compressed);
  encode_s: per gradient the seconds of its encode + decode on the slowest rank (inf: not
  measured, never compressed; ignored where views is None); price: seconds of one bucket;
  threshold: the fusion threshold in bytes; dtype: the dtype a gradient travels in whole (on the
  wire: float32 for float32 and bfloat16 gradients); wire: P's and Q's (--powersgd_wire); overlap:
  the fraction of the plain exchange hidden behind backprop (make_compression passes OVERLAP).
  """
  sizes = [math.prod(int(d) for d in shape) for shape in shapes]

  def nbytes(tensors) -> int:
    return sum(count * tf.as_dtype(name).size for count, name in tensors)

  def option(mask: tuple[bool, ...]) -> Option:
    first = [(view[0] * rank, wire) if keep else (size, dtype) for size, view, keep in zip(sizes, views, mask)]
    second = [(view[1] * rank, wire) for view, keep in zip(views, mask) if keep]
    return Option(mask, nbytes(first), nbytes(second),
                  call_seconds(first, price, threshold) + call_seconds(second, price, threshold),
                  sum(t for t, keep in zip(encode_s, mask) if keep))

  plain = option((False,) * len(sizes))
  planned = sum(view is not None for view in views)
  candidates = [i for i, view in enumerate(views) if view is not None and math.isfinite(encode_s[i])]
  if not candidates:
    return Choice(plain, None, None, planned, rank, overlap)
  itemsize, wire_itemsize = tf.as_dtype(dtype).size, tf.as_dtype(wire).size
  # beta at the scale of the exchange's buffers: only the ranking needs it.
  span = max(1, min(threshold, plain.nbytes) if threshold > 0 else plain.nbytes)
  beta = (price(span, 1) - price(0, 1)) / span

  def saving(i: int) -> float:
    n, m = views[i]
    return (sizes[i] * itemsize - rank * (n + m) * wire_itemsize) * beta - encode_s[i]
  ranked = sorted(candidates, key=saving, reverse=True)  # stable: equal savings keep gradient order
  options = []
  for k in range(1, len(ranked) + 1):
    chosen = set(ranked[:k])
    options.append(option(tuple(i in chosen for i in range(len(sizes)))))
  return Choice(plain, min(options, key=lambda o: o.seconds), options[-1], planned, rank, overlap)  # min: fewest
