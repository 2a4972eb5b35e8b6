"""Flags of the gradient exchange between ranks."""
from absl import flags as absl_flags

from comm import cost_model
from flags.config import ALGORITHMS, COMPRESSIONS, POWERSGD_WIRES, CommConfig, ConfigError

POWERSGD = ("powersgd", "auto")  # the compressions that may run PowerSGD, and read its flags


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
      "collective; powersgd: each weight matrix's gradient travels as a rank --powersgd_rank "
      "approximation P Q^T in two allreduces, with error feedback (Vogels et al. 2019; "
      "docs/communication.md), from step --compression_start on; auto: powersgd on the matrices "
      "where the cost model (probed at start-up, or --hybrid_cost) with encode times measured at "
      "start-up predicts it pays, none if nowhere (one line at start-up says why). Any algorithm.")
  absl_flags.DEFINE_integer(
      "powersgd_rank", 4,
      "--compression=powersgd or auto: the columns of P and Q. Higher sends more and approximates better "
      "(the authors' advice where rank 4 lost accuracy); a matrix that would not shrink by half "
      "at this rank, and every vector, travels whole.")
  absl_flags.DEFINE_enum(
      "powersgd_wire", "fp32", POWERSGD_WIRES,
      "--compression=powersgd or auto: the dtype P and Q travel in (fp16: half the bytes again), and "
      "under powersgd the gradients it sends whole too (auto sends those as none does); the "
      "orthogonalisation and the residuals stay float32.")
  absl_flags.DEFINE_boolean(
      "powersgd_error_feedback", True,
      "--compression=powersgd or auto: each rank keeps what its step's approximation left out and adds it to "
      "its next gradient (nothing lost, only delayed). false drops it: the paper's ablation, for "
      "measuring what the residual is worth; low ranks then lose accuracy.")
  absl_flags.DEFINE_integer(
      "compression_start", 1000,
      "--compression=powersgd or auto: the steps of the plain exchange before PowerSGD starts (PyTorch's "
      "start_powerSGD_iter and its default): early training is sensitive to approximate "
      "gradients, so set it past the LR warmup (the schedule's line at start-up gives its steps); "
      "0 compresses from the first step.")
  absl_flags.DEFINE_integer(
      "ranks_per_node", 0,
      "Ranks per node for hier/hybrid: 0 takes the hosts' layout from Horovod; N > 0 groups "
      "consecutive ranks N by N, e.g. to emulate 2 nodes of 2 ranks on one host with -np 4.")
  absl_flags.DEFINE_string(
      "hybrid_cost", "probe",
      "The cost model of hybrid and of --compression=auto: 'probe' (time a few collectives at "
      "start-up) or "
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
  if f.powersgd_rank < 1:
    raise ConfigError(f"--powersgd_rank={f.powersgd_rank} must be 1 or more (the columns of P and Q), e.g. "
                      "--powersgd_rank=4.")
  if f.compression_start < 0:
    raise ConfigError(f"--compression_start={f.compression_start} must be 0 or more (steps of the plain exchange "
                      "before PowerSGD); 0 compresses from the first step.")
  if not f.powersgd_error_feedback and f.compression not in POWERSGD:
    raise ConfigError("--powersgd_error_feedback=false drops --compression=powersgd's residuals, and "
                      f"--compression={f.compression} keeps none; add --compression=powersgd, or drop the flag.")
  if f.powersgd_wire != "fp32" and f.compression not in POWERSGD:
    raise ConfigError(f"--powersgd_wire={f.powersgd_wire} sets the dtype of --compression=powersgd's payloads, "
                      f"not of --compression={f.compression}; add --compression=powersgd, or drop --powersgd_wire "
                      "(--compression=fp16 sends whole gradients as float16).")
  return CommConfig(allreduce=f.allreduce, fusion_threshold_mb=f.fusion_threshold_mb,
                    compression=f.compression, ranks_per_node=f.ranks_per_node,
                    hybrid_cost=f.hybrid_cost, powersgd_rank=f.powersgd_rank, powersgd_wire=f.powersgd_wire,
                    compression_start=f.compression_start, powersgd_error_feedback=f.powersgd_error_feedback)
