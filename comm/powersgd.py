"""PowerSGD: each weight matrix's gradient averaged as a rank-r approximation, in two small
allreduces instead of one of the whole gradient (Vogels, Karimireddy, Jaggi, NeurIPS 2019, Alg. 1).

A gradient of n x m elements (a conv kernel HWIO viewed as (H*W*I, O), a dense kernel (in, out)
as is) travels as P (n x r) and Q (m x r). Per compressed gradient, every rank runs:

  M   = gradient + residual                  error feedback: what earlier steps left out
  P   = M orth(Q);   P <- mean over ranks    the first allreduce, with every dense gradient
  P^  = orth(P)                              orthonormal basis of P's columns (QR, fp32)
  Q   = M^T P^;      Q <- mean over ranks    the second allreduce
  update   = P^ Q^T                          the same on every rank
  residual = M - update                      this rank's own M minus the mean update
  Q is kept for the next step                warm start: one step of subspace iteration per step

Why an allreduce suffices (the paper's sec. 3): every rank multiplies by the same Q and P^, so
mean(M_r orth(Q)) = mean(M_r) orth(Q) and mean(M_r^T P^) = mean(M_r)^T P^. The update is
P^ P^T mean(M_r), a rank-r projection of the mean M. So every output, every Q and the new
residuals' mean depend on the old residuals only through their mean: average_residuals uses it.

As PyTorch's powerSGD_hook (torch/distributed/algorithms/ddp_comm_hooks) and unlike Algorithm 1,
Q is orthonormalised before each step's P = M Q: the Q kept from the last step has the scale of
M, so M Q would have the scale of M squared, which underflows or overflows fp16 on the wire; with
orthonormal Q, P has the scale of M. Vectors (biases, BatchNorm) and matrices too small to save
bytes travel whole in the first allreduce and keep no state: their residual would be this rank's
gradient minus the mean, which averages to zero over ranks and so changes no update.

A mask (--compression=auto, comm/compression_choice.py) compresses only some of the planned
matrices; the others travel whole in the first allreduce, as vectors do. Every planned matrix
keeps its state (Q, residual) whatever the mask, so a run resumed with another choice restores
the checkpoint all the same, and the mask may change between worlds (--elastic with auto chooses
again in each: set_mask). A planned matrix sent whole sends its residual with it and keeps none
(gradient + residual, the residual then zero): nothing error feedback held back is lost when a
matrix stops being compressed, nor when the step sends every gradient whole (flushed: the plain
exchange the batch controller may choose instead, training/step.py).

The step is split from its state update (PowerSGD.__call__ returns the update, apply assigns
it) because the finite verdict of an fp16 step is taken on the exchanged gradients this module
produces (training/step.py): a skipped step must leave residuals and Qs as they were.
"""
import collections
import dataclasses
import math

import tensorflow as tf

# One step's new state, per planned matrix in gradient order: qs, the averaged Q (m, r) (kept where
# it was not compressed); residuals, this rank's M minus the update (n, m) (zero where the matrix
# was sent whole), empty without error feedback. Both fp32.
Update = collections.namedtuple("Update", "qs residuals")


def plan(shapes, rank: int, min_ratio: float = 2.0) -> list[tuple[int, int] | None]:
  """Per gradient shape, its matrix view (n, m) to compress at `rank`, or None to send it whole.

  The view keeps the last axis as columns, the output channels in TensorFlow's layouts: a conv
  kernel (H, W, I, O) is (H*W*I, O), a dense kernel (in, out) itself. A matrix is compressed
  when its n*m elements exceed min_ratio times P's and Q's rank*(n + m); vectors never are.
  min_ratio 2 is PyTorch's min_compression_rate: below it the two matmuls and the QR cost more
  than the bytes saved. min_ratio >= 1 also keeps rank < min(n, m) in every view, since
  rank*(n + m) >= n*m once rank >= min(n, m). Shapes must be static.
  """
  if rank < 1:
    raise ValueError(f"PowerSGD's rank must be at least 1, got {rank}.")
  if min_ratio < 1:
    raise ValueError(f"PowerSGD's min_ratio must be at least 1 (never more bytes than the gradient), got {min_ratio}.")
  views = []
  for shape in shapes:
    dims = [int(d) for d in shape]
    if len(dims) < 2:
      views.append(None)
      continue
    n, m = math.prod(dims[:-1]), dims[-1]
    views.append((n, m) if n * m > min_ratio * rank * (n + m) else None)
  return views


@dataclasses.dataclass(frozen=True)
class WireBytes:
  """Bytes one rank hands to the allreduces of one step."""
  first: int         # the P's and the dense gradients: the first allreduce
  second: int        # the Q's: the second allreduce, after the first
  uncompressed: int  # every gradient whole: one plain allreduce

  @property
  def compressed(self) -> int:
    return self.first + self.second


def wire_bytes(shapes, views, rank: int, itemsize: int) -> WireBytes:
  """The bytes of a plan (plan's views of `shapes` at `rank`) at itemsize bytes an element on
  the wire (4: fp32, 2: fp16) for P, Q and dense gradients alike, as the exchange's compression
  casts them all."""
  sizes = [math.prod(int(d) for d in s) for s in shapes]
  first = sum(view[0] * rank if view else size for size, view in zip(sizes, views))
  second = sum(view[1] * rank for view in views if view)
  return WireBytes(first * itemsize, second * itemsize, sum(sizes) * itemsize)


def orthonormal(matrix: tf.Tensor) -> tf.Tensor:
  """(n, r) float32 with orthonormal columns spanning `matrix`'s (n, r), r <= n.

  Householder QR rather than PyTorch's Gram-Schmidt with an epsilon: a zero or dependent column
  still yields an orthonormal column (a zero matrix gives the first r unit vectors), never a NaN,
  and orthogonality does not degrade as columns approach dependence. Deterministic, so the ranks,
  which all hold the same averaged P, get the same P^ (on like hosts).
  """
  return tf.linalg.qr(matrix)[0]


class PowerSGD(tf.Module):
  """powersgd(grads, allreduce_mean) -> (each gradient's approximate mean over ranks, Update).

  shapes: the gradients' static shapes in the order they will be passed (the model's trainable
  variables). rank: r, P's and Q's columns. error_feedback: keep each rank's residual (False:
  none kept, the paper's ablation). wire: dtype of P and Q in the allreduces (tf.float16 halves
  them); M, the QR, Q and residuals stay fp32. seed: Q's start, a stateless normal draw seeded
  (seed, gradient index), so every rank draws the same Q. mask: per gradient, whether to
  compress it where the plan can (None: every planned matrix). views: what is compressed;
  planned: the plan, whose every matrix keeps its state (Q, residual) whatever the mask.

  The variables (qs, residuals) are made here, outside any tf.function, and are this module's,
  so tf.train.Checkpoint(powersgd=...) saves and restores them. The steps are graph-friendly:
  Python loops over static lists only.
  """

  def __init__(self, shapes, rank: int = 1, min_ratio: float = 2.0, error_feedback: bool = True,
               wire: tf.DType = tf.float32, seed: int = 0, mask=None, name: str = "powersgd"):
    super().__init__(name=name)
    self.rank, self.error_feedback, self.wire = rank, error_feedback, wire
    self.planned = tuple(plan(shapes, rank, min_ratio))
    if mask is not None and len(mask) != len(self.planned):
      raise ValueError(f"PowerSGD's mask has {len(mask)} entries for {len(self.planned)} gradients.")
    planned = [(i, view) for i, view in enumerate(self.planned) if view]
    with self.name_scope:
      self.qs = [tf.Variable(tf.random.stateless_normal((m, rank), seed=(seed, i)), trainable=False, name=f"q_{i}")
                 for i, (n, m) in planned]
      self.residuals = [tf.Variable(tf.zeros((n, m)), trainable=False, name=f"residual_{i}")
                        for i, (n, m) in planned if error_feedback]
    self._planned_at = [i for i, _ in planned]  # slot -> gradient index
    self.set_mask(mask)

  def set_mask(self, mask=None) -> None:
    """Compress only where mask (per gradient) is true and the plan can (None: every planned
    matrix). Before the step is traced: the views are read when it is."""
    if mask is not None and len(mask) != len(self.planned):
      raise ValueError(f"PowerSGD's mask has {len(mask)} entries for {len(self.planned)} gradients.")
    keep = [True] * len(self.planned) if mask is None else mask
    self.views = tuple(view if k else None for view, k in zip(self.planned, keep))

  def __call__(self, grads, allreduce_mean):
    """One step. allreduce_mean(list of tensors) -> their means over ranks is called twice: the
    P's with the dense gradients, then the Q's, so each call's tensors fuse into few buffers."""
    grads = [tf.convert_to_tensor(g) for g in grads]
    ms, first = self.compute_p(grads)
    first = allreduce_mean(first)
    ps, second = self.compute_q(ms, first)
    return self.decompress(grads, ms, first, ps, allreduce_mean(second) if second else [])

  def compute_p(self, grads):
    """Phase 1: (ms, payload). ms[i]: gradient i's M, (n, m) fp32, or None when it is dense;
    payload[i]: its P = M orth(Q) in the wire dtype, or the dense gradient itself. Allreduce-mean
    the whole payload at once."""
    if len(grads) != len(self.views):
      raise ValueError(f"PowerSGD was planned for {len(self.views)} gradients, got {len(grads)}.")
    ms, payload = [], []
    for i, (g, view) in enumerate(zip(grads, self.views)):
      if view is None:
        ms.append(None)
        payload.append(self._with_residual(i, g))  # planned but sent whole: its residual goes with it
        continue
      slot = self._planned_at.index(i)
      m = tf.reshape(tf.cast(g, tf.float32), view)
      if self.error_feedback:
        m += self.residuals[slot]
      ms.append(m)
      payload.append(tf.cast(tf.matmul(m, orthonormal(self.qs[slot])), self.wire))
    return ms, payload

  def compute_q(self, ms, first):
    """Phase 2, given phase 1's payload averaged (`first`): (ps, payload). ps[i]: P^, the
    orthonormalised mean P (n, r) fp32, or None when dense; payload: Q = M^T P^ of each
    compressed gradient in the wire dtype, in gradient order. Allreduce-mean it at once."""
    ps, payload = [], []
    for m, p in zip(ms, first):
      if m is None:
        ps.append(None)
        continue
      p = orthonormal(tf.cast(p, tf.float32))
      ps.append(p)
      payload.append(tf.cast(tf.matmul(m, p, transpose_a=True), self.wire))
    return ps, payload

  def decompress(self, grads, ms, first, ps, second):
    """Phase 3, given both payloads averaged: (gradients, Update). Each compressed gradient is
    P^ Q^T in its own shape and dtype, each dense one its mean from `first`. Nothing is assigned:
    pass the Update to apply once the step is known to be taken."""
    second = iter(second)
    out, new = [], {}
    for i, (g, m, p, mean) in enumerate(zip(grads, ms, ps, first)):
      if m is None:
        out.append(mean)
        continue
      q = tf.cast(next(second), tf.float32)
      approx = tf.matmul(p, q, transpose_b=True)
      out.append(tf.cast(tf.reshape(approx, g.shape), g.dtype))
      new[i] = (q, m - approx)
    return out, self._update(new)

  def _with_residual(self, i: int, g, scale=None):
    """Gradient i with its residual added (a planned matrix sent whole; scale: the fp16 loss scale
    of g, whose residual is kept unscaled), or g as it is."""
    if i not in self._planned_at or not self.error_feedback:
      return g
    residual = tf.reshape(self.residuals[self._planned_at.index(i)], g.shape)
    if scale is not None:
      residual *= tf.cast(scale, tf.float32)
    return tf.cast(tf.cast(g, tf.float32) + residual, g.dtype)

  def flushed(self, grads, scale=None):
    """Every gradient to send whole, each planned matrix's residual added (the plain exchange's
    branch, training/step.py; scale: the gradients' fp16 loss scale), and the Update that keeps
    the Qs and zeroes the residuals sent."""
    return [self._with_residual(i, g, scale) for i, g in enumerate(grads)], self._update({})

  def _update(self, new: dict) -> Update:
    """An Update of every planned matrix: new[i] = (Q, residual) for those compressed this step,
    the kept Q and a zero residual (sent whole with its gradient) for the others."""
    qs, residuals = [], []
    for slot, i in enumerate(self._planned_at):
      q, residual = new.get(i, (self.qs[slot].read_value(), tf.zeros(self.planned[i])))
      qs.append(q)
      residuals.append(residual)
    return Update(qs, residuals if self.error_feedback else [])

  def state(self) -> Update:
    """The kept Qs and residuals as an Update."""
    return Update([q.read_value() for q in self.qs], [r.read_value() for r in self.residuals])

  def apply(self, update: Update) -> None:
    """Keep a taken step's Qs (warm start) and residuals; call it only for a step the optimizer
    applied (under the same tf.cond), so a skipped step leaves the state as it was."""
    for q, value in zip(self.qs, update.qs):
      q.assign(value)
    for residual, value in zip(self.residuals, update.residuals):
      residual.assign(value)

  def average_residuals(self, allreduce_mean) -> None:
    """Set every residual to its mean over ranks (a collective: every rank calls it), so every
    rank holds the same state and rank 0's checkpoint is every rank's. Changes no later update
    (up to rounding): they depend on the residuals only through their mean (module docstring)."""
    if self.residuals:
      for variable, mean in zip(self.residuals, allreduce_mean([r.read_value() for r in self.residuals])):
        variable.assign(mean)
