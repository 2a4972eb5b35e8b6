"""One rank of a make bench-comm launch (`python -m bench.allreduce --worker` under horovodrun): rank 0
records, in order, one full exchange of the gradient sets per algorithm, the single-buffer sweep, and
(-np 2 MPI only) how much exchange time train.py's own training step hides. TensorFlow and Horovod
are imported in the ranks only."""
import json
import sys
import time
from statistics import median

from bench.harness.train_step import NOTE
from progress import emit

KB, MB = 1 << 10, 1 << 20
SIZES = [4 * KB, 64 * KB, 1 * MB, 16 * MB, 256 * MB]
THRESHOLD_MB = 32.0


def say(line: str) -> None:
  """A worker's line on stdout in one write (mpirun tags each write; print splits the newline)."""
  emit(line, sys.stdout)


def timed_rounds(fns: dict, repeats: int, hvd) -> dict:
  """Median seconds per name: one warm-up each, then `repeats` rounds taking turns.

  A barrier-like small allreduce before each timing starts every rank together.
  """
  import tensorflow as tf
  sync = tf.zeros([1])
  for fn in fns.values():
    fn()
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      hvd.allreduce(sync, name="bench_sync").numpy()
      start = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - start)
  return {name: median(t) for name, t in times.items()}


def record(out, kind, algorithm, args, world, nbytes, seconds, **extra):
  algbw = nbytes / seconds / 1e9
  row = {"kind": kind, "algorithm": algorithm, "controller": "gloo" if args.gloo else "mpi",
         "ranks": world.size, "ranks_per_node": world.local_size, "bytes": int(nbytes),
         "seconds": seconds, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (world.size - 1) / world.size, **extra}
  out.append(row)
  if world.is_chief:
    with open(args.out, "w") as fh:  # after every figure: a stopped launch keeps what it measured
      json.dump(out, fh)
    label = extra.get("gradient_set") or f"{nbytes / MB:9.3f} MB"
    say(f"{row['controller']} np{world.size} rpn{world.local_size} {kind:9s} {label:>12s} {algorithm:14s} "
        f"{seconds * 1e3:9.2f} ms  algbw {algbw:7.3f}  busbw {row['busbw_GBps']:7.3f} GB/s")


def worker(args):
  import horovod.tensorflow as hvd
  import numpy as np
  import tensorflow as tf

  import comm
  from models import gradient_sets
  from comm.exchange import make_gradient_exchange
  from flags.config import CommConfig

  world = comm.init(hvd, args.ranks_per_node)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  mpi = None
  if not args.gloo:
    from mpi4py import MPI
    mpi = MPI.COMM_WORLD
  out = []
  exchanges = {name: make_gradient_exchange(hvd, config, world) for name, config in {
      "horovod": CommConfig("horovod"),
      "flat": CommConfig("flat", THRESHOLD_MB),
      "hier": CommConfig("hier", THRESHOLD_MB),
      "hybrid": CommConfig("hybrid", THRESHOLD_MB),
      "flat+fp16": CommConfig("flat", THRESHOLD_MB, compression="fp16"),
      # One bucket per gradient set: one grouped allreduce of every gradient.
      "flat 128MB": CommConfig("flat", 128.0),
  }.items()}
  if world.is_chief:
    m = exchanges["hybrid"].model
    say(f"hybrid cost model (probe): in node {m.intra.alpha * 1e6:.0f} us + {m.intra.gbps:.2f} GB/s, "
        f"across nodes {m.inter.alpha * 1e6:.0f} us + {m.inter.gbps:.2f} GB/s")

  def floor(buffers):
    results = [np.empty_like(b) for b in buffers]
    return lambda: [mpi.Allreduce(b, r) for b, r in zip(buffers, results)]

  if "gradients" in args.modes:
    for model in ("resnet50", "alexnet"):
      shapes = hvd.broadcast_object(gradient_sets.shapes(model) if world.is_chief else None)
      grads = [tf.ones(s, tf.float32) for s in shapes]
      nbytes = 4 * sum(int(np.prod(s)) for s in shapes)
      fns = {name: (lambda f=tf.function(e): [g.numpy() for g in f(grads)]) for name, e in exchanges.items()}
      if mpi:
        fns["mpi4py"] = floor([np.ones(nbytes // 4, np.float32)])
      results = timed_rounds(fns, 5, hvd)
      for name, seconds in results.items():
        plan = exchanges[name].plan if name in exchanges else []
        record(out, "gradients", name, args, world, nbytes, seconds, gradient_set=model,
               buckets=len(plan), plan=[p["algorithm"] for p in plan])
      best = min(("flat", "hier", "hybrid", "flat 128MB"), key=results.get)
      if world.is_chief:
        say(f"RATIO {model} np{world.size} rpn{world.local_size} {'gloo' if args.gloo else 'mpi'}: "
            f"horovod / {best} = {results['horovod'] / results[best]:.3f} "
            f"(fp32; flat+fp16: {results['horovod'] / results['flat+fp16']:.3f})")
      del grads

  if "sweep" in args.modes:
    for nbytes in SIZES:
      x = tf.ones([nbytes // 4], tf.float32)
      fns = {name: (lambda f=tf.function(exchanges[name]): f([x])[0].numpy()) for name in ("horovod", "hier")}
      if mpi:
        fns["mpi4py"] = floor([np.ones(nbytes // 4, np.float32)])
      repeats = 5 if nbytes <= 16 * MB else 1
      for name, seconds in timed_rounds(fns, repeats, hvd).items():
        record(out, "sweep", name, args, world, nbytes, seconds)

  if "overlap" in args.modes:
    overlap(args, world, hvd, exchanges)


def held(grads):
  """The gradients, each released only once all of them exist: an exchange of these starts after backward."""
  import tensorflow as tf
  with tf.control_dependencies(grads):
    return [tf.identity(g) for g in grads]


def overlap(args, world, hvd, exchanges):
  """How much of the exchange a training step hides (Goyal et al.: allreduce as gradients appear).

  ResNet-50 at 64x64, batch 4 per rank (so compute is short enough to time
  on a busy CPU; the gradients are the full 25.6 M). The step is train.py's own
  (training/step.py, with train.py's default optimizer), so every time includes
  the update. Times: compute (the step with an identity exchange), exchange
  alone, the step with the exchange free to start per bucket ("as ready"), and
  the step with every collective held until all gradients exist ("after
  backward": the same step, its exchange given held(grads)).
  hidden = (compute + exchange - step) / exchange.
  """
  import keras
  import tensorflow as tf

  from bench.harness.train_step import default_optimizer
  from comm.exchange import make_gradient_exchange
  from flags.config import CommConfig
  from models import build_model
  from optimizers import precision
  from training.step import make_train_step

  keras.utils.set_random_seed(0)
  net = build_model("resnet50", 1000, (64, 64, 3))
  optimizer = default_optimizer(net)
  loss_scale = precision.for_precision("fp32")
  images = tf.random.uniform([4, 64, 64, 3])
  labels = tf.zeros([4], tf.int32)
  lr = tf.constant(0.001)  # noise images: a small LR keeps the timed steps finite
  if world.is_chief:
    say(f"OVERLAP step: {NOTE}")

  def step_fn(exchange):
    step = make_train_step(net, optimizer, exchange, loss_scale, num_classes=1000)
    return lambda: step(images, labels, lr)[0].numpy()  # the update runs before the step returns

  rows = []
  grads = [tf.ones(v.shape) for v in net.trainable_variables]
  for name, config in [("horovod", CommConfig("horovod")), ("flat 4MB", CommConfig("flat", 4.0)),
                       ("flat 32MB", CommConfig("flat", 32.0))]:
    exchange = make_gradient_exchange(hvd, config, world)
    alone = tf.function(exchange)
    t = timed_rounds({"compute": step_fn(lambda g: g), "exchange": lambda: [g.numpy() for g in alone(grads)],
                      "as ready": step_fn(exchange), "after backward": step_fn(lambda g, e=exchange: e(held(g)))},
                     3, hvd)
    for variant in ("as ready", "after backward"):
      hidden = (t["compute"] + t["exchange"] - t[variant]) / t["exchange"]
      row = {"kind": "overlap", "algorithm": name, "variant": variant, "controller": "gloo" if args.gloo else "mpi",
             "ranks": world.size, "ranks_per_node": world.local_size, "compute_s": t["compute"],
             "exchange_s": t["exchange"], "step_s": t[variant], "hidden_fraction": hidden,
             "train_step": "training/step.py"}
      rows.append(row)
      if world.is_chief:
        with open(args.out + ".overlap", "w") as fh:
          json.dump(rows, fh)
        say(f"OVERLAP np{world.size} {name:9s} {variant:14s}: compute {t['compute'] * 1e3:.0f} ms, exchange "
            f"{t['exchange'] * 1e3:.0f} ms, step {t[variant] * 1e3:.0f} ms, hidden {hidden:.0%}")
  return rows
