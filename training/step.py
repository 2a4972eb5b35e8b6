"""The training and evaluation steps: the one definition that train.py, the
benchmarks and the multi-process checks all run.

One fp16/bf16/fp32 training step (Jia et al.'s order, optimizers/precision.py):

  forward -> loss -> scaled loss -> scaled grads -> exchange (comm/, the one
  place gradients cross ranks) -> unscale in fp32 -> one finite check ->
  update, or skip it everywhere

The finite verdict is taken on the exchanged gradients, identical on every
rank, and every rank's loss (agreed with the stop requests in one small
allreduce), so every rank takes the same branch. A skipped step in fp32 or
bf16 means the run diverged (train.py stops it); in fp16 it is an overflow
that lowers the loss scale.
"""
import keras
import tensorflow as tf

from optimizers import precision


def correct_count(logits, labels, k: int = 1) -> tf.Tensor:
  """float32 scalar: how many labels are among the k highest logits (k=1: top-1 hits)."""
  if k == 1:
    hits = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels)
  else:
    hits = tf.math.in_top_k(labels, tf.cast(logits, tf.float32), k)
  return tf.reduce_sum(tf.cast(hits, tf.float32))


def make_train_step(model, optimizer, exchange, loss_scale, num_classes: int, label_smoothing: float = 0.0,
                    agree=None):
  """A tf.function train_step(images, labels, lr, stop=0) -> (loss, correct, finite, stop).

  images: (batch, H, W, C) in the model's compute dtype; labels: (batch,)
  int32; lr: float32 scalar assigned to the optimizer before the update;
  stop: int32 scalar, this rank's stop request (training/signals.py, 0: none).
  Returns loss: this rank's mean loss (float32); correct: this rank's top-1
  hits; finite: whether every rank's loss and the exchanged gradients were
  finite, so the update was applied (the same on every rank); stop: the
  largest stop request over all ranks (every rank stops after the same step).

  exchange(grads) -> grads is comm's GradientExchange, or any function of the
  same shape (identity: no ranks). agree(int32 vector) -> its max over ranks
  (train.py: one Horovod allreduce, which Horovod's coordinator fuses with the
  step's gradient traffic); None for a single process.
  """
  # One-hot targets, so label smoothing can apply; float32 logits -> fp32 loss.
  loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=label_smoothing)
  variables = model.trainable_variables
  learning_rate = optimizer.learning_rate

  @tf.function
  def train_step(images, labels, lr, stop=tf.constant(0)):
    with tf.GradientTape() as tape:
      logits = model(images, training=True)
      loss = loss_fn(tf.one_hot(labels, num_classes), logits)
      scaled_loss = loss_scale.scale_loss(loss)  # fp16: keeps small gradients above underflow
    # One verdict for every rank: a stop request anywhere, a non-finite loss anywhere.
    codes = tf.stack([tf.cast(stop, tf.int32), tf.cast(tf.logical_not(tf.math.is_finite(loss)), tf.int32)])
    codes = agree(codes) if agree else codes
    grads = tape.gradient(scaled_loss, variables)
    grads = exchange(grads)  # the one place gradients cross ranks
    # Unscale in fp32 before the optimizer: LARS's trust ratio must see true gradients.
    grads = loss_scale.unscale(grads)
    learning_rate.assign(lr)
    finite = tf.logical_and(precision.all_finite(grads), tf.equal(codes[1], 0))
    finite = loss_scale.apply_if_finite(grads, lambda: optimizer.apply_gradients(zip(grads, variables)), finite)
    return loss, correct_count(logits, labels), finite, codes[0]

  return train_step


def make_eval_step(model):
  """A tf.function eval_step(images, labels) -> float32 (4,): [loss sum, top-1 hits, top-5 hits, count].

  Sums, not means, so a global figure is one allreduce of sums over ranks
  (not an average of rank averages, which weighs a rank's short last batch wrongly).
  """

  @tf.function
  def eval_step(images, labels):
    logits = model(images, training=False)
    loss = tf.reduce_sum(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    return tf.stack([loss, correct_count(logits, labels), correct_count(logits, labels, k=5),
                     tf.cast(tf.size(labels), tf.float32)])

  return eval_step
