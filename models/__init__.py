"""Name -> constructor registry of the networks.

Every constructor takes (num_classes, input_shape, zero_init_residual) and
returns a Keras model from float images (N, H, W, C) to float32 logits (N, classes).
"""
import functools

from models.alexnet import alexnet, alexnet_bn
from models.resnet import cifar_resnet, imagenet_resnet

MODELS = {
    # The smallest CIFAR ResNet (one block per stage): a launch of the test suite starts its
    # first step 12-17 s sooner than with resnet20 (41-47 s against 29-30 s for a 3-step run).
    "resnet8": functools.partial(cifar_resnet, 8),
    "resnet20": functools.partial(cifar_resnet, 20),
    "resnet32": functools.partial(cifar_resnet, 32),
    "resnet18": functools.partial(imagenet_resnet, 18),
    "resnet50": functools.partial(imagenet_resnet, 50),
    "alexnet": alexnet,
    "alexnet_bn": alexnet_bn,
}


def build_model(name, num_classes, input_shape, zero_init_residual=True):
  """The named network; raises KeyError for an unknown name (flags validate it first)."""
  return MODELS[name](num_classes=num_classes, input_shape=tuple(input_shape),
                      zero_init_residual=zero_init_residual)
