"""AlexNet (Krizhevsky 2014 "one weird trick" variant, as torchvision: 61,100,840
parameters) and AlexNet-BN, Jia et al.'s version with BatchNorm after every
convolution and hidden fully connected layer (the layers that precede a BN drop
their bias: BN's beta takes its place)."""
import keras
from keras import layers

from models.layers import batch_norm, conv, fc_init, relu

# (filters, kernel, stride, max-pool after)
CONVS = ((64, 11, 4, True), (192, 5, 1, True), (384, 3, 1, False),
         (256, 3, 1, False), (256, 3, 1, True))
HIDDEN = (4096, 4096)
DROPOUT = 0.5


def _alexnet(num_classes, input_shape, with_bn, name):
  inputs = keras.Input(input_shape, name="images")
  x = layers.ZeroPadding2D(2, name="conv1_pad")(inputs)  # torchvision's padding=2
  for i, (filters, kernel, stride, pool) in enumerate(CONVS, start=1):
    x = conv(x, filters, kernel, stride, name=f"conv{i}", use_bias=not with_bn,
             padding="valid" if i == 1 else "same")
    if with_bn:
      x = batch_norm(x, f"conv{i}_bn")
    x = relu(x)
    if pool:
      x = layers.MaxPooling2D(3, 2, name=f"pool{i}")(x)
  x = layers.Flatten(name="flatten")(x)
  for i, units in enumerate(HIDDEN, start=6):
    x = layers.Dropout(DROPOUT, name=f"drop{i}")(x)
    x = layers.Dense(units, use_bias=not with_bn, kernel_initializer=fc_init(), name=f"fc{i}")(x)
    if with_bn:
      x = batch_norm(x, f"fc{i}_bn")
    x = relu(x)
  logits = layers.Dense(num_classes, kernel_initializer=fc_init(), name="fc8", dtype="float32")(x)
  return keras.Model(inputs, logits, name=name)


def alexnet(num_classes=1000, input_shape=(224, 224, 3), zero_init_residual=True):
  del zero_init_residual  # no residual blocks
  return _alexnet(num_classes, input_shape, with_bn=False, name="alexnet")


def alexnet_bn(num_classes=1000, input_shape=(224, 224, 3), zero_init_residual=True):
  del zero_init_residual
  return _alexnet(num_classes, input_shape, with_bn=True, name="alexnet_bn")
