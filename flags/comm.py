"""Flags of the gradient exchange between ranks."""
from absl import flags as absl_flags

from comm import cost_model
from flags.config import ALGORITHMS, COMPRESSIONS, CommConfig, ConfigError


def define() -> None:
  absl_flags.DEFINE_enum(
      "allreduce", "horovod", ALGORITHMS,
      "How gradients cross ranks: horovod (Horovod's allreduce of each gradient, with its own "
      "tensor fusion: the stock baseline); flat (our fused buckets, one allreduce each); hier "
      "(fused buckets, reduce-scatter in the node, allreduce across nodes, allgather in the "
      "node); hybrid (per bucket the cheaper of flat and hier by an alpha-beta cost model).")
  absl_flags.DEFINE_float(
      "fusion_threshold_mb", 32.0,
      "Bucket size of flat/hier/hybrid in MB: gradients are packed in backprop order up to it; "
      "a gradient at or above it travels alone. 0 sends every gradient alone.")
  absl_flags.DEFINE_enum(
      "compression", "none", COMPRESSIONS,
      "fp16: float32 gradients travel as float16 (half the bytes) and are cast back after the "
      "collective; any algorithm.")
  absl_flags.DEFINE_integer(
      "ranks_per_node", 0,
      "Ranks per node for hier/hybrid: 0 takes the hosts' layout from Horovod; N > 0 groups "
      "consecutive ranks N by N, e.g. to emulate 2 nodes of 2 ranks on one host with -np 4.")
  absl_flags.DEFINE_string(
      "hybrid_cost", "probe",
      "hybrid's cost model: 'probe' (time a few collectives per level at start-up) or "
      "'ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER[,mpi|ring]', latency in microseconds "
      "per collective, bandwidth in GB/s (across nodes: per host link), and the flat allreduce's "
      "model (mpi: Open MPI's hierarchy-aware one, the default; ring: Gloo's or NCCL's), e.g. "
      "300,5,300,12.5,ring.")


def build(f) -> CommConfig:
  """The CommConfig of parsed flags. --ranks_per_node is checked by
  comm.topology.from_horovod_values, which needs it first (train.py: comm.init)."""
  if f.fusion_threshold_mb < 0:
    raise ConfigError(f"--fusion_threshold_mb={f.fusion_threshold_mb} must be 0 or more, e.g. "
                      "--fusion_threshold_mb=32.")
  if f.hybrid_cost != "probe":
    try:
      cost_model.parse(f.hybrid_cost)
    except ValueError:
      raise ConfigError(f"--hybrid_cost={f.hybrid_cost!r} is neither 'probe' nor four positive "
                        "numbers ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER and an optional "
                        "flat model mpi or ring, e.g. --hybrid_cost=300,5,300,12.5,ring.") from None
  return CommConfig(allreduce=f.allreduce, fusion_threshold_mb=f.fusion_threshold_mb,
                    compression=f.compression, ranks_per_node=f.ranks_per_node,
                    hybrid_cost=f.hybrid_cost)
