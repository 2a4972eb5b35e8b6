"""The gradient shapes of the paper's two networks, for tests and benchmarks of the exchange.

Built from the real models (no forward pass), so they follow the models if
those change: ResNet-50 161 tensors / 25.6 M parameters, AlexNet 16 / 61 M
(Jia et al. 2018: AlexNet is communication-bound, ResNet-50 compute-bound).
"""
import functools

from models import build_model

IMAGENET = (1000, (224, 224, 3))


@functools.lru_cache(maxsize=None)
def shapes(model: str) -> tuple[tuple[int, ...], ...]:
  """The trainable variables' shapes of models.build_model(model, 1000, (224, 224, 3)), in order."""
  net = build_model(model, *IMAGENET)
  return tuple(tuple(v.shape) for v in net.trainable_variables)
