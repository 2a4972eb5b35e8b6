"""Scaling on the emulated cluster, against the alpha-beta cost model: `make bench-scaling`.

  python bench/bench_scaling.py                  # the driver: cluster up, every launch, report, cluster down
  python bench/bench_scaling.py --rate=200mbit   # slower links between the emulated hosts

The driver brings up an emulated cluster of 4 hosts (scripts/cluster/cluster.sh,
its own name 'imcb' and subnet 198.18.30.0/24, links RATE each way) and runs
horovodrun launches in it; rank 0 of each writes what it measured:

  comm       topologies 1 host x 4 ranks, 2 x 2 and 4 x 1. The cost model
             (comm/cost_model.py) is calibrated per level: allreduces of 5 sizes
             up to the bucket size, in a tf.function as the exchanges call them,
             inside a node (all node groups at once, each on its own host: beta
             per rank) and across nodes (all cross groups at once, the L groups
             of a host sharing its link: beta per host link), with hier's
             in-node reduce-scatter + allgather pair, one local pass over a
             buffer, and, across hosts, flat's own call over every rank, each
             fitted by cost_model.fit (least squared relative error). A first calibration
             (5 repeats) gives hybrid its plan, as the start-up probe would; the
             model that predicts is timed in every one of the --repeats rounds
             of the measurement itself, so both see the same machine. flat,
             hier, hybrid (comm/exchange.py, 32 MB buckets) and stock horovod
             exchange buffers of 1-64 MB and the ResNet-50 and AlexNet gradient
             sets; the model's prediction (one alpha per collective after
             Horovod's fusion, see predict) stands beside each median, and so do
             the bytes each host sent on its link and the bytes the model says
             cross it.
  training   ranks N = 1 (1x1), 2 (2 hosts x 1), 4 (2 x 2): seconds per step of a
             synthetic-data SGD step (the CIFAR ResNet-20 at 32x32 and ResNet-50
             at 64x64, batch 16 per rank) per algorithm, and of the same step
             without the exchange; S = images/sec per rank, e = S_N / S_1,
             T = N * S * e (Jia et al.).
  simulation the model at cluster scale (64-2,048 ranks): ring, hierarchical and
             hybrid for one exchange of ResNet-50 and AlexNet, with the stated
             parameters of a 2018 P40 cluster (this machine's alpha is CPU
             scheduling, hundreds of ms, and would say nothing about a cluster).
             "ring" there is NCCL's ring over all ranks, Jia et al.'s baseline,
             with a latency per ring step: not the CPU flat of comm/cost_model.py,
             which is Open MPI's hierarchy-aware allreduce.

Writes results/bench_scaling.json, results/scaling.md, results/scaling_comm.png
and results/scaling_training.png. Every emulated host runs on the same 2 cores:
ranks on different "hosts" still compete for CPU, so training efficiency falls
with N from CPU sharing alone; the step without exchange separates the two.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from statistics import median

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from progress import emit  # noqa: E402  (one write per line: mpirun tags each write)

KB, MB = 1 << 10, 1 << 20
CLUSTER, SUBNET, HOSTS = "imcb", "198.18.30", 4
IFACE = f"{CLUSTER}0"
# The default takes about 12 minutes on the idle 2-core machine; --full adds larger
# buffers, AlexNet's gradients (244 MB), the 4 x 1 topology and every algorithm as a
# training variant.
# Calibration: 5 sizes each level over the rows' range (1 MB buffers to Horovod's
# 64 MB fused responses), every size timed --repeats times alongside the measured
# rows (medians), PLAN_REPEATS times before them for hybrid's plan. With 64 KB-32 MB
# the relative fit leaned on a size no row has and ran 10% under its own 32 MB
# point: the 1x4 32 MB and ResNet-50 rows came out 0.74-0.82 in four runs.
CALIBRATION_SIZES = [1 * MB, 4 * MB, 16 * MB, 32 * MB, 64 * MB]
PLAN_REPEATS = 5
# Cases of at most 8 MB (tens of ms or less) are timed SMALL_CASE_TURNS times per repeat,
# each timing the mean of SMALL_CASE_CALLS calls after one sync, as calibration sizes
# that small: single 4 ms calls, each the slowest of 4 ranks just out of a barrier,
# put the same plan (flat, hybrid) 11-15% apart on 1x4 at 36 timings.
SMALL_CASE_BYTES, SMALL_CASE_TURNS, SMALL_CASE_CALLS = 8 * MB, 3, 4
# Larger cases take LARGE_CASE_TURNS single-call turns per repeat: at 12 timings hybrid,
# running hier's plan, measured 1.15x hier's own 2x2 32 MB row (655 against 567 ms).
LARGE_CASE_TURNS = 2
SIZES = [1 * MB, 8 * MB, 32 * MB]
GRADIENT_SETS = ["resnet50"]
FULL = {"sizes": [1 * MB, 4 * MB, 16 * MB, 64 * MB], "gradient_sets": ["resnet50", "alexnet"]}
ALGORITHMS = ["flat", "hier", "hybrid", "horovod"]
TRAIN_VARIANTS = ["horovod", "hybrid"]
THRESHOLD_MB = 32.0
HOROVOD_FUSION_MB = 64.0  # HOROVOD_FUSION_THRESHOLD set for the launches (the Slurm scripts' value)
# On 1x4 flat took 38, 47 and 189 ms for 1, 8 and 32 MB (0.8 GB/s from 1 to 8 MB,
# 0.17 from 8 to 32), while ResNet-50's 97.5 MB, no tensor over 10 MB, took 331 ms.
# The likely cause: glibc's malloc gives a block of 32 MB or more a fresh mmap on
# every call (its dynamic mmap threshold stops at 32 MB), so a 32 MB output tensor
# (or hier's 32 MB packed bucket) is first-touched, page fault by page fault, on
# every exchange, while smaller blocks come back warm from the heap. The launches
# keep every block on the heap and never hand it back, so all sizes run on warm
# memory, as Horovod's fusion buffer does.
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}
# (name, hosts, ranks per host, measure comm, measure training)
LAUNCHES = [("1x1", 1, 1, False, True), ("2x1", 2, 1, False, True), ("2x2", 2, 2, True, True),
            ("1x4", 1, 4, True, False), ("4x1", 4, 1, True, False)]
# The small ResNet and ResNet-50 at a reduced resolution (the issue's two); --full adds
# every algorithm as a training variant.
TRAIN_MODELS = [("resnet20", 10, (32, 32, 3)), ("resnet50", 1000, (64, 64, 3))]
TRAIN_BATCH = 16
LAUNCH_TIMEOUT_S = 900  # the default 2x2 launch took 539 s on the idle machine


# ------------------------------------------------------------------ model --
def fuse(sizes: list[float], threshold: float) -> list[float]:
  """The byte sizes of the fused collectives Horovod runs for ready requests of one kind, in order.

  Horovod's Controller::FuseResponses (horovod/common/controller.cc, 0.28):
  the first ready response takes the next ones of the same kind, dtype and
  scaling while the total stays within HOROVOD_FUSION_THRESHOLD; allreduce,
  reduce-scatter and allgather (output bytes) fuse alike. Its look-ahead past
  a response that does not fit only helps mixed dtypes, so with one dtype
  this is the greedy run below. Grouped allreduces fuse the same way: a group
  only makes its tensors ready together, it is not one collective.
  """
  out: list[float] = []
  for n in sizes:
    if out and out[-1] + n <= threshold:
      out[-1] += n
    else:
      out.append(n)
  return out


def predict(algorithm: str, model, world, buckets: list[list[int]], fusion_bytes: float,
            plan: list[str] | None = None) -> float:
  """Seconds the cost model gives one exchange when every bucket is ready at once (the bench's replay).

  buckets: per bucket of comm/fusion.py, its tensors' bytes; for stock
  horovod one bucket per tensor. alpha is paid per collective Horovod runs,
  not per bucket: flat's grouped allreduces and horovod's per-tensor ones
  fuse into responses of up to fusion_bytes (HOROVOD_FUSION_THRESHOLD), and
  so do hier's reduce-scatters, cross allreduces and allgathers, phase by
  phase (ResNet-50's 97.5 MB: 2 flat calls, not 4 buckets; measured 331 ms
  on 1x4 against 684 predicted per bucket). The bytes term is the one of
  comm/cost_model.py, linear in n, so fusing changes only the count of
  alphas. hybrid: each bucket flat or hier as `plan` says (the plan it ran), else by cost_model.choose, as
  comm/exchange.py plans it. In training, buckets are ready at different
  times and fuse less; this is the replay's upper bound on fusion.
  """
  from comm import cost_model
  local, cross = world.local_size, world.cross_size
  kinds = plan or [cost_model.choose(model, world, sum(b), len(b))[0] if algorithm == "hybrid" else
                   ("hier" if algorithm == "hier" else "flat") for b in buckets]
  flat = [n for b, kind in zip(buckets, kinds) if kind == "flat" for n in b]
  hier = [sum(b) for b, kind in zip(buckets, kinds) if kind == "hier"]
  seconds = sum(cost_model.flat_time(model, world, m) for m in fuse(flat, fusion_bytes))
  # hier's phases (cost_model.hier_time): reduce-scatter and allgather of n in the node,
  # the L cross allreduces of n/L sharing the host link.
  seconds += sum(cost_model.node_phases_time(model, local, m) for m in fuse(hier, fusion_bytes))
  # hier's own passes over each bucket (pack, scale, unpack), bucket by bucket.
  seconds += sum(cost_model.local_time(model, sum(b), len(b)) for b, kind in zip(buckets, kinds) if kind == "hier")
  seconds += sum(cost_model.allreduce_time(model.inter, cross, m, sharing=local)
                 for m in fuse([n / local for n in hier], fusion_bytes))
  return seconds


def case_buckets(algorithm: str, tensor_bytes: list[int]) -> list[list[int]]:
  """Per bucket its tensors' bytes, as comm/exchange.py buckets float32 gradients; stock horovod one per tensor."""
  if algorithm == "horovod":
    return [[n] for n in tensor_bytes]
  from comm import fusion
  plan = fusion.plan([(n // 4, "float32") for n in tensor_bytes], int(THRESHOLD_MB * MB))
  return [[tensor_bytes[i] for i in b] for b in plan]


def link_mb_per_host(algorithm: str, model, world, bucket_bytes: list[int]) -> float:
  """MB the cost model says each host sends on its link for one exchange of these buckets.

  The figure to hold against the measured 'link MB sent per host': mpi flat and
  hier 2(c-1)/c n per bucket, a ring 2(g-1)/g n; hybrid as its plan.
  """
  from comm import cost_model
  if world.cross_size <= 1:
    return 0.0

  def one(n):
    if algorithm == "hybrid":
      kind = cost_model.choose(model, world, n)[0]
    else:
      kind = "hier" if algorithm == "hier" else "flat"
    ranks = world.size if kind == "flat" and model.flat == "ring" else world.cross_size
    return cost_model.allreduce_bytes(ranks, n)
  return sum(one(n) for n in bucket_bytes) / MB


def turn_order(turn: int, n: int) -> list[int]:
  """The order of n algorithms (n even) in turn `turn`: a Williams balanced Latin square.

  Over n turns each algorithm runs once in every place AND right after every
  other once, so neither the first place nor the predecessor favours one.
  Rotating one fixed order balanced the places only: hybrid always ran right
  after hier, and identical plans (flat, hybrid) still came out 10-15% apart
  in the millisecond rows.
  """
  first = [0] + [(k + 1) // 2 if k % 2 else n - k // 2 for k in range(1, n)]
  return [(x + turn) % n for x in first]


def split(total: int, size: int) -> list[int]:
  """Buckets of `size` bytes and one remainder holding `total` bytes (the simulation's fusion)."""
  return [size] * (total // size) + ([total % size] if total % size else [])


def scaling(n: int, s_1: float, s_n: float) -> tuple[float, float]:
  """(e, T) of Jia et al.: e = S_N / S_1 (images/sec per rank), T = N * S_1 * e, the job's images/sec."""
  e = s_n / s_1
  return e, n * s_1 * e


# ------------------------------------------------------------------ simulation --
# The simulation's own formulas: alpha is a latency per ring step (NCCL on GPUs, where a
# call costs microseconds), not comm/cost_model.py's per Horovod call; beta_out is per
# host link there and here.
def ring_time(alpha_step: float, beta: float, ranks: int, nbytes: float) -> float:
  """Ring allreduce with a latency per ring step: 2(p-1) steps, 2(p-1)/p of the buffer through each rank."""
  return 0.0 if ranks <= 1 else 2 * (ranks - 1) * alpha_step + 2 * (ranks - 1) / ranks * nbytes * beta


def hier_sim_time(intra, inter, local: int, nodes: int, nbytes: float) -> float:
  """Reduce-scatter and allgather in the node (ring), ring allreduce of 1/local across nodes.

  intra/inter: (alpha per step s, beta s/byte; inter per host link). The
  cross-node rings of the `local` ranks run at once and share the node's
  network link, so each sees beta * local: 2(c-1)/c n per host link in all,
  as comm/cost_model.hier_time.
  """
  (a_in, b_in), (a_out, b_out) = intra, inter
  in_node = 0.0 if local <= 1 else 2 * ((local - 1) * a_in + (local - 1) / local * nbytes * b_in)
  return in_node + ring_time(a_out, b_out * local, nodes, nbytes / local)


def flat_sim_time(intra, inter, local: int, nodes: int, nbytes: float) -> float:
  """NCCL's ring over every rank (Jia et al.'s baseline), ordered node by node: each node link
  carries one ring edge (2(p-1)/p of the buffer), every step pays the slower level's latency.
  comm/cost_model.py's flat="ring" without the per-step latency; not Open MPI's CPU flat."""
  (a_in, b_in), (a_out, b_out) = intra, inter
  p = local * nodes
  return ring_time(max(a_in, a_out), max(b_in, b_out), p, nbytes)


# Stated assumptions for a 2018 P40 cluster like Jia et al.'s: 8 GPUs per node on
# PCIe 3.0 x16 (about 10 GB/s, 5 us per step), 100 Gbit/s between nodes (12.5 GB/s
# nominal, ~10 GB/s achieved, 10 us per step including the host staging of TCP/RDMA).
P40 = {"local": 8, "intra": (5e-6, 1 / 10e9), "inter": (10e-6, 1 / 10e9)}
SIM_RANKS = [64, 128, 256, 512, 1024, 2048]
SIM_MODELS = ["resnet50", "alexnet"]
SIM_BUCKET = 32 * MB


def simulate(params: dict, tensor_bytes: list[int]) -> dict:
  """Per ranks: seconds of one exchange of these gradients.

  ring, hier, hybrid: 32 MB buckets (hybrid: the cheaper per bucket);
  ring_per_tensor: one ring allreduce per gradient, no fusion (a baseline
  like NCCL-based training that reduces each tensor as it comes).
  """
  local = params["local"]
  total = sum(tensor_bytes)
  buckets = split(total, SIM_BUCKET)
  out = {}
  for p in SIM_RANKS:
    nodes = max(1, p // local)
    flat = [flat_sim_time(params["intra"], params["inter"], local, nodes, n) for n in buckets]
    hier = [hier_sim_time(params["intra"], params["inter"], local, nodes, n) for n in buckets]
    out[p] = {"ring_per_tensor": sum(flat_sim_time(params["intra"], params["inter"], local, nodes, n)
                                     for n in tensor_bytes),
              "ring": sum(flat), "hier": sum(hier), "hybrid": sum(min(f, h) for f, h in zip(flat, hier))}
  return out


# ------------------------------------------------------------------ worker --
def worker(args):
  """One launch: rank 0 writes {calibration, comm, training} to args.out."""
  import horovod.tensorflow as hvd
  import numpy as np
  import tensorflow as tf

  from comm import hierarchical
  from models import gradient_sets
  from comm.cost_model import CostModel, Link, fit
  from comm.exchange import GradientExchange
  from comm.topology import World
  from flags.config import CommConfig

  global SIZES, GRADIENT_SETS, TRAIN_VARIANTS
  if args.full:
    SIZES, GRADIENT_SETS, TRAIN_VARIANTS = FULL["sizes"], FULL["gradient_sets"], ALGORITHMS
  tf.get_logger().setLevel("ERROR")  # one tf.function per calibration size: TF's retracing warning is expected
  hvd.init()
  # horovodrun -H numbers ranks host by host, as World assumes.
  world = World(size=hvd.size(), rank=hvd.rank(), local_size=hvd.local_size(), local_rank=hvd.local_rank(),
                cross_size=hvd.cross_size(), cross_rank=hvd.cross_rank())
  groups = hierarchical.register(hvd, world)
  tf.config.threading.set_intra_op_parallelism_threads(max(1, 2 // world.size))
  host_lead = world.local_rank == 0

  def sync():
    hvd.allreduce(tf.zeros([1]), name="bench_sync").numpy()

  def link_bytes():
    try:
      with open(f"/sys/class/net/{args.iface}/statistics/tx_bytes") as fh:
        return int(fh.read())
    except OSError:
      return 0

  def slowest(seconds: list[float]) -> list[float]:
    """Per repeat, the slowest rank's seconds: an exchange ends when its last rank has the result."""
    return hvd.allreduce(tf.constant(seconds, tf.float64), op=hvd.Max, name=None).numpy().tolist()

  def host_link_mb(delta: int) -> float:
    """Mean over hosts of the bytes (MB) each host sent on its link."""
    total = hvd.allreduce(tf.constant([delta if host_lead else 0, 1 if host_lead else 0], tf.float64),
                          op=hvd.Sum, name=None).numpy()
    return float(total[0] / total[1] / MB)

  result = {"launch": args.launch, "ranks": world.size, "local_size": world.local_size,
            "nodes": world.cross_size}

  # -------------------------------------------- calibration, per level --
  def carried(tag, n):
    """Bytes a level's call carries when a row's buffer is n: hier's cross allreduce
    carries a 1/local_size share. Calibrated at 1-64 MB it sat above hier's 0.5 MB
    cross calls, and the 2x2 1 MB hier row came out 1.15-1.49 x over in four runs."""
    return n // world.local_size if tag == "cal_cross" else n

  def calibration_calls():
    """{(tag, bytes): (tf.function, buffer)}: per level, the call the measured exchanges make,
    run as they run it (inside a tf.function, one stable name per size, the result fetched
    with .numpy()); all groups of a level at once, as hier's phases run (and comm/probe.py):
    the local_size cross groups of a host share its link, so the inter beta comes out per
    host link. In the node flat's call (one grouped allreduce, averaged; on 1 x 4 the flat
    exchange of one buffer itself); across nodes hier's cross call (an allreduce of sums).
    Eager allreduces under a new name per call, which this replaced, cost more per call
    than whole exchanges (1x4: 65-78 ms at 64 KB-4 MB, against 38 ms for a 1 MB flat one).
    """
    levels = []
    if groups.node is not None:
      # On one host flat's call itself (the global set); on several, the node's set.
      node_set = hvd.global_process_set if world.cross_size == 1 else groups.node
      levels.append(("cal_node", lambda x, name: hvd.grouped_allreduce(
          [x], op=hvd.Average, process_set=node_set, name=name)[0]))
      if world.local_size > 1:
        # hier's first and last phases as it runs them (comm/hierarchical.py): their own cost.
        levels.append(("cal_pair", lambda x, name: hvd.allgather(hvd.reducescatter(
            x, op=hvd.Sum, process_set=groups.node, name=f"{name}_rs"), process_set=groups.node, name=f"{name}_ag")))
    if "hier" in ALGORITHMS:
      # One pass over a buffer on every rank at once, as hier's scale (CostModel.copy).
      levels.append(("cal_copy", lambda x, name: x * 0.25))
    if world.cross_size > 1:
      # flat's own call across hosts: one grouped allreduce over every rank (CostModel.flat_call).
      levels.append(("cal_flat", lambda x, name: hvd.grouped_allreduce([x], op=hvd.Average, name=name)[0]))
    if groups.cross is not None:
      levels.append(("cal_cross", lambda x, name: hvd.allreduce(x, op=hvd.Sum, process_set=groups.cross,
                                                                name=name)))
    rng = np.random.default_rng(world.rank)
    calls = {}
    for tag, collective in levels:
      for n in CALIBRATION_SIZES:
        fn = tf.function(lambda x, n=n, tag=tag, collective=collective: collective(x, f"{tag}_{n}"))
        x = tf.constant(rng.standard_normal(carried(tag, n) // 4).astype(np.float32))
        fn(x).numpy()  # trace and warm up
        calls[(tag, n)] = (fn, x)
    return calls

  def time_calls(calls, times):
    """One timing of every calibration call, sizes taking turns."""
    for key, (fn, x) in calls.items():
      k = SMALL_CASE_CALLS if key[1] <= SMALL_CASE_BYTES else 1
      sync()
      start = time.perf_counter()
      for _ in range(k):
        fn(x).numpy()
      times.setdefault(key, []).append((time.perf_counter() - start) / k)

  def fitted(times, label):
    """(CostModel, calibration dict) from {(tag, bytes): [seconds]}: medians of the slowest rank."""
    points = {tag: [(carried(tag, n), median(slowest(times[(tag, n)]))) for n in CALIBRATION_SIZES
                    if (tag, n) in times]
              for tag in ("cal_node", "cal_pair", "cal_copy", "cal_flat", "cal_cross")}
    if world.rank == 0:
      for tag, pts in points.items():
        if pts:
          emit(f"{args.launch} calibration {label} {tag}: " + ", ".join(f"{n} bytes {t * 1e3:.1f} ms" for n, t in pts))
    intra = fit(world.local_size, points["cal_node"]) if points["cal_node"] else Link(0.0, 0.0)
    inter = fit(world.cross_size, points["cal_cross"], sharing=world.local_size) if points["cal_cross"] else Link(0.0, 0.0)
    pair = fit(world.local_size, points["cal_pair"]) if points["cal_pair"] else None
    # fit over 2 ranks: its bytes term is then the buffer's own bytes, one pass.
    copy = fit(2, points["cal_copy"]).beta if points["cal_copy"] else 0.0
    flat_call = fit(2, points["cal_flat"]) if points["cal_flat"] else None  # 2 ranks: beta per buffer byte
    model = CostModel(intra=intra, inter=inter, flat="ring" if hvd.gloo_enabled() else "mpi", pair=pair, copy=copy,
                      flat_call=flat_call)
    return model, {
        "flat": model.flat, "path": "tf.function, stable names", "fit": "least squared relative error",
        "intra": {"alpha_us": intra.alpha * 1e6, "gbps": intra.gbps if intra.beta else None,
                  "per": "rank", "points": points["cal_node"]},
        "copy": {"gbps": 1e-9 / copy if copy else None, "per": "rank, one pass", "points": points["cal_copy"]},
        "flat_call": {"alpha_us": flat_call.alpha * 1e6 if flat_call else None,
                      "gbps": flat_call.gbps if flat_call and flat_call.beta else None,
                      "per": "byte of the buffer", "points": points["cal_flat"]},
        "pair": {"alpha_us": pair.alpha * 1e6 if pair else None, "gbps": pair.gbps if pair and pair.beta else None,
                 "per": "rank", "points": points["cal_pair"]},
        "inter": {"alpha_us": inter.alpha * 1e6, "gbps": inter.gbps if inter.beta else None,
                  "per": "host link", "sharing": world.local_size, "points": points["cal_cross"]}}

  if args.comm:
    calls = calibration_calls()
    # hybrid plans with a calibration taken before it runs, as comm/probe.py's at start-up.
    plan_times = {}
    for _ in range(PLAN_REPEATS):
      time_calls(calls, plan_times)
    plan_model, result["plan_calibration"] = fitted(plan_times, "for hybrid's plan")

    # -------------------------------------------- algorithms --
    cases = [(f"{n // MB} MB", [(n // 4,)]) for n in SIZES]
    cases += [(name, list(gradient_sets.shapes(name))) for name in GRADIENT_SETS]
    prepared = []
    for case, shapes in cases:
      rng = np.random.default_rng(world.rank)
      grads = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes]
      fns, plans = {}, {}
      for algorithm in ALGORITHMS:
        exchange = GradientExchange(hvd, CommConfig(allreduce=algorithm, fusion_threshold_mb=THRESHOLD_MB),
                                    world, groups, plan_model)
        fns[algorithm] = tf.function(exchange)
        fns[algorithm](grads)  # trace and warm up; fills exchange.plan
        plans[algorithm] = [p["algorithm"] for p in exchange.plan]
      prepared.append((case, [int(np.prod(s)) * 4 for s in shapes], grads, fns, plans))
    times = {(case, a): [] for case, *_ in prepared for a in ALGORITHMS}
    link = {(case, a): [] for case, *_ in prepared for a in ALGORITHMS}
    cal_times = {}
    for r in range(args.repeats):
      # The model's calibration is timed in the same repeats as the rows it
      # predicts: timed once at the start, the 1x4 calibration of one run sat
      # 20-40% below every row measured minutes later, the next run's did not.
      time_calls(calls, cal_times)
      for case, tensor_bytes, grads, fns, plans in prepared:
        # Algorithms take turns, so load from elsewhere hits them alike, in a
        # balanced order (turn_order): with a fixed one, hybrid (the same plan as
        # flat, always run right after hier) came out 1.28x flat on 1x4 in two
        # runs. Cheap cases take several turns per repeat: at 12 timings the same
        # plan (flat, hybrid) still differed by 10% in the 21 ms rows of 2x2.
        small = sum(tensor_bytes) <= SMALL_CASE_BYTES
        turns = SMALL_CASE_TURNS if small else LARGE_CASE_TURNS
        per_timing = SMALL_CASE_CALLS if small else 1
        for t in range(turns):
          for algorithm in (ALGORITHMS[i] for i in turn_order(r * turns + t, len(ALGORITHMS))):
            sync()
            before = link_bytes()
            start = time.perf_counter()
            for _ in range(per_timing):
              out = fns[algorithm](grads)
              _ = [o.numpy() for o in out[:1]] + [out[-1].numpy()]
            times[(case, algorithm)].append((time.perf_counter() - start) / per_timing)
            link[(case, algorithm)].append((link_bytes() - before) / per_timing)
    model, result["calibration"] = fitted(cal_times, "alongside the rows")
    result["calibration"]["repeats"] = args.repeats
    rows = []
    for case, tensor_bytes, grads, fns, plans in prepared:
      total = sum(tensor_bytes)
      if world.rank == 0:
        emit(f"{args.launch} {case}: " + " ".join(f"{a} {median(times[(case, a)]) * 1e3:.0f} ms" for a in ALGORITHMS))
      for algorithm in ALGORITHMS:
        buckets = case_buckets(algorithm, tensor_bytes)
        rows.append({"case": case, "bytes": total, "algorithm": algorithm,
                     "measured_s": median(slowest(times[(case, algorithm)])),
                     # hybrid: the plan it ran (chosen before the rows), costed by this model.
                     "predicted_s": predict(algorithm, model, world, buckets, HOROVOD_FUSION_MB * MB,
                                            plans[algorithm] if algorithm == "hybrid" else None),
                     "plan": plans[algorithm],
                     "model_link_mb_per_host": link_mb_per_host(algorithm, model, world, [sum(b) for b in buckets]),
                     "link_mb_per_host": host_link_mb(int(median(link[(case, algorithm)])))})
    del prepared
    result["comm"] = rows

  # -------------------------------------------- training steps --
  if args.training:
    import keras

    from comm.cost_model import parse
    from models import build_model
    # hybrid's model: this launch's calibration, else the 2x2 launch's, else a plausible default.
    train_model = plan_model if args.comm else parse(args.hybrid_cost or "300,1,300,0.1")
    train = []
    for name, classes, shape in TRAIN_MODELS:
      keras.utils.set_random_seed(0)
      net = build_model(name, classes, shape)
      rng = np.random.default_rng(world.rank)
      images = tf.constant(rng.standard_normal((TRAIN_BATCH, *shape)).astype(np.float32))
      labels = tf.constant(rng.integers(0, classes, TRAIN_BATCH).astype(np.int32))
      loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
      opt = keras.optimizers.SGD(0.01)
      variants = ["none"] + (TRAIN_VARIANTS if world.size > 1 else [])
      steps = {}
      for variant in variants:
        exchange = (GradientExchange(hvd, CommConfig(allreduce=variant, fusion_threshold_mb=THRESHOLD_MB),
                                     world, groups, train_model)
                    if variant != "none" else (lambda g: g))

        @tf.function
        def step(exchange=exchange):
          with tf.GradientTape() as tape:
            loss = loss_fn(labels, net(images, training=True))
          grads = exchange(tape.gradient(loss, net.trainable_variables))
          opt.apply_gradients(zip(grads, net.trainable_variables))
          return loss
        steps[variant] = step
        step()
      times = {v: [] for v in variants}
      for _ in range(args.train_steps):
        for variant in variants:
          sync()
          start = time.perf_counter()
          float(steps[variant]())
          times[variant].append(time.perf_counter() - start)
      for variant in variants:
        seconds = median(slowest(times[variant]))
        train.append({"model": name, "image": list(shape), "batch_per_rank": TRAIN_BATCH,
                      "variant": variant, "step_s": seconds,
                      "images_per_sec_per_rank": TRAIN_BATCH / seconds})
    result["training"] = train

  if world.rank == 0:
    with open(args.out, "w") as fh:
      json.dump(result, fh, indent=1)


# ------------------------------------------------------------------ driver --
def cluster(*args, check=True, timeout=120, capture=True):
  """scripts/cluster/cluster.sh ARGS for this benchmark's cluster; a launch's output goes to ours."""
  env = dict(os.environ, CLUSTER=CLUSTER, CLUSTER_SUBNET=SUBNET)
  try:
    return subprocess.run(["bash", os.path.join(REPO, "scripts", "cluster", "cluster.sh"), *args],
                          cwd=REPO, env=env, check=check, timeout=timeout, capture_output=capture, text=True)
  except subprocess.TimeoutExpired:
    return subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout} s")


def launch(name, hosts, per_host, comm, training, args, workdir, hybrid_cost=""):
  out = os.path.join(workdir, f"{name}.json")
  host_list = ",".join(f"{CLUSTER}-h{i + 1}:{per_host}" for i in range(hosts))
  # mpirun, not horovodrun: horovodrun's interface check fails inside a namespace when every
  # host is local. hier adds its process sets after hvd.init (comm/hierarchical.py).
  # mpi_yield_when_idle: the emulated hosts' ranks share 2 cores, which Open MPI cannot see
  # from -H's slots, so it polls without yielding and each waiting rank holds a core: one
  # 1 MB grouped allreduce on 4 ranks took 36 ms so (and a flat exchange of the same 1 MB
  # 52 ms, the bias that left the model 20-30% low on 1x4), 4 ms yielding (both alike).
  cmd = ["run", "env", f"HOROVOD_FUSION_THRESHOLD={int(HOROVOD_FUSION_MB * MB)}", "HOROVOD_DYNAMIC_PROCESS_SETS=1",
         *(f"{k}={v}" for k, v in MALLOC_ENV.items()),
         "mpirun", "-np", str(hosts * per_host), "-H", host_list, "--bind-to", "none", "--map-by", "slot",
         "--mca", "mpi_yield_when_idle", "1",
         "--tag-output", "-x", "PATH", "-x", "TF_CPP_MIN_LOG_LEVEL", "-x", "HOROVOD_FUSION_THRESHOLD",
         "-x", "HOROVOD_DYNAMIC_PROCESS_SETS", *(x for k in MALLOC_ENV for x in ("-x", k)),
         sys.executable, os.path.abspath(__file__), "--worker", f"--launch={name}", f"--out={out}",
         f"--iface={IFACE}", f"--repeats={args.repeats}", f"--train_steps={args.train_steps}"]
  cmd += ["--comm"] if comm else []
  cmd += ["--full"] if args.full else []
  cmd += ["--training"] if training else []
  cmd += [f"--hybrid_cost={hybrid_cost}"] if hybrid_cost else []
  start = time.time()
  print(f"launch {name}: {hosts} host(s) x {per_host} rank(s)", file=sys.stderr, flush=True)
  # --full moves AlexNet's 244 MB over the shaped links too: its 2x2 and 4x1 launches
  # passed 540 s in the one --full run tried (before the launches yielded).
  proc = cluster(*cmd, check=False, timeout=LAUNCH_TIMEOUT_S * (3 if args.full else 1), capture=False)
  print(f"launch {name}: exit {proc.returncode} in {time.time() - start:.0f} s", file=sys.stderr, flush=True)
  if proc.returncode or not os.path.exists(out):
    return None
  with open(out) as fh:
    return json.load(fh)


def driver(args):
  os.makedirs(os.path.join(REPO, "results"), exist_ok=True)
  cluster("down")
  up = cluster("up", str(HOSTS), args.rate, check=False)
  if up.returncode:
    sys.exit(f"bench-scaling: the emulated cluster did not come up (needs root and iproute2):\n{up.stderr}")
  path = os.path.join(REPO, "results", "bench_scaling.json")
  launches = {}
  if args.only and os.path.exists(path):  # rerunning some launches: keep the others
    with open(path) as fh:
      launches = json.load(fh)["launches"]
  try:
    with tempfile.TemporaryDirectory() as workdir:
      order = ["2x2", "1x4", "1x1", "2x1"] + (["4x1"] if args.full else [])
      spec = {name: (h, r, c, t) for name, h, r, c, t in LAUNCHES}
      for name in order:
        if args.only and name not in args.only.split(","):
          continue
        hosts, per_host, comm, training = spec[name]
        launches[name] = launch(name, hosts, per_host, comm, training, args, workdir,
                                _hybrid_cost(launches.get("2x2")))
  finally:
    cluster("down", check=False)

  report = {"setup": {"rate": args.rate, "hosts": HOSTS, "cores": os.cpu_count(),
                      "threshold_mb": THRESHOLD_MB, "horovod_fusion_mb": HOROVOD_FUSION_MB,
                      "repeats": args.repeats, "train_steps": args.train_steps, "full": args.full,
                      "malloc_env": MALLOC_ENV,
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
            "launches": launches, "simulation": simulation(launches.get("2x2"))}
  with open(path, "w") as fh:
    json.dump(report, fh, indent=1)
  write_report(report, os.path.join(REPO, "results"))


def _hybrid_cost(two_by_two) -> str:
  """--hybrid_cost for the training launches from the 2x2 calibration ('' without one): GBPS_INTER per host link."""
  if not two_by_two or "calibration" not in two_by_two:
    return ""
  cal = two_by_two["calibration"]
  numbers = (max(cal["intra"]["alpha_us"], 1), cal["intra"]["gbps"] or 1,
             max(cal["inter"]["alpha_us"], 1), cal["inter"]["gbps"] or 1)
  return ",".join([f"{x:.6g}" for x in numbers] + [cal.get("flat", "mpi")])


def simulation(two_by_two):
  """The model at 64-2,048 ranks for the real gradient tensors, with P40-cluster assumptions.

  Not with this machine's calibration: its alpha (hundreds of ms of CPU
  scheduling per call) would extrapolate to hours and say nothing about a cluster.
  """
  from models import gradient_sets
  tensors = {m: [4 * int(_prod(shape)) for shape in gradient_sets.shapes(m)] for m in SIM_MODELS}
  out = {"p40": {"params": {"ranks_per_node": P40["local"], "intra": "PCIe 3.0: 5 us per ring step, 10 GB/s",
                            "inter": "100 Gbit/s: 10 us per ring step, 10 GB/s"},
                 "models": {m: simulate(P40, t) for m, t in tensors.items()}}}
  return out


def _prod(shape):
  n = 1
  for d in shape:
    n *= d
  return n


# ------------------------------------------------------------------ report --
def comm_rows(report):
  for name in ("1x4", "2x2", "4x1"):
    launch = report["launches"].get(name) or {}
    for row in launch.get("comm", []):
      yield name, row


def hybrid_gaps(report) -> list[tuple[str, str, float]]:
  """(topology, case, hybrid / min(flat, hier)) for every measured case."""
  by = {}
  for topo, row in comm_rows(report):
    by.setdefault((topo, row["case"]), {})[row["algorithm"]] = row["measured_s"]
  return [(t, c, a["hybrid"] / min(a["flat"], a["hier"])) for (t, c), a in by.items()
          if {"hybrid", "flat", "hier"} <= a.keys()]


def training_table(report):
  """Rows (model, N, variant, step_s, S, e, T, comm share) with e = S_N / S_1 (the same model, no exchange at N=1)."""
  base = {}
  rows = []
  for name, n in (("1x1", 1), ("2x1", 2), ("2x2", 4)):
    for r in (report["launches"].get(name) or {}).get("training", []):
      if n == 1:
        base[r["model"]] = r["images_per_sec_per_rank"]
  for name, n in (("1x1", 1), ("2x1", 2), ("2x2", 4)):
    launch = report["launches"].get(name) or {}
    none = {r["model"]: r["step_s"] for r in launch.get("training", []) if r["variant"] == "none"}
    for r in launch.get("training", []):
      if n > 1 and r["variant"] == "none":
        continue
      s = r["images_per_sec_per_rank"]
      e, t = scaling(n, base[r["model"]], s) if r["model"] in base else (float("nan"), float("nan"))
      rows.append((r["model"], n, r["variant"] if n > 1 else "-", r["step_s"], s, e, t,
                   1 - none.get(r["model"], r["step_s"]) / r["step_s"]))
  return rows


def calibration_range(report) -> str:
  """'64 KB-16 MB': the smallest and largest calibration size of the run."""
  sizes = [p[0] for launch in report["launches"].values() if launch and "calibration" in launch
           for level in ("intra", "inter") for p in launch["calibration"][level]["points"]]
  if not sizes:
    return "no sizes"
  fmt = lambda n: f"{n / MB:g} MB" if n >= MB else f"{n / KB:g} KB"
  return f"{fmt(min(sizes))}-{fmt(max(sizes))}"


def calibrated_in_function(report) -> bool:
  """Whether the run calibrated through tf.function (runs before that timed eager calls)."""
  return any("path" in (launch.get("calibration") or {}) for launch in report["launches"].values() if launch)


def write_report(report, out_dir):
  """results/scaling.md and the two PNGs from the report dict; prints the tables too."""
  setup = report["setup"]
  malloc = (f"malloc: {' '.join(f'{k}={v}' for k, v in setup['malloc_env'].items())} (blocks of 32 MB and more "
            "stay on the heap; glibc's default mmaps them afresh, first-touched, on every call). "
            if setup.get("malloc_env") else "malloc: glibc's defaults. ")
  how = ("Each size is the median of the repeats, sizes taking turns; the calls are the exchanges' own (in the "
         "node flat's grouped allreduce, across nodes hier's cross allreduce), in a tf.function under stable "
         "names, as the measured rows run them." if calibrated_in_function(report) else
         "Each size timed by eager allreduces, each under a new name.")
  if any("plan_calibration" in (launch or {}) for launch in report["launches"].values()):
    how += (" Timed in every repeat of the measurement below (before each round of rows), and fitted by least "
            "squared relative error; hybrid planned with a separate 5-repeat calibration taken before the rows, "
            "as the start-up probe would.")
  lines = [f"# Scaling on the emulated cluster ({setup['date']})", "",
           f"Emulated hosts: network namespaces on one {setup['cores']}-core machine, links {setup['rate']} "
           f"each way (tc tbf). Buckets {setup['threshold_mb']:g} MB (flat/hier/hybrid); stock horovod with "
           f"HOROVOD_FUSION_THRESHOLD={setup['horovod_fusion_mb']:g} MB. Medians of {setup['repeats']} repeats, "
           "each the slowest rank's time; algorithms take turns within each repeat, in an order that rotates. float32 buffers. " + malloc +
           "Every 'host' shares the same cores, and other work ran on the machine meanwhile.", "",
           f"## Calibration (alpha-beta per level, fitted to allreduces of {calibration_range(report)}, "
           "all groups of a level at once)", "",
           "Inside a node the bandwidth is per rank; across nodes it is per host link, the host's cross groups "
           f"sharing it (comm/cost_model.py). {how}", "",
           "| topology | level | group | alpha (us per call) | bandwidth (GB/s) | per |", "|---|---|---|---|---|---|"]
  for name in ("1x4", "2x2", "4x1"):
    launch = report["launches"].get(name)
    if not launch:
      continue
    labels = {"pair": "intra: hier's reduce-scatter + allgather", "copy": "hier's local pass over a bucket",
              "flat_call": "flat's call over every rank"}
    for level in ("intra", "pair", "copy", "inter", "flat_call"):
      c = launch["calibration"].get(level)
      if c and c["points"]:
        group = {"inter": launch["nodes"], "flat_call": launch["ranks"]}.get(level, launch["local_size"])
        alpha = f"{c['alpha_us']:.0f}" if c.get("alpha_us") is not None else "-"
        lines.append(f"| {name} | {labels.get(level, level)} | {group} ranks | {alpha} | "
                     f"{c['gbps'] or float('inf'):.3f} | {c.get('per', 'rank')} |")
  lines += ["", "## Measured vs predicted (comm/cost_model.py with the calibration above)", "",
            "| topology | case | MB | algorithm | measured ms | predicted ms | pred/meas | link MB sent per host | "
            "model's link MB per host | hybrid's plan |",
            "|---|---|---|---|---|---|---|---|---|---|"]
  within = total = 0
  for topo, r in comm_rows(report):
    ratio = r["predicted_s"] / r["measured_s"]
    total += 1
    within += abs(ratio - 1) <= 0.25
    plan = " ".join(r["plan"]) if r["algorithm"] == "hybrid" else ""
    lines.append(f"| {topo} | {r['case']} | {r['bytes'] / MB:.1f} | {r['algorithm']} | {r['measured_s'] * 1e3:.0f} | "
                 f"{r['predicted_s'] * 1e3:.0f} | {ratio:.2f} | {r['link_mb_per_host']:.1f} | "
                 f"{r.get('model_link_mb_per_host', float('nan')):.1f} | {plan} |")
  gaps = hybrid_gaps(report)
  worst = max(gaps, key=lambda g: g[2]) if gaps else None
  lines += ["", "Targets (ratios from this one run):", "",
            f"- model within 25% of the measurement: {within} of {total} rows.",
            (f"- hybrid / faster of flat and hier: at most {worst[2]:.2f} ({worst[0]}, {worst[1]}); "
             f"{sum(g[2] <= 1.10 for g in gaps)} of {len(gaps)} cases within 1.10.") if worst else "- hybrid: not measured."]
  lines += ["", "## Training: images/sec per rank S, efficiency e = S_N / S_1, T = N * S * e", "",
            f"Synthetic batch of {TRAIN_BATCH} per rank, SGD, median of {setup['train_steps']} steps. N=1: 1 host; "
            "N=2: 2 hosts x 1; N=4: 2 hosts x 2. 'comm share' = 1 - (step without exchange) / (step), at the same N: "
            "the part of e lost to communication rather than to the shared CPU.", "",
            "| model | N | algorithm | step s | S img/s/rank | e | T img/s | comm share |", "|---|---|---|---|---|---|---|---|"]
  for model, n, variant, step, s, e, t, share in training_table(report):
    lines.append(f"| {model} | {n} | {variant} | {step:.3f} | {s:.1f} | {e:.2f} | {t:.1f} | {share:.2f} |")
  lines += ["", "## Simulation to cluster scale: one gradient exchange, 32 MB buckets", ""]
  for key, sim in report["simulation"].items():
    lines += [f"Parameters ({key}): {json.dumps(sim['params'])}", "",
              "| model | ranks | ring per tensor ms | ring ms | hier ms | hybrid ms | ring / hybrid | "
              "ring per tensor / hybrid |", "|---|---|---|---|---|---|---|---|"]
    for model, per in sim["models"].items():
      for p, t in per.items():
        lines.append(f"| {model} | {p} | {t['ring_per_tensor'] * 1e3:.0f} | {t['ring'] * 1e3:.1f} | "
                     f"{t['hier'] * 1e3:.1f} | {t['hybrid'] * 1e3:.1f} | {t['ring'] / t['hybrid']:.1f} | "
                     f"{t['ring_per_tensor'] / t['hybrid']:.1f} |")
    lines.append("")
  lines += notes(report)
  text = "\n".join(lines) + "\n"
  with open(os.path.join(out_dir, "scaling.md"), "w") as fh:
    fh.write(text)
  print(text)
  _plots(report, out_dir)


def notes(report) -> list[str]:
  """What the model explains and what it cannot, with this run's figures."""
  two = report["launches"].get("2x2") or {}
  link = {r["algorithm"]: r for r in two.get("comm", []) if r["case"] == "resnet50"}
  cal = (two.get("calibration") or {}).get("inter") or {}
  out = ["## What the model can and cannot explain", ""]
  if cal.get("gbps"):
    # The calibration's inter bandwidth is per host link (both cross groups of a host share it).
    out.append(f"- **The links are not what limits here.** Across hosts the calibration gives {cal['gbps'] * 1e3:.0f} MB/s per "
               f"host link, i.e. about {cal['gbps'] * 8e3:.0f} Mbit/s against "
               f"{report['setup']['rate']} configured: TCP between namespaces runs in the kernel's (here gVisor's) "
               "network stack on the same 2 cores as the ranks, so the 'network' is CPU-bound and slows whenever "
               "the ranks compute. The model's inter-node beta is that CPU-bound rate, not the tc rate.")
  intra = (two.get("calibration") or {}).get("intra") or {}
  if intra.get("alpha_us"):
    out.append(f"- **alpha is scheduling, not wire latency.** tc here has no netem (no delay), so a small "
               f"allreduce should cost microseconds; the calibration gives {intra['alpha_us'] / 1e3:.1f} ms per call "
               "in a node of 2 x 2, because 4 ranks, Horovod's background threads (a 1 ms cycle each) and other "
               "jobs share 2 cores. It was 25-50 ms, and the model 20-30% low on 1 x 4, until the launches told "
               "Open MPI to yield (mpi_yield_when_idle): -H's slots hide that the hosts share cores, and "
               "ranks polling without yielding each held a core.")
  if {"flat", "hier"} <= link.keys():
    out.append(f"- **Why hier gains little over flat on 2 x 2.** For ResNet-50's gradients each host sent "
               f"{link['flat']['link_mb_per_host']:.0f} MB on its link with flat and {link['hier']['link_mb_per_host']:.0f} MB "
               f"with hier ({link['flat']['bytes'] / MB:.0f} MB of gradients). A ring over 4 ranks would send "
               f"1.5 x that per host. Sending the buffer's size once per host is what recursive halving/doubling "
               "(Rabenseifner, one of Open MPI's tuned allreduce algorithms) does when its first and last steps pair "
               "ranks 0-1 and 2-3, the same host when ranks are numbered host by host: flat is then already "
               "hierarchical in what crosses the link, the same bytes as hier in one call instead of three. "
               "This is the first measurement's puzzle (flat 25 MB 1.4 s, the three phases no faster): the "
               "cross-host phase of hier moves as many bytes per host link as "
               "flat does, and two concurrent pairs share each link.")
  if {"flat", "hier"} <= link.keys() and "model_link_mb_per_host" in link["flat"]:
    out.append(f"- **What the model charges the link.** comm/cost_model.py counts bytes per host link: flat "
               f"(Open MPI's hierarchy-aware allreduce) and hier's cross phase both 2(c-1)/c n, i.e. "
               f"{link['flat']['model_link_mb_per_host']:.0f} and {link['hier']['model_link_mb_per_host']:.0f} MB per "
               f"host for ResNet-50 on 2 x 2 against {link['flat']['link_mb_per_host']:.0f} and "
               f"{link['hier']['link_mb_per_host']:.0f} MB measured. By those bytes hier only adds two in-node "
               "calls and its own passes over the buffer, and the per-level formula had flat ahead. Measured as "
               "one call over every rank, flat's own cost across hosts was higher than that formula (11-13% "
               "over hier at 32 MB in two runs), so the model takes flat's call as measured "
               "(CostModel.flat_call), and hybrid then picks hier where its cost is lower. Against a ring flat "
               "(Gloo, NCCL: 2(g-1)/g n per host) hier wins by link bytes alone, the simulation below.")
  out.append("- **Training efficiency here measures the shared cores.** N=1 has both cores to itself; at N=2 and "
             "4 the ranks of every emulated host share the same 2 cores with each other, with Horovod's and Open "
             "MPI's polling threads and with other jobs, so S_N falls far more than communication explains (see "
             "the step without exchange). The comm share column is the part that belongs to the exchange.")
  sim = report["simulation"]["p40"]["models"]
  at = lambda m, k: sim[m].get(1024, sim[m].get("1024"))[k]
  r50 = at("resnet50", "ring_per_tensor") / at("resnet50", "hybrid")
  alex = at("alexnet", "ring_per_tensor") / at("alexnet", "hybrid")
  r50_fused = at("resnet50", "ring") / at("resnet50", "hybrid")
  alex_fused = at("alexnet", "ring") / at("alexnet", "hybrid")
  out.append(f"- **At cluster scale (stated P40 assumptions).** The model reproduces the direction of Jia et al.: "
             f"hybrid pulls ahead of a flat ring as ranks grow, because a ring pays 2(p-1) step latencies per "
             f"buffer and the cross-node ring of hier has p/8 ranks. At 1,024 ranks, against a ring over the same "
             f"32 MB buckets, hybrid is {r50_fused:.1f}x faster for ResNet-50 and {alex_fused:.1f}x for AlexNet, "
             f"short of their 11x and 3x; against a ring per gradient tensor (no fusion: 161 ResNet-50 tensors, "
             f"16 AlexNet tensors) it is {r50:.0f}x and {alex:.1f}x. AlexNet's 3x fits the per-tensor baseline; "
             "ResNet-50's 11x would need about a sixth of the assumed 10 us per ring step, which would then bring "
             "AlexNet's factor near 1. No single per-step latency gives both, so the model cannot account for "
             "the paper's figures by latency and bandwidth alone: how much came from their tensor fusion, "
             "GPUDirect RDMA and NCCL's own per-call costs it cannot separate.")
  return out


def _plots(report, out_dir):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  topologies = [t for t in ("1x4", "2x2", "4x1") if report["launches"].get(t)]
  if topologies:
    fig, axes = plt.subplots(1, len(topologies), figsize=(5 * len(topologies), 4), squeeze=False)
    for ax, topo in zip(axes[0], topologies):
      rows = [r for t, r in comm_rows(report) if t == topo]
      for i, algorithm in enumerate(ALGORITHMS):
        pts = sorted((r["bytes"] / MB, r["measured_s"], r["predicted_s"]) for r in rows if r["algorithm"] == algorithm)
        color = f"C{i}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, label=f"{algorithm} measured")
        ax.plot([p[0] for p in pts], [p[2] for p in pts], "--", color=color, alpha=0.7, label=f"{algorithm} model")
      ax.set_xscale("log")
      ax.set_yscale("log")
      ax.set_xlabel("MB exchanged (single buffers, then a gradient set)")
      ax.set_ylabel("seconds")
      ax.set_title(f"{topo} (hosts x ranks), {report['setup']['rate']} links")
      ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "scaling_comm.png"), dpi=100)
    plt.close(fig)
  rows = training_table(report)
  if rows:
    fig, ax = plt.subplots(figsize=(6, 4))
    for model in sorted({r[0] for r in rows}):
      for variant in ["-"] + ALGORITHMS:
        pts = [(r[1], r[5]) for r in rows if r[0] == model and (r[2] == variant or r[1] == 1)]
        if variant == "-" or len(pts) < 2:
          continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{model} {variant}")
    ax.set_xlabel("ranks N")
    ax.set_ylabel("scaling efficiency e = S_N / S_1")
    ax.set_xticks([1, 2, 4])
    ax.set_ylim(0, 1.1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("training efficiency (all ranks share 2 cores)")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "scaling_training.png"), dpi=100)
    plt.close(fig)


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rate", default="1gbit", help="link rate between emulated hosts (tc tbf), each way")
  # A multiple of the 4 algorithms, so each takes every place in the rotating order equally
  # often (at 2 the 1x4 32 MB hybrid, the same plan as flat, came out 1.28 x flat); 12
  # since the launches yield (mpi_yield_when_idle): a whole run took 3.5 minutes at 7,
  # and the 3-4 ms rows moved by a millisecond, 30%, between runs.
  parser.add_argument("--repeats", type=int, default=12,
                      help="timed repeats per algorithm and size, and per calibration size (median)")
  parser.add_argument("--train_steps", type=int, default=3, help="timed training steps per variant (median)")
  parser.add_argument("--full", action="store_true",
                      help="also 64 MB buffers, AlexNet's gradients, 4 hosts x 1 and every algorithm in training")
  parser.add_argument("--only", default="", help="launches to run, e.g. 2x2,1x4 (default: all)")
  parser.add_argument("--report", action="store_true", help="rewrite the report from results/bench_scaling.json")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--launch", default="", help=argparse.SUPPRESS)
  parser.add_argument("--out", default="", help=argparse.SUPPRESS)
  parser.add_argument("--iface", default=IFACE, help=argparse.SUPPRESS)
  parser.add_argument("--comm", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--training", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--hybrid_cost", default="", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.report:
    path = os.path.join(REPO, "results", "bench_scaling.json")
    with open(path) as fh:
      report = json.load(fh)
    report["simulation"] = simulation(report["launches"].get("2x2"))
    with open(path, "w") as fh:
      json.dump(report, fh, indent=1)
    write_report(report, os.path.join(REPO, "results"))
  else:
    worker(args) if args.worker else driver(args)


if __name__ == "__main__":
  main()
