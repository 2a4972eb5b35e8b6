"""Flags of the gradient exchange between ranks."""
import dataclasses

from absl import flags as absl_flags

ALGORITHMS = ("horovod",)


@dataclasses.dataclass(frozen=True)
class CommConfig:
  allreduce: str


def define() -> None:
  absl_flags.DEFINE_enum(
      "allreduce", "horovod", ALGORITHMS,
      "How gradients cross ranks: horovod (Horovod's allreduce of each gradient, "
      "with its own tensor fusion: the stock baseline).")


def build(f) -> CommConfig:
  return CommConfig(allreduce=f.allreduce)
