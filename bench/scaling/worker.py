"""One launch of bench-scaling, run by every rank under mpirun; rank 0 writes what the launch
measured ({calibration, comm, training}) to --out.

comm: the cost model calibrated twice (calibrate.py): PLAN_REPEATS rounds before
the rows give hybrid its plan, as comm/probe.py's at start-up would; the model
that predicts is timed in every repeat of the rows themselves, so both see the
same machine. training: train.py's own step (training/step.py) per algorithm and
with an identity exchange.
"""
import dataclasses
import json
import time
from statistics import median

import keras
import numpy as np
import tensorflow as tf

import comm
from bench.scaling import calibrate, replay, timing
from bench.scaling.settings import (ALGORITHMS, HOROVOD_FUSION_MB, LARGE_CASE_TURNS, MB, SMALL_CASE_BYTES,
                                    SMALL_CASE_CALLS, SMALL_CASE_TURNS, THRESHOLD_MB, TRAIN_BATCH)
from bench.harness.train_step import default_optimizer
from comm import hierarchical
from comm.cost_model import parse
from comm.exchange import GradientExchange
from flags.config import CommConfig
from models import build_model, gradient_sets
from optimizers import precision
from progress import emit
from training.step import make_train_step

# hybrid's cost in a training launch with no calibration of its own and no 2x2 one to borrow.
FALLBACK_COST = "300,1,300,0.1"


@dataclasses.dataclass
class Case:
  """One measured row set: a buffer or a gradient set, every algorithm's traced exchange of it."""
  name: str
  tensor_bytes: list[int]
  grads: list
  fns: dict
  plans: dict


def prepare(hvd, world, groups, model, settings) -> list[Case]:
  """Every case, each algorithm's exchange traced and warmed up (which fills its plan)."""
  shapes = [(f"{n // MB} MB", [(n // 4,)]) for n in settings.sizes]
  shapes += [(name, list(gradient_sets.shapes(name))) for name in settings.gradient_sets]
  cases = []
  for name, case_shapes in shapes:
    rng = np.random.default_rng(world.rank)
    grads = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in case_shapes]
    fns, plans = {}, {}
    for algorithm in ALGORITHMS:
      exchange = GradientExchange(hvd, CommConfig(allreduce=algorithm, fusion_threshold_mb=THRESHOLD_MB),
                                  world, groups, model)
      fns[algorithm] = tf.function(exchange)
      fns[algorithm](grads)
      plans[algorithm] = [p["algorithm"] for p in exchange.plan]
    cases.append(Case(name, [int(np.prod(s)) * 4 for s in case_shapes], grads, fns, plans))
  return cases


def time_case(hvd, case: Case, repeat: int, iface: str, times: dict, link: dict) -> None:
  """One repeat of a case: every algorithm in each turn, in a balanced order (timing.turn_order).

  With a fixed order hybrid (the same plan as flat, always run right after
  hier) came out 1.28x flat on 1x4 in two runs. Cheap cases take several
  turns per repeat: at 12 timings the same plan (flat, hybrid) still differed
  by 10% in the 21 ms rows of 2x2.
  """
  small = sum(case.tensor_bytes) <= SMALL_CASE_BYTES
  turns = SMALL_CASE_TURNS if small else LARGE_CASE_TURNS
  per_timing = SMALL_CASE_CALLS if small else 1
  for t in range(turns):
    for algorithm in (ALGORITHMS[i] for i in timing.turn_order(repeat * turns + t, len(ALGORITHMS))):
      timing.sync(hvd)
      before = timing.link_bytes(iface)
      start = time.perf_counter()
      for _ in range(per_timing):
        out = case.fns[algorithm](case.grads)
        _ = [o.numpy() for o in out[:1]] + [out[-1].numpy()]
      times.setdefault((case.name, algorithm), []).append((time.perf_counter() - start) / per_timing)
      link.setdefault((case.name, algorithm), []).append((timing.link_bytes(iface) - before) / per_timing)


def case_rows(hvd, world, case: Case, model, times: dict, link: dict) -> list[dict]:
  """The case's rows: measured (median of the slowest rank), predicted, plans, link bytes."""
  rows = []
  for algorithm in ALGORITHMS:
    buckets = replay.case_buckets(algorithm, case.tensor_bytes)
    rows.append({"case": case.name, "bytes": sum(case.tensor_bytes), "algorithm": algorithm,
                 "measured_s": median(timing.slowest(hvd, times[(case.name, algorithm)])),
                 # hybrid: the plan it ran (chosen before the rows), costed by this model.
                 "predicted_s": replay.predict(algorithm, model, world, buckets, HOROVOD_FUSION_MB * MB,
                                               case.plans[algorithm] if algorithm == "hybrid" else None),
                 "plan": case.plans[algorithm],
                 "model_link_mb_per_host": replay.link_mb_per_host(algorithm, model, world,
                                                                   [sum(b) for b in buckets]),
                 "link_mb_per_host": timing.host_link_mb(hvd, world,
                                                         int(median(link[(case.name, algorithm)])))})
  return rows


def measure_comm(hvd, world, groups, settings, launch: str, iface: str) -> tuple:
  """(hybrid's plan model, {plan_calibration, calibration, comm rows})."""
  sizes = settings.calibration_sizes
  calls = calibrate.calls(hvd, world, groups, sizes)
  plan_times = {}
  for _ in range(settings.plan_repeats):
    calibrate.time_calls(hvd, calls, plan_times)
  plan_model, plan_calibration = calibrate.fitted(hvd, world, plan_times, sizes, "for hybrid's plan", launch)
  cases = prepare(hvd, world, groups, plan_model, settings)
  times, link, cal_times = {}, {}, {}
  for r in range(settings.repeats):
    # The model's calibration is timed in the same repeats as the rows it
    # predicts: timed once at the start, the 1x4 calibration of one run sat
    # 20-40% below every row measured minutes later, the next run's did not.
    calibrate.time_calls(hvd, calls, cal_times)
    for case in cases:
      time_case(hvd, case, r, iface, times, link)
  model, calibration = calibrate.fitted(hvd, world, cal_times, sizes, "alongside the rows", launch)
  calibration["repeats"] = settings.repeats
  rows = []
  for case in cases:
    if world.rank == 0:
      emit(f"{launch} {case.name}: " + " ".join(f"{a} {median(times[(case.name, a)]) * 1e3:.0f} ms"
                                                for a in ALGORITHMS))
    rows += case_rows(hvd, world, case, model, times, link)
  return plan_model, {"plan_calibration": plan_calibration, "calibration": calibration, "comm": rows}


def measure_training(hvd, world, groups, cost, settings) -> list[dict]:
  """Seconds per step of train.py's step (training/step.py) per model and variant, median of the slowest rank.

  Synthetic images and int32 labels, batch TRAIN_BATCH per rank; "none" is the
  same step with an identity exchange. cost: hybrid's CostModel.
  """
  rows = []
  variants = ("none",) + (settings.train_variants if world.size > 1 else ())
  lr = tf.constant(0.01)  # the images are noise: a small LR keeps the timed steps finite
  for name, classes, shape in settings.train_models:
    keras.utils.set_random_seed(0)
    net = build_model(name, classes, shape)
    optimizer = default_optimizer(net)
    loss_scale = precision.for_precision("fp32")
    rng = np.random.default_rng(world.rank)
    images = tf.constant(rng.standard_normal((TRAIN_BATCH, *shape)).astype(np.float32))
    labels = tf.constant(rng.integers(0, classes, TRAIN_BATCH).astype(np.int32))
    steps = {}
    for variant in variants:
      exchange = (GradientExchange(hvd, CommConfig(allreduce=variant, fusion_threshold_mb=THRESHOLD_MB),
                                   world, groups, cost) if variant != "none" else (lambda grads: grads))
      steps[variant] = make_train_step(net, optimizer, exchange, loss_scale, classes)
      steps[variant](images, labels, lr)  # trace and warm up
    times = {v: [] for v in variants}
    for _ in range(settings.train_steps):
      for variant in variants:
        timing.sync(hvd)
        start = time.perf_counter()
        float(steps[variant](images, labels, lr)[0])
        times[variant].append(time.perf_counter() - start)
    for variant in variants:
      seconds = median(timing.slowest(hvd, times[variant]))
      rows.append({"model": name, "image": list(shape), "batch_per_rank": TRAIN_BATCH, "variant": variant,
                   "step_s": seconds, "images_per_sec_per_rank": TRAIN_BATCH / seconds})
  return rows


def run(args, settings) -> None:
  """The launch named args.launch: what args.comm / args.training ask, rank 0 writing args.out."""
  import horovod.tensorflow as hvd
  tf.get_logger().setLevel("ERROR")  # one tf.function per calibration size: TF's retracing warning is expected
  world = comm.init(hvd)  # mpirun -H --map-by slot numbers ranks host by host, as World requires
  groups = hierarchical.register(hvd, world)
  tf.config.threading.set_intra_op_parallelism_threads(max(1, 2 // world.size))
  result = {"launch": args.launch, "ranks": world.size, "local_size": world.local_size,
            "nodes": world.cross_size}
  plan_model = None
  if args.comm:
    plan_model, measured = measure_comm(hvd, world, groups, settings, args.launch, args.iface)
    result.update(measured)
  if args.training:
    # hybrid's model: this launch's calibration, else the 2x2 launch's, else a plausible default.
    cost = plan_model or parse(args.hybrid_cost or FALLBACK_COST)
    result["training"] = measure_training(hvd, world, groups, cost, settings)
    result["train_step"] = "training/step.py"
  if world.rank == 0:
    with open(args.out, "w") as fh:
      json.dump(result, fh, indent=1)
