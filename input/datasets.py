"""What each data set is: classes, image shape, split sizes, normalisation.

Metadata only (no TensorFlow import), so flag validation can use it cheaply.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """num_train/num_eval: examples per split; image_shape: (height, width, channels)
  fed to the model; mean/std: per-channel normalisation of pixels in [0, 1]."""
  name: str
  num_classes: int
  image_shape: tuple[int, int, int]
  num_train: int
  num_eval: int
  mean: tuple[float, ...]
  std: tuple[float, ...]
  on_disk: bool


# scikit-learn's handwritten digits: 1,797 real 8x8 images, 16 grey levels.
# The held-out split is fixed (see input/digits.py); mean/std measured on the
# training split of pixels scaled to [0, 1].
DIGITS = DatasetInfo(name="digits", num_classes=10, image_shape=(8, 8, 1),
                     num_train=1497, num_eval=300, mean=(0.306,), std=(0.376,),
                     on_disk=True)

# A fixed random batch held in memory: measures the model and the allreduce,
# never the input. Split sizes are ImageNet's so epochs mean the same thing.
SYNTHETIC = DatasetInfo(name="synthetic", num_classes=1000, image_shape=(224, 224, 3),
                        num_train=1_281_167, num_eval=0, mean=(0.485, 0.456, 0.406),
                        std=(0.229, 0.224, 0.225), on_disk=False)

DATASETS = {d.name: d for d in (DIGITS, SYNTHETIC)}
