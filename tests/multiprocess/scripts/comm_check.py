"""checks.py comm [MODELS]: every algorithm of the gradient exchange equals the numpy mean, on
the world the launch laid out (checks.py --ranks_per_node):
  1. horovod, flat, hier, hybrid (probed, and a given cost model that mixes
     flat and hier), with and without fp16 compression: fp32, bf16 and fp16
     tensors of odd sizes, scalars and empty tensors equal the numpy mean;
  2. the full gradient lists of MODELS (default resnet50,alexnet), each algorithm;
  3. every rank holds the same plan;
  4. three SGD steps with each algorithm leave the weights `horovod` leaves.
"""
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from comm.exchange import make_gradient_exchange
from flags.config import CommConfig
from models import gradient_sets
from optimizers import precision
from training.step import make_train_step

SMALL = [((), "float32"), ((1,), "float32"), ((7,), "float32"), ((3, 5), "float32"), ((0,), "float32"),
         ((1001,), "float32"), ((3, 3, 3, 17), "float32"), ((), "float16"), ((13,), "float16"),
         ((0, 3), "float16"), ((257,), "float16"), ((), "bfloat16"), ((11, 3), "bfloat16"),
         ((0,), "bfloat16"), ((999,), "bfloat16"), ((64, 10), "float32")]
# Thresholds small enough that the small list spans several buckets and the
# gradient sets many; the given cost model (a ring flat, as Gloo's or NCCL's, over a slow
# host link) makes big buckets hier, small ones flat.
SETTINGS = [
    CommConfig("horovod"), CommConfig("horovod", compression="fp16"),
    CommConfig("flat", fusion_threshold_mb=0.002), CommConfig("flat", fusion_threshold_mb=0.002, compression="fp16"),
    CommConfig("hier", fusion_threshold_mb=0.002), CommConfig("hier", fusion_threshold_mb=0.002, compression="fp16"),
    CommConfig("hybrid", fusion_threshold_mb=0.002),
    CommConfig("hybrid", fusion_threshold_mb=0.002, hybrid_cost="500,100,1000,0.001,ring"),
]
# A model's full gradient list in about BIG_BUCKETS buckets (ResNet-50's 97.5 MB in 16 MB ones).
BIG_BUCKETS = 6


def big_settings(shapes):
  mb = sum(int(np.prod(s)) for s in shapes) * 4 / 2**20 / BIG_BUCKETS
  return [CommConfig("horovod")] + [CommConfig(a, fusion_threshold_mb=mb) for a in ("flat", "hier", "hybrid")]

TOLERANCE = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 8e-3}


def rank_inputs(rank):
  rng = np.random.default_rng(100 + rank)
  return [rng.standard_normal(s).astype(np.float32) for s, _ in SMALL]


def check_mean(name, got, want, dtype, compression="none"):
  tol = TOLERANCE["float16" if compression == "fp16" and dtype == "float32" else dtype]
  assert got.shape == want.shape, (name, got.shape, want.shape)
  assert got.dtype.name == dtype, (name, got.dtype.name, dtype)
  np.testing.assert_allclose(tf.cast(got, tf.float64).numpy(), want, rtol=tol, atol=tol, err_msg=name)


def same_everywhere(value) -> bool:
  gathered = hvd.allgather_object(value)
  return all(g == gathered[0] for g in gathered)


def progress(world, what):
  if world.is_chief:
    print(f"checking {what}", file=sys.stderr, flush=True)


def run(world, args):
  """Raises AssertionError naming the algorithm and tensor that is not the mean; args: [MODELS]."""
  rank, size = world.rank, world.size
  print(f"rank {rank}: local {world.local_rank}/{world.local_size} node {world.cross_rank}/{world.cross_size}", flush=True)

  # 1 + 3: small tensors of every dtype. Inputs are exact in every dtype
  # (quarters), so the reference is the exact mean of what each rank holds.
  want = [np.mean([np.round(x * 4) / 4 for x in [rank_inputs(r)[i] for r in range(size)]], axis=0, dtype=np.float64)
          for i in range(len(SMALL))]
  mine = [tf.cast(np.round(x * 4) / 4, dt) for x, (_, dt) in zip(rank_inputs(rank), SMALL)]
  for config in SETTINGS:
    progress(world, config)
    exchange = make_gradient_exchange(hvd, config, world)
    got = tf.function(exchange)(mine)
    for (shape, dt), g, w in zip(SMALL, got, want):
      check_mean(f"{config} {shape} {dt}", g, w, dt, config.compression)
    assert same_everywhere(exchange.plan), config
    if config.allreduce != "horovod":
      assert len(exchange.plan) > 3, exchange.plan
    if config.hybrid_cost != "probe" and world.local_size > 1 and world.cross_size > 1:
      assert {p["algorithm"] for p in exchange.plan} == {"flat", "hier"}, exchange.plan

  # 2: the full gradient lists. Whole numbers in [-8, 8] plus the rank, so
  # every sum and the mean (base + (size - 1) / 2) are exact in float32 and the
  # check is equality, cheap enough for 86 M elements per algorithm.
  for model in (args[0] if args else "resnet50,alexnet").split(","):
    shapes = hvd.broadcast_object(gradient_sets.shapes(model) if rank == 0 else None)
    base = [((np.arange(np.prod(s), dtype=np.int64) * 7919 + i) % 17 - 8).astype(np.float32).reshape(s)
            for i, s in enumerate(shapes)]
    mine = [tf.constant(b + rank) for b in base]
    for config in big_settings(shapes):
      progress(world, f"{model} {config.allreduce}")
      exchange = make_gradient_exchange(hvd, config, world)
      got = tf.function(exchange)(mine)
      for i, (g, b) in enumerate(zip(got, base)):
        assert g.shape == b.shape and np.array_equal(g.numpy(), b + np.float32((size - 1) / 2)), (model, config, i)
      assert same_everywhere(exchange.plan), config
    del base, mine, got

  # 4: SGD steps on per-rank data end at the same weights whatever the algorithm.
  # A small conv + BatchNorm + dense net: retracing it per algorithm is cheap.
  tf.keras.utils.set_random_seed(0)
  net = tf.keras.Sequential([tf.keras.Input((8, 8, 1)), tf.keras.layers.Conv2D(8, 3),
                             tf.keras.layers.BatchNormalization(), tf.keras.layers.ReLU(),
                             tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(10)])
  start = [v.numpy() for v in net.trainable_variables]
  rng = np.random.default_rng(rank)
  batches = [(rng.standard_normal((8, 8, 8, 1)).astype(np.float32), rng.integers(0, 10, 8).astype(np.int32)) for _ in range(3)]
  optimizer = tf.keras.optimizers.SGD(0.1)
  optimizer.build(net.trainable_variables)

  def train(config):
    for v, s in zip(net.trainable_variables, start):
      v.assign(s)
    # train.py's own step (training/step.py), fp32: plain SGD at LR 0.1.
    step = make_train_step(net, optimizer, make_gradient_exchange(hvd, config, world), precision.for_precision("fp32"),
                           num_classes=10)

    for images, labels in batches:
      step(images, labels, tf.constant(0.1))
    return [v.numpy() for v in net.trainable_variables]

  progress(world, "training")
  reference = train(CommConfig("horovod"))
  assert not all(np.array_equal(a, b) for a, b in zip(reference, start))
  for config in [CommConfig("flat", 0.001), CommConfig("hier", 0.001), CommConfig("hybrid", 0.001)]:
    progress(world, f"training {config.allreduce}")
    for a, b in zip(train(config), reference):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=config.allreduce)
