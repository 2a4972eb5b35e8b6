"""checks.py evaluation, on 2 ranks: training.evaluation.held_out's top-1, top-5 and loss are counts
over every rank's examples, not a mean of rank means. Rank 0 holds 3 examples, each labelled
with the model's first choice; rank 1 holds 9 in batches of 4 (a short last batch), 3 labelled
with its second choice and 6 with its last: globally 3 of 12 top-1 hits and 6 of 12 top-5 hits
(a mean of rank means would say 0.5 and 0.67). With the stop agreement between batches (Horovod's
Max allreduce a batch) the totals are the same though rank 0 runs out of batches first, and a stop
asked on rank 1 alone at its second batch ends the evaluation on both ranks there."""
import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

from comm import sync
from training import evaluation
from training.step import make_eval_step


def run(world, args):
  """Raises AssertionError when the totals are not counts over both ranks; no args."""
  assert world.size == 2 and not args, f"evaluation takes no arguments and 2 ranks, not {world.size}"
  keras.utils.set_random_seed(world.rank)  # different weights until the broadcast
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(10)])
  sync.broadcast_state(hvd, model.variables)
  count = 3 if world.rank == 0 else 9
  images = np.random.default_rng(10 + world.rank).standard_normal((count, 6)).astype(np.float32)
  ranking = np.argsort(-model(images).numpy(), axis=1)  # classes from the first choice to the last
  choice = [0] * 3 if world.rank == 0 else [1] * 3 + [9] * 6
  labels = ranking[np.arange(count), choice].astype(np.int32)
  dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(4)

  held = evaluation.held_out(make_eval_step(model), dataset,
                             lambda sums: hvd.allreduce(sums, op=hvd.Sum, name="eval_totals"))
  assert held.count == 12 and held.top1 == 3 / 12 and held.top5 == 6 / 12, held
  # The loss: the mean over all 12 examples, from every rank's logits gathered here.
  logits = hvd.allgather(model(images)).numpy().astype(np.float64)
  every = hvd.allgather(tf.constant(labels)).numpy()
  log_softmax = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
      - logits.max(1, keepdims=True)
  np.testing.assert_allclose(held.loss, -log_softmax[np.arange(12), every].mean(), rtol=1e-5)

  agree = lambda codes: hvd.allreduce(codes, op=hvd.Max, name="eval_stop")  # noqa: E731  (train.py's)
  agreed = evaluation.held_out(make_eval_step(model), dataset,
                               lambda sums: hvd.allreduce(sums, op=hvd.Sum, name="eval_totals"), agree=agree)
  assert agreed == held, (agreed, held)
  asked = []

  def stop_code():  # rank 1's request arrives during its first batch; rank 0 is never asked
    asked.append(len(asked))
    return 10 if world.rank == 1 and len(asked) >= 2 else 0
  batches = []
  try:
    evaluation.held_out(make_eval_step(model), dataset, lambda sums: hvd.allreduce(sums, op=hvd.Sum, name="x"),
                        on_batch=lambda: batches.append(1), agree=agree, stop_code=stop_code)
  except evaluation.Stopped as stop:
    assert stop.code == 10 and len(batches) == 1, (stop.code, batches)
  else:
    raise AssertionError(f"rank {world.rank}: the evaluation went on past a stop agreed between its batches")
  hvd.allreduce(tf.zeros([]), name="after_the_stop")  # both left at the same collective: none is pending
