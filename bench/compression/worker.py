"""One speed launch of bench-compression, run by every rank under mpirun on the emulated cluster;
rank 0 writes what it measured to --out.

ResNet-50 at 64x64 on a synthetic batch of 16 per rank (bench-scaling's training rows), one
model and optimizer, and per variant (variants.SPEED_VARIANTS) train.py's own step
(training/step.py) with that compression as comm/exchange.make_compression sets it up, every
step compressing. Per variant, the slowest rank's median of:

  step_s        one training step
  exchange_s    the exchange alone on the step's gradients (as training/step.time_exchange
                times it): PowerSGD's encode, decode and state update (the new residuals and
                Qs kept) included
  encode_s      PowerSGD's own work alone, its allreduces left out (PowerSGD rows only)

with the bytes each host sent on its link during each (counted by the kernel, /sys/.../tx_bytes,
TCP headers and Horovod's negotiation included). local_step_s is the same step with an identity
exchange: the compute, which every variant shares. The prediction beside each row prices the
exchange's own plan (its buckets, both calls of PowerSGD) by the cost model the launch probed
(comm/probe.measure_flat, auto's), plus PowerSGD's encode as auto measures it (probe.encode_seconds).
"""
import json
import time
from statistics import median

import keras
import numpy as np
import tensorflow as tf

import comm
from bench.compression import variants as V
from bench.scaling import timing
from bench.scaling.settings import TRAIN_BATCH, TRAIN_MODELS
from bench.harness.train_step import default_optimizer
from comm import cost_model, probe
from comm.exchange import cost_of, make_compression, make_gradient_exchange
from models import build_model
from optimizers import precision
from progress import emit
from training.step import StepOptions, make_train_step

MODEL, CLASSES, SHAPE = TRAIN_MODELS[1]  # resnet50, 1000 classes, 64x64x3
# Every distinct matrix measured (start-up's 3 s budget leaves the rest unmeasured, inf): 4 ranks
# on the 2 cores take several times the 2.0 s one rank takes for ResNet-50's 21 at rank 4.
ENCODE_BUDGET_S = 300.0


def predicted_exchange_s(plan: list[dict], model, world) -> float:
  """Seconds the cost model gives the exchange's plan: every bucket of every call, as sent."""
  return sum(cost_model.bucket_time(model, world, b["algorithm"], b["bytes"], b["tensors"]) for b in plan)


def identity(grads):
  """The exchange of one rank alone: the step without communication (its compute)."""
  return grads


def checksum(tensors):
  """One scalar of every tensor: fetching it waits for all of them (a timed call has finished)."""
  return tf.add_n([tf.reduce_sum(tf.cast(t, tf.float32)) for t in tensors])


def applied(compressor, out, update):
  """checksum(out) after compressor.apply(update), as the training step keeps them: without the
  apply, tf.function prunes the new residuals (M - P Q^T of every matrix), which nothing else
  reads, and the exchange and encode timed would leave out work every step does (and
  probe.encode_seconds, the prediction, counts)."""
  compressor.apply(update)
  return checksum(out)


def timed(hvd, iface: str, fn, repeats: int) -> tuple[list[float], list[int]]:
  """(seconds, bytes this host sent) of each of `repeats` calls of fn, each after a sync."""
  seconds, sent = [], []
  for _ in range(repeats):
    timing.sync(hvd)
    before, start = timing.link_bytes(iface), time.perf_counter()
    fn()
    seconds.append(time.perf_counter() - start)
    sent.append(timing.link_bytes(iface) - before)
  return seconds, sent


def run(args) -> None:
  """The launch named args.launch: the local step, then every variant of args.variants (none on one
  rank); rank 0 writes args.out."""
  import horovod.tensorflow as hvd
  world = comm.init(hvd)
  tf.config.threading.set_intra_op_parallelism_threads(max(1, 2 // world.size))  # 2 cores, shared
  keras.utils.set_random_seed(0)
  net = build_model(MODEL, CLASSES, SHAPE)
  optimizer, loss_scale = default_optimizer(net), precision.for_precision("fp32")
  rng = np.random.default_rng(world.rank)
  images = tf.constant(rng.standard_normal((TRAIN_BATCH, *SHAPE)).astype(np.float32))
  labels = tf.constant(rng.integers(0, CLASSES, TRAIN_BATCH).astype(np.int32))
  grads = [tf.constant(rng.standard_normal(v.shape).astype(np.float32)) for v in net.trainable_variables]
  lr = tf.constant(0.01)  # the images are noise: a small LR keeps the timed steps finite
  result = {"launch": args.launch, "ranks": world.size, "model": MODEL, "image": list(SHAPE),
            "batch_per_rank": TRAIN_BATCH, "steps": args.steps, "allreduce": V.ALLREDUCE,
            "threshold_mb": V.THRESHOLD_MB}
  local = make_train_step(net, optimizer, identity, loss_scale, CLASSES)
  local(images, labels, lr)
  seconds, _ = timed(hvd, args.iface, lambda: float(local(images, labels, lr)[0]), args.steps)
  result["local_step_s"] = median(timing.slowest(hvd, seconds))
  names = [v for v in args.variants.split(",") if v] if world.size > 1 else []
  # The model every row is priced by: flat's one allreduce over every rank, probed once here.
  model = cost_of(hvd, V.comm_config("none"), world) if names else None
  rows = []
  for name in names:
    rows.append(measure(hvd, world, name, net, optimizer, loss_scale, images, labels, grads, lr, model, args))
    if world.rank == 0:
      r = rows[-1]
      emit(f"{args.launch} {name}: step {r['step_s'] * 1e3:.0f} ms, exchange {r['exchange_s'] * 1e3:.0f} ms "
           f"(predicted {r['predicted_exchange_s'] * 1e3:.0f}), {r['step_link_bytes'] / 2 ** 20:.2f} MB/step on "
           f"the link (local step {result['local_step_s'] * 1e3:.0f} ms)")
  result["rows"] = rows
  if model is not None:
    result["cost_model"] = {"flat_call_alpha_us": model.flat_call.alpha * 1e6 if model.flat_call else None,
                            "flat_call_gbps": model.flat_call.gbps if model.flat_call else None}
  if world.rank == 0:
    with open(args.out, "w") as fh:
      json.dump(result, fh, indent=1)


def measure(hvd, world, name, net, optimizer, loss_scale, images, labels, grads, lr, model, args) -> dict:
  """One variant's row (module docstring); a collective: every rank calls it with the same name."""
  config = V.comm_config(name)
  compression = make_compression(hvd, config, world, net.trainable_variables, seed=0)
  exchange = make_gradient_exchange(hvd, compression.config, world, model=compression.cost)
  compressor = compression.powersgd
  step = make_train_step(net, optimizer, exchange, loss_scale, CLASSES, options=StepOptions(powersgd=compressor))

  @tf.function
  def alone(g):
    if compressor is None:
      return checksum(exchange(g))
    return applied(compressor, *exchange.compressed(g, compressor))

  step(images, labels, lr)  # trace and warm up
  alone(grads).numpy()
  step_times, step_sent = timed(hvd, args.iface, lambda: float(step(images, labels, lr)[0]), args.steps)
  exchange_times, exchange_sent = timed(hvd, args.iface, lambda: alone(grads).numpy(), args.steps)
  row = {"variant": name, "compression": compression.config.compression, "summary": compression.summary,
         "step_s": median(timing.slowest(hvd, step_times)),
         "exchange_s": median(timing.slowest(hvd, exchange_times)),
         "step_link_bytes": timing.host_link_mb(hvd, world, int(median(step_sent))) * 2 ** 20,
         "exchange_link_bytes": timing.host_link_mb(hvd, world, int(median(exchange_sent))) * 2 ** 20,
         "payload_bytes": sum(b["bytes"] for b in exchange.plan),
         "buckets": len(exchange.plan), "predicted_collectives_s": predicted_exchange_s(exchange.plan, model, world),
         "encode_s": None, "predicted_encode_s": 0.0, "layers_compressed": 0}
  if compressor is not None:

    @tf.function
    def encode(g):  # PowerSGD's step with each allreduce-mean one rank's: itself
      return applied(compressor, *compressor(g, identity))
    encode(grads).numpy()
    seconds, _ = timed(hvd, args.iface, lambda: encode(grads).numpy(), args.steps)
    # auto's own figures: per matrix, the slowest rank's (comm/exchange.make_compression).
    own = probe.encode_seconds(compressor.views, compressor.rank, compressor.wire, compressor.error_feedback,
                               budget_s=ENCODE_BUDGET_S)
    agreed = hvd.allreduce(tf.constant(own, tf.float64), op=hvd.Max, name=f"encode_{name}").numpy()
    row.update(encode_s=median(timing.slowest(hvd, seconds)), predicted_encode_s=float(np.sum(agreed)),
               layers_compressed=sum(v is not None for v in compressor.views))
  row["predicted_exchange_s"] = row["predicted_collectives_s"] + row["predicted_encode_s"]
  return row
