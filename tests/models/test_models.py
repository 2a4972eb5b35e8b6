"""Networks: output shapes and trainable parameter counts against the references."""
import numpy as np
import pytest

from models import MODELS, build_model


def trainable(model):
  return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


@pytest.mark.parametrize("name, count", [
    ("resnet50", 25_557_032),  # ResNet-50 v1.5 without conv biases (torchvision, MLPerf)
    ("alexnet", 61_100_840),   # torchvision's AlexNet
    ("alexnet_bn", 61_110_184),  # conv/hidden fc biases -> BN gamma and beta
])
def test_imagenet_parameter_counts(name, count):
  assert trainable(build_model(name, 1000, (224, 224, 3))) == count


def test_alexnet_bn_has_bn_after_every_conv_and_hidden_fc():
  model = build_model("alexnet_bn", 1000, (224, 224, 3))
  bn = [layer.name for layer in model.layers if "bn" in layer.name]
  assert bn == ["conv1_bn", "conv2_bn", "conv3_bn", "conv4_bn", "conv5_bn", "fc6_bn", "fc7_bn"]


@pytest.mark.parametrize("name, shape, classes", [
    ("resnet8", (28, 28, 1), 10), ("resnet20", (8, 8, 1), 10), ("resnet20", (32, 32, 3), 10), ("resnet32", (16, 16, 3), 7),
    ("resnet18", (64, 64, 3), 5), ("resnet50", (64, 64, 3), 1000),
    ("alexnet", (224, 224, 3), 1000), ("alexnet_bn", (224, 224, 3), 3),
])
def test_output_shapes(name, shape, classes):
  model = build_model(name, classes, shape)
  logits = model(np.zeros((2, *shape), np.float32), training=False)
  assert tuple(logits.shape) == (2, classes)
  assert logits.dtype == "float32"


def test_resnet20_is_small():
  # He et al.'s CIFAR ResNet-20 has 0.27 M parameters; projection shortcuts add a few.
  assert 270_000 < trainable(build_model("resnet20", 10, (32, 32, 3))) < 280_000


def test_zero_init_residual_zeroes_the_last_bn_of_each_block():
  model = build_model("resnet20", 10, (8, 8, 1), zero_init_residual=True)
  last = [l for l in model.layers if l.name.endswith("_bn2") and l.name.startswith("stage")]
  assert len(last) == 9 and all(not np.any(l.gamma.numpy()) for l in last)
  plain = build_model("resnet20", 10, (8, 8, 1), zero_init_residual=False)
  assert all(np.all(l.gamma.numpy() == 1) for l in plain.layers if l.name.endswith("_bn2"))


def test_registry_names():
  assert {"resnet20", "resnet50", "alexnet", "alexnet_bn"} <= set(MODELS)
