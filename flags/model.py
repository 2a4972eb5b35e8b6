"""Flags of the network."""
from absl import flags as absl_flags

from flags.config import ConfigError, ModelConfig
from models import MODELS


def define() -> None:
  absl_flags.DEFINE_string(
      "model", "resnet20",
      f"Network: {', '.join(sorted(MODELS))}. resnet20 is a CIFAR-style ResNet for CPU-sized "
      "runs (resnet8, its one-block-per-stage sibling, for smoke runs and tests); resnet50 (v1.5), "
      "alexnet and alexnet_bn are the ImageNet networks of the papers.")
  absl_flags.DEFINE_boolean(
      "zero_init_residual", True, "Start the gamma of the last BatchNorm in each residual block "
      "at 0, so every block begins as the identity (Goyal et al. 5.1, Jia et al.); ResNets only.")


def build(f) -> ModelConfig:
  if f.model not in MODELS:
    raise ConfigError(f"--model={f.model!r} is unknown; choose one of {', '.join(sorted(MODELS))}.")
  return ModelConfig(name=f.model, zero_init_residual=f.zero_init_residual)
