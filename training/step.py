"""The training and evaluation steps: the one definition that train.py, the
benchmarks and the multi-process checks all run.

One fp16/bf16/fp32 training step (Jia et al.'s order, optimizers/precision.py):

  forward -> loss -> scaled loss -> scaled grads (summed over K micro-batches
  with --accumulation_steps=K) -> exchange (comm/, the one place gradients
  cross ranks) -> unscale in fp32 -> one finite check -> update, or skip it
  everywhere

The finite verdict is taken on the exchanged gradients, identical on every
rank, and every rank's loss (agreed with the stop requests in one small
allreduce), so every rank takes the same branch. A skipped step in fp32 or
bf16 means the run diverged (train.py stops it); in fp16 it is an overflow
that lowers the loss scale.

With --compression=powersgd (comm/powersgd.py) the order from the exchange on is

  unscale in fp32 -> PowerSGD's two allreduces -> one finite check -> update
  and keep PowerSGD's new residuals and Qs, or skip both

unscaled first because the residuals carry over between steps while fp16's
scale moves. Both orders are in the one traced step, a tf.cond on `compressing()` (a variable
the run sets: --compression_start, or the batch controller's choice between the two); the plain
order under PowerSGD sends each residual with its gradient and keeps none (comm/powersgd.py).

The noise scale's squared norm of the mean gradient (B_big) is that of the exchanged gradients
in the plain order; PowerSGD's exchanged gradients are a low-rank approximation, so in the
compressed order it is estimated from a count sketch of every rank's own gradient (comm/sketch.py:
unbiased, one allreduce of 16 KB), every SKETCH_EVERY steps (a sketch of ResNet-50's 25.6 M
coordinates took 0.55 s here; the other steps report no noise-scale sample).
"""
import collections
import dataclasses
import functools
import statistics
import time
from typing import Callable

import keras
import tensorflow as tf

from comm import sketch
from optimizers import precision

# What a train step returns: loss, correct, finite, stop (below), and the two squared gradient
# norms of the noise scale (sq_small, sq_big: zero when not measured).
StepOut = collections.namedtuple("StepOut", "loss correct finite stop sq_small sq_big")
RANKS, MICRO = "ranks", "micro"  # which two gradients the noise scale compares (noise_sizes)
SKETCH_EVERY = 4  # compressed steps: the mean gradient's norm is sketched every this many (module docstring)

# The steps are traced without autograph: their control flow is written as tf.cond and tf.while_loop, so
# autograph's rewriting of every Python function a step calls (source to AST and back, then traced) only
# cost time: make train's first train step traced in 5.2-9.9 s with it and 1.8-3.2 s without (2 ranks on
# 2 cores, 2026-12-07, 5 launches; its first run 2.2-3.0 s either way). A Python `if` on a tensor fails at
# the trace.
traced = functools.partial(tf.function, autograph=False)


def noise_sizes(ranks: int, batch: int, accumulation_steps: int) -> tuple[str, int, int] | None:
  """(kind, B_small, B_big) of the gradient noise scale's two gradients (training/adaptive/noise_scale.py),
  or None when one rank without accumulation has one gradient only (pure).

  With ranks: each rank's own gradient (its K micro-batches) against the exchanged mean (the
  global batch). One rank with K > 1 micro-batches: a micro-batch's against their sum.
  """
  step_batch = batch * accumulation_steps
  if ranks > 1:
    return RANKS, step_batch, step_batch * ranks
  if accumulation_steps > 1:
    return MICRO, batch, step_batch
  return None


def squared_norm(grads) -> tf.Tensor:
  """float32 scalar: the sum of squares of every gradient, in fp32."""
  return tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float32))) for g in grads])


def correct_count(logits, labels, k: int = 1) -> tf.Tensor:
  """float32 scalar: how many labels are among the k highest logits (k=1: top-1 hits)."""
  if k == 1:
    hits = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels)
  else:
    hits = tf.math.in_top_k(labels, tf.cast(logits, tf.float32), k)
  return tf.reduce_sum(tf.cast(hits, tf.float32))


@dataclasses.dataclass(frozen=True)
class StepOptions:
  """What a train step does beyond forward, backward, the exchange and the update (make_train_step).

  label_smoothing: of the cross-entropy's targets. accumulation_steps: K micro-batches a step.
  agree(int32 vector) -> its max over ranks (train.py: one Horovod allreduce, which Horovod's
  coordinator fuses with the step's gradient traffic); None for a single process.

  noise: None, or noise_sizes' kind: the step also returns the squared norms of two gradients
  of different batch sizes, in fp32 on unscaled gradients (fp16's scale divided out), for the
  gradient noise scale (McCandlish et al. 2018): sq_big of the mean gradient over ranks (B_big),
  sq_small of each rank's own accumulated gradient averaged over ranks (RANKS; average(x) ->
  its mean over ranks, one small allreduce Horovod fuses with the gradients) or of each
  micro-batch's gradient averaged over the K (MICRO). About 3 flops a weight: under 1% of a
  step (make noise-scale's cost benchmark). identical_norms (AdaScale, whose LR every rank
  computes from them): sq_big averaged over ranks too, in a second small allreduce after the
  exchange. The ranks' exchanged gradients are equal bit for bit, but a sum over them need not
  be: TensorFlow's CPU reduction splits the work by the rank's thread count, which differs
  between unlike hosts, and LRs that differ in the last bit drift the replicas apart. A
  compressed step's sq_big is sketched (the module docstring), NaN on the steps between sketches
  (the noise scale skips a non-finite sample).

  powersgd (--compression=powersgd, or auto where it chose to compress): comm/powersgd.py's
  PowerSGD, whose step goes through exchange.compressed (comm's GradientExchange); its new
  residuals and Qs are kept only by a step whose update is applied. compressing() -> a scalar bool
  tensor, whether this step compresses (the run's variable, set by --compression_start and the
  batch controller: the same on every rank); None: every step does. step() -> the checkpointed
  step (int64), the sketch's hash seed and cadence with `seed`.
  """
  label_smoothing: float = 0.0
  accumulation_steps: int = 1
  agree: Callable | None = None
  noise: str | None = None
  average: Callable | None = None
  identical_norms: bool = False
  powersgd: object = None
  compressing: Callable | None = None
  step: Callable | None = None
  seed: int = 0


def make_train_step(model, optimizer, exchange, loss_scale, num_classes: int, *,
                    options: StepOptions = StepOptions()):
  """A tf.function train_step(images, labels, lr, stop=0) -> StepOut(loss, correct, finite, stop).

  images: (K * batch, H, W, C) in the model's compute dtype, K = options.accumulation_steps
  micro-batches of `batch` one after the other; labels: (K * batch,) int32; lr: float32 scalar
  assigned to the optimizer before the update; stop: int32 scalar, this rank's stop request
  (training/ending/signals.py, 0: none). Returns loss: this rank's mean loss over the K
  micro-batches (float32); correct: this rank's top-1 hits over all K * batch; finite: whether
  every rank's losses and the exchanged gradients were finite, so the update was applied (the
  same on every rank); stop: the largest stop request over all ranks (every rank stops after the
  same step); sq_small, sq_big: the noise scale's norms (StepOptions.noise).

  Gradient accumulation: each micro-batch runs forward and backward on its own (BatchNorm
  normalises over `batch` images, Goyal et al.'s fixed per-worker n), the gradients of the mean
  loss over the K * batch images are summed on the rank, and then cross ranks once: one exchange,
  one agreement, one update per step, so the bytes on the wire per image fall by K. One step is
  traced for one K: --batch_policy=adaptive keeps one per K it tries (training/shape.py), each as
  fast as the fixed-K step it is (a step for any K, its K read from the images, was ~11% slower in
  a side measurement). exchange(grads) -> grads is comm's GradientExchange, or any function of the
  same shape (identity: no ranks).
  """
  o = options
  variables = model.trainable_variables
  learning_rate = optimizer.learning_rate
  gradients = make_gradients(model, loss_scale, num_classes, o.label_smoothing, o.accumulation_steps,
                             micro_norms=o.noise == MICRO)
  exchanged = _make_exchanged(exchange, loss_scale, o)

  def unscaled(sq):
    """A squared norm of scaled gradients, unscaled (fp16: divided by the scale squared)."""
    return sq / tf.square(tf.cast(loss_scale.scale, tf.float32)) if loss_scale.enabled else sq

  @traced
  def train_step(images, labels, lr, stop=tf.constant(0)):
    loss, correct, bad, micro_sq, grads, micro_batches = gradients(images, labels)
    if o.noise == RANKS:  # this rank's own gradient, before the exchange: mean over ranks below
      sq_small = o.average(unscaled(squared_norm(grads)))
    elif o.noise == MICRO:  # each micro-batch's gradient of its mean loss is K x its share here
      sq_small = unscaled(micro_sq) * micro_batches
    else:
      sq_small = tf.constant(0.0)
    # One verdict for every rank: a stop request anywhere, a non-finite loss anywhere.
    codes = tf.stack([tf.cast(stop, tf.int32), bad])
    codes = o.agree(codes) if o.agree else codes
    grads, keep, sq_big = exchanged(grads)  # the one place gradients cross ranks
    if o.noise == RANKS and o.identical_norms:
      sq_big = o.average(sq_big)
    learning_rate.assign(lr)
    finite = tf.logical_and(precision.all_finite(grads), tf.equal(codes[1], 0))

    def apply():  # a skipped step leaves the weights and PowerSGD's residuals and Qs as they were
      optimizer.apply_gradients(zip(grads, variables))
      keep()
    finite = loss_scale.apply_if_finite(grads, apply, finite)
    return StepOut(loss, correct, finite, codes[0], sq_small, sq_big)

  return train_step


def _make_exchanged(exchange, loss_scale, o: StepOptions):
  """exchanged(grads): this rank's scaled gradients -> (their mean over ranks, unscaled; keep(), which
  keeps PowerSGD's new state, for the branch that applies the update; the mean's squared norm)."""
  def exact_norm(mean):
    return squared_norm(mean) if o.noise else tf.constant(0.0)

  def sketched_norm(grads):
    """The mean over ranks of these unscaled gradients' squared norm, sketched every SKETCH_EVERY steps."""
    if not o.noise:
      return tf.constant(0.0)
    if o.noise == MICRO:  # one rank: no ranks to average over, its accumulated gradient is the mean
      return squared_norm(grads)
    now = o.step() if o.step is not None else tf.constant(0, tf.int64)
    return tf.cond(tf.equal(now % SKETCH_EVERY, 0),
                   lambda: sketch.mean_squared_norm(grads, o.seed, now, o.average),
                   lambda: tf.constant(float("nan")))

  def compressed(grads):  # the residuals live in true-gradient units: unscaled first (module docstring)
    own = loss_scale.unscale(grads)
    mean, update = exchange.compressed(own, o.powersgd)
    return mean, update, sketched_norm(own)

  def plain(grads):  # every gradient whole, each residual sent with its own and zeroed
    sent, update = o.powersgd.flushed(grads, loss_scale.scale if loss_scale.enabled else None)
    mean = loss_scale.unscale(exchange(sent))
    return mean, update, exact_norm(mean)

  def exchanged(grads):
    # Unscale in fp32 before the optimizer: LARS's trust ratio must see true gradients.
    if o.powersgd is None:
      mean = loss_scale.unscale(exchange(grads))
      return mean, lambda: None, exact_norm(mean)
    if o.compressing is None:
      mean, update, sq_big = compressed(grads)
    else:  # both branches enter collectives: the choice is a variable every rank sets alike
      mean, update, sq_big = tf.cond(o.compressing(), lambda: compressed(grads), lambda: plain(grads))
    return mean, lambda: o.powersgd.apply(update), sq_big

  return exchanged


def make_gradients(model, loss_scale, num_classes: int, label_smoothing: float, k: int, micro_norms: bool):
  """gradients(images, labels) -> (mean loss, top-1 hits, non-finite loss as int32, the sum of
  the micro-batches' squared gradient norms (0 unless micro_norms), scaled gradients of the mean
  loss over all K micro-batches, K as float32): the rank's forward and backward passes of one step."""
  # One-hot targets, so label smoothing can apply; float32 logits -> fp32 loss.
  loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=label_smoothing)
  variables = model.trainable_variables

  def forward_backward(images, labels, k):
    """(loss, top-1 hits, non-finite loss as int32, scaled gradients of loss / K) of one micro-batch."""
    with tf.GradientTape() as tape:
      logits = model(images, training=True)
      loss = loss_fn(tf.one_hot(labels, num_classes), logits)
      scaled_loss = loss_scale.scale_loss(loss / k)  # fp16: keeps small gradients above underflow
    grads = tape.gradient(scaled_loss, variables)
    bad = tf.cast(tf.logical_not(tf.math.is_finite(loss)), tf.int32)
    return loss, correct_count(logits, labels), bad, grads

  def accumulated(images, labels):
    """forward_backward's results over the K micro-batches: mean loss, sums of the rest."""
    images = tf.reshape(images, [k, -1, *images.shape[1:]])
    labels = tf.reshape(labels, [k, -1])
    k_float = tf.constant(float(k))
    # A tf.while_loop (not K unrolled copies of the model in the graph): tracing stays one model's.
    def body(i, loss, correct, bad, sq, sums):
      l, c, b, grads = forward_backward(images[i], labels[i], k_float)
      sq = sq + squared_norm(grads) if micro_norms else sq
      return i + 1, loss + l, correct + c, tf.maximum(bad, b), sq, [s + g for s, g in zip(sums, grads)]
    zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
    _, loss, correct, bad, sq, grads = tf.while_loop(
        lambda i, *_: i < k, body,
        [tf.constant(0), tf.constant(0.0), tf.constant(0.0), tf.constant(0), tf.constant(0.0), zeros])
    return loss / k_float, correct, bad, sq, grads, k_float

  def single(images, labels):
    loss, correct, bad, grads = forward_backward(images, labels, 1)
    return loss, correct, bad, tf.constant(0.0), grads, tf.constant(1.0)

  return accumulated if k > 1 else single


def time_exchange(exchange, variables, repeats: int = 3) -> float:
  """Seconds of one exchange of gradients shaped as `variables`, alone: the median of `repeats`
  after a first (traced) one. A collective: every rank calls it. The batch controller's prior for
  the exchange before it has seen two batches (training/adaptive/batch_control.py)."""
  zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
  run = traced(lambda grads: tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in exchange(grads)]))
  run(zeros).numpy()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    run(zeros).numpy()  # a scalar of every output: the exchange has finished
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def time_compute(model, loss_scale, num_classes: int, micro_batch, repeats: int = 2) -> float:
  """Seconds of one micro-batch's forward and backward alone (no exchange, no update): the median of
  `repeats` after a first (traced) one, on random images of micro_batch's spec (batch, H, W, C).
  Local work, no collective. The batch controller's prior for a micro-batch's cost from a world's
  start (training/adaptive/goodput.py): with none, its first world priced computing as free and jumped to
  the largest batch over a slow link."""
  gradients = traced(make_gradients(model, loss_scale, num_classes, 0.0, 1, micro_norms=False))
  images = tf.random.normal(micro_batch.shape, dtype=micro_batch.dtype)
  labels = tf.zeros([micro_batch.shape[0]], tf.int32)
  run = lambda: float(gradients(images, labels)[0])  # noqa: E731  (the loss read: the step has finished)
  run()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def host_step(train_step):
  """train_step as the loop calls it (training/loop.py): the LR a Python float, the stop code an int."""
  return lambda images, labels, lr, stop: train_step(images, labels, tf.constant(lr, tf.float32),
                                                     tf.constant(stop, tf.int32))


def make_eval_step(model):
  """eval_step(images, labels) -> float32 (4,): [loss sum, top-1 hits, top-5 hits, count].

  Sums, not means, so a global figure is one allreduce of sums over ranks
  (not an average of rank averages, which weighs a rank's short last batch wrongly).
  Traced once, for any batch size: a split's short last batch runs the same graph instead of
  tracing a second one at the run's first evaluation (EvalStep).
  """

  @traced
  def sums(images, labels):
    logits = model(images, training=False)
    loss = tf.reduce_sum(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    return tf.stack([loss, correct_count(logits, labels), correct_count(logits, labels, k=5),
                     tf.cast(tf.size(labels), tf.float32)])

  return EvalStep(sums)


class EvalStep:
  """A tf.function traced once for batches of any size: the batch dimension of its signature is
  left open, the rest is the batch's (another image size or dtype traces once more)."""

  def __init__(self, fn):
    self.fn, self.traced = fn, {}

  def __call__(self, images, labels):
    specs = tuple(tf.TensorSpec([None, *x.shape[1:]], x.dtype) for x in (images, labels))
    if specs not in self.traced:
      self.traced[specs] = self.fn.get_concrete_function(*specs)
    return self.traced[specs](images, labels)
