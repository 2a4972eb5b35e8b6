"""The one seam where gradients cross ranks.

train.py calls the GradientExchange that make_gradient_exchange returns
between tape.gradient and the optimizer, and nowhere else are gradients
communicated. Algorithms (--allreduce):

  horovod  one Horovod allreduce per gradient, left to Horovod's own tensor
           fusion (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME): the stock baseline
  flat     our fused buckets (comm/fusion.py), one Horovod grouped allreduce each
  hier     our fused buckets, each reduce-scatter / allreduce / allgather on
           process sets (comm/hierarchical.py)
  hybrid   per bucket, the cheaper of flat and hier by the alpha-beta model
           (comm/cost_model.py), measured at start-up (comm/probe.py) or given

Overlap: buckets follow backprop order and each depends only on its own
gradients, so inside the tf.function a bucket's collective can start while
backprop still runs (TensorFlow runs an op once its inputs exist; Horovod's
ops are asynchronous kernels).

--compression=powersgd (comm/powersgd.py) compresses before fusion: its P's with
the gradients it sends whole, then its Q's, each go through this exchange as one
call of their own (GradientExchange.compressed), so they travel by the chosen
algorithm in few buckets like any gradients. --compression=auto
(comm/compression_choice.py) decides at start-up, by the exchange's cost model,
which matrices PowerSGD compresses, if any (make_compression).
"""
import dataclasses
import math
import os

import tensorflow as tf

from comm import compression_choice, cost_model, fusion, hierarchical, powersgd, probe
from comm.topology import World
from flags.config import CommConfig


def wire_dtype(dtype: tf.DType, compression: str) -> tf.DType:
  """The dtype a gradient of `dtype` travels in.

  Horovod 0.28's TensorFlow ops accept no bfloat16, so bfloat16 travels as
  float32 (exact); fp16 compression halves float32 (and float64) on the wire,
  as Horovod's Compression.fp16, but leaves bfloat16 alone: its range exceeds
  float16's.
  """
  if dtype == tf.bfloat16:
    return tf.float32
  if compression == "fp16" and dtype in (tf.float32, tf.float64):
    return tf.float16
  return dtype


class GradientExchange:
  """exchange(grads: list[tf.Tensor], name='') -> list[tf.Tensor]: each gradient's mean over all ranks.

  Call once per step inside the tf.function (and once more per call name:
  PowerSGD's P's and Q's are calls of their own, see compressed). Shapes must
  be static; the bucket plan is made when the function is traced, from the
  shapes and the (rank-identical) cost model, so every rank makes the same
  plan. `plan` describes it: one dict per bucket, every call's buckets.
  """

  def __init__(self, hvd, config: CommConfig, world: World, groups=None, model=None, log=None):
    self.hvd, self.config, self.world = hvd, config, world
    self.groups, self.model, self.log = groups, model, log
    self.plans: dict[str, list[dict]] = {}  # per call name, in the order first traced

  @property
  def plan(self) -> list[dict]:
    """Every call's buckets: the plain exchange's first, as they always were, then each named call's
    (with 'call': its name) in the order traced."""
    return [bucket for name in sorted(self.plans, key=bool) for bucket in self.plans[name]]

  def __call__(self, grads, name: str = ""):
    """name: a prefix of this call's Horovod tensor names, which must differ between calls in one
    step (Horovod's coordinator matches collectives across ranks by name); '' for the plain exchange."""
    grads = [tf.convert_to_tensor(g) for g in grads]
    tag = f"{name}_" if name else ""
    if self.config.allreduce == "horovod":
      return [self._horovod(g, f"{tag}grad_{i}") for i, g in enumerate(grads)]
    out = list(grads)
    threshold = int(self.config.fusion_threshold_mb * fusion.MB)
    buckets = fusion.plan([(g.shape.num_elements(), g.dtype.name) for g in grads], threshold)
    plan = []
    serial, previous = self.groups is not None and hierarchical.serial_reducescatter(self.hvd), None
    for b, members in enumerate(buckets):
      dtype = grads[members[0]].dtype
      wire = wire_dtype(dtype, self.config.wire)
      nbytes = sum(grads[i].shape.num_elements() for i in members) * wire.size
      algorithm, predicted = self._choose(nbytes, len(members))
      if algorithm == "hier":
        buffer = tf.cast(fusion.pack([grads[i] for i in members]), wire)
        reduced = hierarchical.allreduce_mean(self.hvd, buffer, self.world, self.groups, f"{tag}bucket_{b}",
                                              after=previous if serial else None)
        previous = reduced
        parts = fusion.unpack(tf.cast(reduced, dtype), [grads[i].shape for i in members])
      else:
        # One grouped allreduce: Horovod packs the bucket into its fusion
        # buffer and reduces it as one collective (one copy in, one out).
        # tf.concat + tf.split around a plain allreduce cost two more copies,
        # and Horovod fused buckets ready together again: ResNet-50 on 4 ranks
        # took 455 ms that way against 401 ms grouped (horovod 419 ms).
        reduced = self.hvd.grouped_allreduce([tf.cast(grads[i], wire) for i in members], op=self.hvd.Average,
                                             name=f"{tag}bucket_{b}")
        parts = [tf.cast(r, dtype) for r in reduced]
      for i, g in zip(members, parts):
        out[i] = g
      plan.append({"bucket": b, "tensors": len(members), "bytes": int(nbytes), "dtype": wire.name,
                   "algorithm": algorithm, "predicted_ms": None if predicted is None else round(predicted * 1e3, 3),
                   **({"call": name} if name else {})})
    if plan != self.plans.get(name):
      self.plans[name] = plan
      if self.log:
        self.log("allreduce %s%s: %d buckets (threshold %g MB, compression %s): %s", self.config.allreduce,
                 f" ({name})" if name else "", len(plan), self.config.fusion_threshold_mb, self.config.compression,
                 describe(plan))
    return out

  def compressed(self, grads, compressor: "powersgd.PowerSGD"):
    """compressor's step (comm/powersgd.py) over this exchange: (each gradient's approximate mean
    over ranks, its Update to apply once the step is taken). Its two allreduces are two calls,
    'powersgd_p' (the P's with the gradients sent whole) and then 'powersgd_q' (the Q's). Each
    call's tensors are cast to their wire dtype first, so that under --powersgd_wire=fp16 the
    whole vectors share the P's buckets (fusion never mixes dtypes in one)."""
    names = iter(("powersgd_p", "powersgd_q"))

    def allreduce_mean(tensors):
      sent = [tf.cast(t, wire_dtype(t.dtype, self.config.wire)) for t in tensors]
      return [tf.cast(r, t.dtype) for r, t in zip(self(sent, name=next(names)), tensors)]
    return compressor(grads, allreduce_mean)

  def _horovod(self, g, name):
    wire = wire_dtype(g.dtype, self.config.wire)
    # Horovod: average, so the update equals the single-worker update on the
    # global batch (Goyal et al. eq. 3); stable names let Horovod's
    # coordinator match the same tensor across ranks.
    reduced = self.hvd.allreduce(tf.cast(g, wire), op=self.hvd.Average, name=name)
    return tf.cast(reduced, g.dtype)

  def _choose(self, nbytes: int, tensors: int) -> tuple[str, float | None]:
    if self.config.allreduce == "hybrid":
      return cost_model.choose(self.model, self.world, nbytes, tensors)
    return self.config.allreduce, None


def describe(plan: list[dict]) -> str:
  """One line: per bucket 'algorithm:MB', e.g. 'hier:32.0 flat:0.4'."""
  return " ".join(f"{p['algorithm']}:{p['bytes'] / fusion.MB:.1f}" for p in plan)


def cost_of(hvd, config: CommConfig, world: World, gradient_bytes: int = 0) -> cost_model.CostModel:
  """The CostModel this job's exchange is priced by: --hybrid_cost when given, else probed (a
  collective, on every rank; a second or so): each level under hier and hybrid (probe.measure),
  the one allreduce over every rank under flat and horovod (probe.measure_flat); gradient_bytes: the
  model's, which bound the probe's largest message (probe.large_bytes; 0: its default)."""
  if config.hybrid_cost != "probe":
    return cost_model.parse(config.hybrid_cost)
  if config.allreduce in ("hier", "hybrid"):
    return probe.measure(hvd, world, hierarchical.register(hvd, world), probe.large_bytes(gradient_bytes))
  return probe.measure_flat(hvd, world, probe.large_bytes(gradient_bytes))


def make_gradient_exchange(hvd, config: CommConfig, world: World, log=None,
                           model: cost_model.CostModel | None = None) -> GradientExchange:
  """The exchange of this job. hier and hybrid add their process sets (a collective, on every
  rank); hybrid prices its buckets by `model`, else by cost_of's (--compression=auto's, made at
  start-up, is passed here: one probe, one model for both choices)."""
  groups = None
  if config.allreduce in ("hier", "hybrid"):
    groups = hierarchical.register(hvd, world)
  if config.allreduce != "hybrid":
    model = None
  elif model is None:
    model = cost_of(hvd, config, world)
  if model is not None and log:
    log("hybrid cost model: in node %.0f us + %.2f GB/s per rank, across nodes %.0f us + %.2f GB/s per host "
        "link, flat as %s", model.intra.alpha * 1e6, model.intra.gbps, model.inter.alpha * 1e6, model.inter.gbps,
        model.flat)
  return GradientExchange(hvd, config, world, groups, model, log)


def make_powersgd(config: CommConfig, variables, seed: int, log=None, mask=None) -> "powersgd.PowerSGD | None":
  """PowerSGD's state for the gradients of `variables` (their static shapes) under
  --compression=powersgd, or auto with its choice of matrices as mask (None: every one the plan
  allows); None under the other compressions. Made before the checkpoint is restored (it holds
  the state); its Qs start from a draw seeded alike on every rank. Logs what one compressed step
  sends."""
  if config.compression not in ("powersgd", "auto"):
    return None
  shapes = [v.shape for v in variables]
  wire = wire_dtype(tf.float32, config.powersgd_wire)  # P and Q, whatever the gradients' dtype
  compressor = powersgd.PowerSGD(shapes, rank=config.powersgd_rank, wire=wire, seed=seed, mask=mask,
                                 error_feedback=config.powersgd_error_feedback)
  if log:
    sent = powersgd.wire_bytes(shapes, compressor.views, config.powersgd_rank, wire.size)
    log("powersgd rank %d from step %d: %d of %d gradients compressed; a step sends %.2f MB in two allreduces "
        "(P's and whole vectors %.2f, Q's %.2f) instead of %.2f MB, %.0fx less, as %s", config.powersgd_rank,
        config.compression_start, sum(v is not None for v in compressor.views), len(shapes), sent.compressed / fusion.MB,
        sent.first / fusion.MB, sent.second / fusion.MB, sent.uncompressed / fusion.MB,
        sent.uncompressed / max(sent.compressed, 1), wire.name)
  return compressor


HOROVOD_FUSION_BYTES = 128 * fusion.MB  # Horovod's HOROVOD_FUSION_THRESHOLD default: --allreduce=horovod's buckets


def fusion_bytes(config: CommConfig) -> int:
  """The bucket size of this job's exchange in bytes: --fusion_threshold_mb, or under horovod Horovod's own."""
  if config.allreduce == "horovod":
    return int(os.environ.get("HOROVOD_FUSION_THRESHOLD", HOROVOD_FUSION_BYTES))
  return int(config.fusion_threshold_mb * fusion.MB)


@dataclasses.dataclass(frozen=True)
class Compression:
  """What --compression settled on. config: the exchange's settings as given; powersgd: PowerSGD's
  state (None under none and fp16); compress: whether steps compress from --compression_start on
  (powersgd: yes; auto: its choice, which the batch controller may revise from the run's own update
  times); cost: the CostModel auto priced with (None otherwise), for make_gradient_exchange to
  reuse; summary: summary.json's `compression` entry."""
  config: CommConfig
  powersgd: "powersgd.PowerSGD | None"
  cost: "cost_model.CostModel | None"
  summary: dict
  compress: bool = False
  chosen: bool = True  # False: auto's choice left to each world (--elastic: no collective before its loop)


def make_compression(hvd, config: CommConfig, world: World, variables, seed: int, log=None,
                     encode_seconds=None, choose: bool = True) -> Compression:
  """The compression of this job. powersgd and the others as given; under auto, PowerSGD's state for
  every matrix its plan allows (so a later choice, another world's or the batch controller's, has
  it) and the choice of choose_auto, or with choose=False none yet (--elastic: choose_auto's probe
  and agreement are collectives, which a rank joining a later world would meet alone before the
  elastic loop, and the world hung; each world chooses instead, training/shape.py).
  encode_seconds: choose_auto's (tests)."""
  compressor = make_powersgd(config, variables, seed, log if config.compression == "powersgd" else None)
  if config.compression != "auto":
    entry = {"kind": config.compression}
    if compressor is not None:
      sent = powersgd.wire_bytes([v.shape for v in variables], compressor.views, config.powersgd_rank,
                                 compressor.wire.size)
      entry.update(rank=config.powersgd_rank, layers_compressed=sum(v is not None for v in compressor.views),
                   bytes_per_step={"uncompressed": sent.uncompressed, "compressed": sent.compressed})
    return Compression(config, compressor, None, entry, compress=compressor is not None)
  if not choose:
    return Compression(config, compressor, None, {"kind": "auto", "chose": "in each world"}, chosen=False)
  return choose_auto(Compression(config, compressor, None, {}), hvd, world, variables, log, encode_seconds)


def choose_auto(compression: Compression, hvd, world: World, variables, log=None, encode_seconds=None) -> Compression:
  """--compression=auto's choice for this world (at start-up, and again in each world of an elastic
  run: the links, the ranks and so the prices change): prices each planned matrix both ways
  (comm/compression_choice.py) by cost_of's model and encode times measured here (a few seconds at
  most, probe.encode_seconds; encode_seconds: given instead, e.g. by a test whose verdict must not
  depend on the machine's speed), logs one line with what it chose and why, and sets PowerSGD's mask
  to the cheapest set of matrices to compress (the plan's every matrix if none can be). Unlike
  powersgd, the gradients auto sends whole keep their own dtype (CommConfig.wire), as under none:
  --powersgd_wire is P's and Q's only, so the choice is PowerSGD's alone, not fp16's.

  Collectives on every rank: the probe, and one allreduce (Max) of the encode times, which differ
  between ranks; the choice is then made from values every rank holds alike, so every rank enters
  the same collectives in each step."""
  config, compressor = compression.config, compression.powersgd
  shapes = [v.shape for v in variables]
  model = cost_of(hvd, config, world, sum(4 * math.prod(int(d) for d in shape) for shape in shapes))
  if encode_seconds is None:
    own = probe.encode_seconds(compressor.planned, config.powersgd_rank, compressor.wire,
                               config.powersgd_error_feedback)
    # Horovod: the slowest rank's times, so every rank chooses alike (inf, unmeasured somewhere, stays inf).
    encode_seconds = hvd.allreduce(tf.constant(own, tf.float64), op=hvd.Max, name="auto_encode_seconds").numpy().tolist()
  dtype = wire_dtype(tf.as_dtype(variables[0].dtype), "none").name if variables else "float32"
  choice = compression_choice.choose(
      shapes, compressor.planned, config.powersgd_rank, encode_seconds, threshold=fusion_bytes(config), dtype=dtype,
      wire=compressor.wire.name, overlap=compression_choice.OVERLAP,
      price=lambda nbytes, tensors: cost_model.bucket_time(model, world, config.allreduce, nbytes, tensors))
  compress = choice.chosen is not choice.plain
  compressor.set_mask(choice.best.mask if choice.best is not None else None)
  if log:
    log("compression auto (%s over %d ranks, %s: %s): %s%s", config.allreduce, world.size,
        "--hybrid_cost" if config.hybrid_cost != "probe" else "probed", describe_model(model, world),
        choice.describe(), f"; from step {config.compression_start}" if compress else "")
  entry = {"kind": "auto", "wire": compressor.wire.name, **choice.summary()}
  return Compression(config, compressor, model, entry, compress)


def describe_model(model: cost_model.CostModel, world: World) -> str:
  """One flat allreduce of this world as the model prices it: 'N us + G GB/s a call' (GB/s of the buffer)."""
  alpha = cost_model.flat_time(model, world, 0)
  per_byte = cost_model.flat_time(model, world, 1) - alpha
  return f"{alpha * 1e6:.0f} us + {1e-9 / per_byte if per_byte else float('inf'):.3g} GB/s a call"
