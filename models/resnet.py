"""ResNets as data: a depth -> block spec table and one builder per family.

- ImageNet ResNet v1.5 (He et al. 2016 with the stride on the 3x3 convolution of
  the bottleneck, as NVIDIA's and MLPerf's references): ResNet-50 has 25,557,032
  trainable parameters (no convolution biases).
- CIFAR-style ResNet (He et al. 2016, section 4.2): depth 6n+2, three stages of
  16/32/64 filters, for CPU-sized runs on small images.
"""
import keras
from keras import layers

from models.layers import batch_norm, conv, fc_init, relu

# depth -> (block kind, blocks per stage) for ImageNet ResNets.
IMAGENET_SPECS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
IMAGENET_WIDTHS = (64, 128, 256, 512)
CIFAR_WIDTHS = (16, 32, 64)


def _basic(x, filters, stride, name, zero_init_residual):
  shortcut = x
  y = relu(batch_norm(conv(x, filters, 3, stride, name=f"{name}_conv1"), f"{name}_bn1"))
  y = batch_norm(conv(y, filters, 3, name=f"{name}_conv2"), f"{name}_bn2", zero_init_residual)
  if stride != 1 or x.shape[-1] != filters:
    shortcut = batch_norm(conv(x, filters, 1, stride, name=f"{name}_proj"), f"{name}_proj_bn")
  return relu(layers.Add(name=f"{name}_add")([shortcut, y]), name=f"{name}_out")


def _bottleneck(x, filters, stride, name, zero_init_residual):
  shortcut = x
  y = relu(batch_norm(conv(x, filters, 1, name=f"{name}_conv1"), f"{name}_bn1"))
  # v1.5: the stride sits on the 3x3 convolution, not the first 1x1.
  y = relu(batch_norm(conv(y, filters, 3, stride, name=f"{name}_conv2"), f"{name}_bn2"))
  y = batch_norm(conv(y, 4 * filters, 1, name=f"{name}_conv3"), f"{name}_bn3", zero_init_residual)
  if stride != 1 or x.shape[-1] != 4 * filters:
    shortcut = batch_norm(conv(x, 4 * filters, 1, stride, name=f"{name}_proj"), f"{name}_proj_bn")
  return relu(layers.Add(name=f"{name}_add")([shortcut, y]), name=f"{name}_out")


_BLOCKS = {"basic": _basic, "bottleneck": _bottleneck}


def _stages(x, kind, blocks_per_stage, widths, zero_init_residual):
  block = _BLOCKS[kind]
  for s, (blocks, filters) in enumerate(zip(blocks_per_stage, widths)):
    for b in range(blocks):
      stride = 2 if (b == 0 and s > 0) else 1
      x = block(x, filters, stride, f"stage{s + 1}_block{b + 1}", zero_init_residual)
  return x


def _head(x, num_classes):
  x = layers.GlobalAveragePooling2D(name="pool")(x)
  # Logits in float32 whatever the compute policy, so softmax/loss run in fp32.
  return layers.Dense(num_classes, kernel_initializer=fc_init(), name="fc", dtype="float32")(x)


def imagenet_resnet(depth, num_classes=1000, input_shape=(224, 224, 3), zero_init_residual=True):
  """ResNet-{18,34,50,101,152} v1.5; input (H, W, C) float images, output logits."""
  kind, blocks = IMAGENET_SPECS[depth]
  inputs = keras.Input(input_shape, name="images")
  x = relu(batch_norm(conv(inputs, 64, 7, 2, name="stem_conv"), "stem_bn"))
  x = layers.MaxPooling2D(3, 2, padding="same", name="stem_pool")(x)
  x = _stages(x, kind, blocks, IMAGENET_WIDTHS, zero_init_residual)
  return keras.Model(inputs, _head(x, num_classes), name=f"resnet{depth}")


def cifar_resnet(depth, num_classes=10, input_shape=(32, 32, 3), zero_init_residual=True):
  """CIFAR-style ResNet of depth 6n+2 with projection shortcuts; works on any image size >= 4."""
  if (depth - 2) % 6:
    raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
  n = (depth - 2) // 6
  inputs = keras.Input(input_shape, name="images")
  x = relu(batch_norm(conv(inputs, CIFAR_WIDTHS[0], 3, name="stem_conv"), "stem_bn"))
  x = _stages(x, "basic", (n, n, n), CIFAR_WIDTHS, zero_init_residual)
  return keras.Model(inputs, _head(x, num_classes), name=f"resnet{depth}")
