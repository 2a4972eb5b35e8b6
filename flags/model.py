"""Flags of the network."""
import dataclasses

from absl import flags as absl_flags

from flags.errors import ConfigError
from models import MODELS


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  name: str


def define() -> None:
  absl_flags.DEFINE_string(
      "model", "resnet20",
      f"Network: {', '.join(sorted(MODELS))}. resnet20 is a CIFAR-style ResNet for CPU-sized "
      "runs; resnet50 (v1.5), alexnet and alexnet_bn are the ImageNet networks of the papers.")


def build(f) -> ModelConfig:
  if f.model not in MODELS:
    raise ConfigError(f"--model={f.model!r} is unknown; choose one of {', '.join(sorted(MODELS))}.")
  return ModelConfig(name=f.model)
