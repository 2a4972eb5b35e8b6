"""The cluster-scale simulation: one gradient exchange at 64-2,048 ranks with stated P40-cluster parameters.

Its own formulas: alpha is a latency per ring step (NCCL on GPUs, where a call
costs microseconds), not comm/cost_model.py's per Horovod call; beta_out is per
host link there and here. "ring" is NCCL's ring over all ranks, Jia et al.'s
baseline, not the CPU flat of comm/cost_model.py (Open MPI's hierarchy-aware
allreduce). Not with this machine's calibration: its alpha (milliseconds of CPU
scheduling per call) would extrapolate to hours and say nothing about a cluster.
"""
import math

from bench.scaling.settings import MB

# Stated assumptions for a 2018 P40 cluster like Jia et al.'s: 8 GPUs per node on
# PCIe 3.0 x16 (about 10 GB/s, 5 us per step), 100 Gbit/s between nodes (12.5 GB/s
# nominal, ~10 GB/s achieved, 10 us per step including the host staging of TCP/RDMA).
P40 = {"local": 8, "intra": (5e-6, 1 / 10e9), "inter": (10e-6, 1 / 10e9)}
P40_STATED = {"ranks_per_node": 8, "intra": "PCIe 3.0: 5 us per ring step, 10 GB/s",
              "inter": "100 Gbit/s: 10 us per ring step, 10 GB/s"}
SIM_RANKS = (64, 128, 256, 512, 1024, 2048)
SIM_MODELS = ("resnet50", "alexnet")
SIM_BUCKET = 32 * MB


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
  return ring_time(max(a_in, a_out), max(b_in, b_out), local * nodes, nbytes)


def split(total: int, size: int) -> list[int]:
  """Buckets of `size` bytes and one remainder holding `total` bytes (the simulation's fusion)."""
  return [size] * (total // size) + ([total % size] if total % size else [])


def simulate(params: dict, tensor_bytes: list[int], ranks=SIM_RANKS, bucket: int = SIM_BUCKET) -> dict:
  """Per ranks: seconds of one exchange of these gradients.

  ring, hier, hybrid: `bucket`-byte buckets (hybrid: the cheaper per bucket);
  ring_per_tensor: one ring allreduce per gradient, no fusion (a baseline
  like NCCL-based training that reduces each tensor as it comes).
  """
  local = params["local"]
  buckets = split(sum(tensor_bytes), bucket)
  out = {}
  for p in ranks:
    nodes = max(1, p // local)
    flat = [flat_sim_time(params["intra"], params["inter"], local, nodes, n) for n in buckets]
    hier = [hier_sim_time(params["intra"], params["inter"], local, nodes, n) for n in buckets]
    out[p] = {"ring_per_tensor": sum(flat_sim_time(params["intra"], params["inter"], local, nodes, n)
                                     for n in tensor_bytes),
              "ring": sum(flat), "hier": sum(hier), "hybrid": sum(min(f, h) for f, h in zip(flat, hier))}
  return out


def simulation() -> dict:
  """The report's simulation: ResNet-50's and AlexNet's real gradient tensors with the P40 parameters."""
  from models import gradient_sets  # builds Keras models: only when the report is written
  tensors = {m: [4 * math.prod(shape) for shape in gradient_sets.shapes(m)] for m in SIM_MODELS}
  return {"p40": {"params": P40_STATED, "models": {m: simulate(P40, t) for m, t in tensors.items()},
                  "tensors": {m: len(t) for m, t in tensors.items()}}}
