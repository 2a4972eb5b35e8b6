"""What each data set is: classes, image shape, split sizes, normalisation
(flags.config.DatasetInfo).

Metadata only (no TensorFlow import), so flag validation can use it cheaply.
"""
from flags.config import DatasetInfo


# scikit-learn's handwritten digits: 1,797 real 8x8 images, 16 grey levels.
# The held-out split is fixed (see input/digits.py); mean/std measured on the
# training split of pixels scaled to [0, 1].
DIGITS = DatasetInfo(name="digits", num_classes=10, image_shape=(8, 8, 1),
                     num_train=1497, num_eval=300, mean=(0.306,), std=(0.376,),
                     on_disk=True)

# Zalando's Fashion-MNIST (Xiao et al. 2017, Debian's dataset-fashion-mnist): 70,000 real 28x28
# grey images of 10 kinds of clothing; the held-out split is its official test set. mean/std:
# numpy over the 60,000 training images scaled to [0, 1] (0.28604, 0.35302).
FASHION_MNIST = DatasetInfo(name="fashion_mnist", num_classes=10, image_shape=(28, 28, 1),
                            num_train=60_000, num_eval=10_000, mean=(0.286,), std=(0.353,),
                            on_disk=True)

# A fixed random batch held in memory: measures the model and the allreduce,
# never the input. Split sizes are ImageNet's so epochs mean the same thing.
SYNTHETIC = DatasetInfo(name="synthetic", num_classes=1000, image_shape=(224, 224, 3),
                        num_train=1_281_167, num_eval=0, mean=(0.485, 0.456, 0.406),
                        std=(0.229, 0.224, 0.225), on_disk=False)

# ImageNet's per-channel statistics of RGB pixels in [0, 1] (torchvision, tensorflow/models).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

DATASETS = {d.name: d for d in (DIGITS, FASHION_MNIST, SYNTHETIC)}

# Sources read from --data_dir whose classes and sizes are found there
# (input/sources.py); until then they are described as ILSVRC-2012.
IMAGENET = DatasetInfo(name="imagenet", num_classes=1000, image_shape=(224, 224, 3),
                       num_train=1_281_167, num_eval=50_000, mean=IMAGENET_MEAN,
                       std=IMAGENET_STD, on_disk=True, inception_crop=True)
