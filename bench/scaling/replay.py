"""The cost model replayed on the measured cases: Horovod's fusion of ready requests, the seconds the
model predicts for one exchange, and the bytes it says cross each host link."""
from comm import cost_model, fusion

from bench.scaling.settings import MB, THRESHOLD_MB


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
  local, cross = world.local_size, world.cross_size
  kinds = plan or [kind(algorithm, model, world, sum(b), len(b)) for b in buckets]
  flat = [n for b, k in zip(buckets, kinds) if k == "flat" for n in b]
  hier = [sum(b) for b, k in zip(buckets, kinds) if k == "hier"]
  seconds = sum(cost_model.flat_time(model, world, m) for m in fuse(flat, fusion_bytes))
  # hier's phases (cost_model.hier_time): reduce-scatter and allgather of n in the node,
  # the L cross allreduces of n/L sharing the host link.
  seconds += sum(cost_model.node_phases_time(model, local, m) for m in fuse(hier, fusion_bytes))
  # hier's own passes over each bucket (pack, scale, unpack), bucket by bucket.
  seconds += sum(cost_model.local_time(model, sum(b), len(b)) for b, k in zip(buckets, kinds) if k == "hier")
  seconds += sum(cost_model.allreduce_time(model.inter, cross, m, sharing=local)
                 for m in fuse([n / local for n in hier], fusion_bytes))
  return seconds


def kind(algorithm: str, model, world, nbytes: int, tensors: int = 1) -> str:
  """'flat' or 'hier': how `algorithm` sends one bucket (hybrid: cost_model.choose, as comm/exchange.py)."""
  if algorithm == "hybrid":
    return cost_model.choose(model, world, nbytes, tensors)[0]
  return "hier" if algorithm == "hier" else "flat"


def case_buckets(algorithm: str, tensor_bytes: list[int]) -> list[list[int]]:
  """Per bucket its tensors' bytes, as comm/exchange.py buckets float32 gradients (stock horovod:
  one bucket per tensor)."""
  if algorithm == "horovod":
    return [[n] for n in tensor_bytes]
  plan = fusion.plan([(n // 4, "float32") for n in tensor_bytes], int(THRESHOLD_MB * MB))
  return [[tensor_bytes[i] for i in b] for b in plan]


def link_mb_per_host(algorithm: str, model, world, bucket_bytes: list[int]) -> float:
  """MB the cost model says each host sends on its link for one exchange of these buckets.

  The figure to hold against the measured 'link MB sent per host': mpi flat and
  hier 2(c-1)/c n per bucket, a ring 2(g-1)/g n; hybrid as its plan.
  """
  if world.cross_size <= 1:
    return 0.0

  def one(n):
    ring = kind(algorithm, model, world, n) == "flat" and model.flat == "ring"
    return cost_model.allreduce_bytes(world.size if ring else world.cross_size, n)
  return sum(one(n) for n in bucket_bytes) / MB
