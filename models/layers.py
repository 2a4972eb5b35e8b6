"""Initialisers and the conv-BN-ReLU unit shared by the networks.

Jia et al. and Goyal et al. initialise convolutions by fan-in (He et al.) and
fully connected layers from a Gaussian; BatchNorm statistics are per rank
(plain Keras BatchNormalization, never synchronised), so the per-rank batch
stays the BN batch (Goyal et al. section 2.3).
"""
import keras
from keras import layers

BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


def conv_init():
  return keras.initializers.HeNormal()  # fan-in, for ReLU networks


def fc_init():
  return keras.initializers.RandomNormal(stddev=0.01)


def conv(x, filters, kernel, stride=1, name=None, padding="same", use_bias=False):
  return layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=use_bias,
                       kernel_initializer=conv_init(), name=name)(x)


def batch_norm(x, name, zero_gamma=False):
  """BatchNorm; zero_gamma starts a residual branch as the identity (Goyal et al. 5.1)."""
  return layers.BatchNormalization(
      momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name,
      gamma_initializer="zeros" if zero_gamma else "ones")(x)


def relu(x, name=None):
  return layers.ReLU(name=name)(x)
