"""Small ImageNet-layout data sets made of 100 real photographs, needing nothing
outside the repository and its installed packages.

The photographs are the three that ship inside wheels the project already
installs (requirements-base.txt): scikit-learn's china.jpg and flower.jpg
(640x427, Flickr, CC BY 2.0) and matplotlib's grace_hopper.jpg (512x600).
sample_files() cuts them into 100 distinct JPEGs, each a different crop,
aspect ratio, size and quality, sized like ILSVRC-2012's (most 500 pixels on
the long side, some smaller, some larger, four grey), and writes them once per
process into a temporary directory as <wnid>_<photo>_<index>.JPEG, one wnid
each. scikit-image's dozen sample photographs were not worth adding to
requirements-base.txt (a package and four dependencies more for every install)
when crops of these three give every test what it needs: real JPEG bytes with
real textures, real decode cost, distinct files.

The wnids are real ILSVRC-2012 class ids (every 10th of the 1,000, from the
labels.txt tensorflow-datasets ships), not the photographs' classes: tfds's
own imagenet2012 builder (tests/input/test_tfds_imagenet.py) takes a class's
label from that list and refuses a made-up wnid.

bench/input_pipeline/ (make bench-input) measures decode speed on these by default; pass it the
real sample of ImageNet (--images_dir, docs/input.md) to measure on ImageNet's
own JPEGs: any folder of <wnid>_<name>.JPEG files works through sample_dir.
"""
import atexit
import importlib.util
import io
import os
import shutil
import tempfile

import numpy as np

NUM = 100
PHOTOS = (("sklearn", "datasets/images/china.jpg"), ("sklearn", "datasets/images/flower.jpg"),
          ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"))

_generated = None  # the directory sample_files() wrote this process's JPEGs to


def _package_file(package: str, relative: str) -> str:
  """A file inside an installed package, found without importing the package."""
  spec = importlib.util.find_spec(package)
  if spec is None:
    raise FileNotFoundError(f"{package} is not installed; run make setup (requirements-base.txt lists it).")
  return os.path.join(spec.submodule_search_locations[0], relative)


def wnids() -> list[str]:
  """NUM real ILSVRC-2012 wnids, sorted: every 10th of the 1,000 tfds knows."""
  with open(_package_file("tensorflow_datasets", "datasets/imagenet2012/labels.txt")) as fh:
    return sorted(fh.read().split())[::1000 // NUM]


def _shape(i: int, rng: np.random.Generator) -> tuple[int, int]:
  """(width, height) of sample i, spread like the real 100-image ILSVRC-2012 sample:
  70 of its images are 500 pixels on the long side, 14 smaller (95-432), 16 larger
  (510-1,200); most landscape, about 4:3 or 3:2."""
  if i % 7 == 3:
    long = int(rng.integers(160, 440))
  elif i % 6 == 5:
    long = int(rng.integers(510, 1200))
  else:
    long = 500
  ratio = float(np.clip(np.exp(rng.normal(np.log(1.4), 0.15)), 1.0, 2.5))
  short = round(long / ratio)
  return (short, long) if rng.random() < 0.2 else (long, short)


def _make(i: int, photo: "PIL.Image.Image", rng: np.random.Generator) -> bytes:
  """Sample i as JPEG bytes: a random crop of `photo` of the sample's aspect
  ratio, shrunk to its shape (enlarged only where the shape is larger than the
  photograph), maybe flipped, grey for 4 of the 100 as in ImageNet. Quality
  90-97: these photographs hold less fine detail than ImageNet's, so their JPEGs
  are 74 KB on average against the real sample's 107 KB at about the same pixel
  count, and one thread fully decodes 800 of them a second against 640 of the
  real ones (measured here, tf.io.decode_jpeg)."""
  from PIL import Image
  width, height = _shape(i, rng)
  zoom = rng.uniform(0.5, 1.0)  # output pixels per photograph pixel
  fit = min(photo.width / (width / zoom), photo.height / (height / zoom), 1.0)
  crop_w, crop_h = max(1, round(width / zoom * fit)), max(1, round(height / zoom * fit))
  left = int(rng.integers(0, photo.width - crop_w + 1))
  top = int(rng.integers(0, photo.height - crop_h + 1))
  image = photo.crop((left, top, left + crop_w, top + crop_h)).resize((width, height), Image.LANCZOS)
  if rng.random() < 0.5:
    image = image.transpose(Image.FLIP_LEFT_RIGHT)
  if i % 25 == 12:
    image = image.convert("L")
  out = io.BytesIO()
  image.save(out, format="JPEG", quality=int(rng.integers(90, 98)))
  return out.getvalue()


def generate(directory: str) -> list[str]:
  """Write the NUM sample JPEGs into directory; their paths, sorted (so by wnid).
  The same bytes on every call and machine with the same Pillow: each sample's
  crop comes from a generator seeded with its index."""
  from PIL import Image
  photos = []
  for package, relative in PHOTOS:
    with Image.open(_package_file(package, relative)) as image:
      photos.append((os.path.splitext(os.path.basename(relative))[0], image.convert("RGB")))
  os.makedirs(directory, exist_ok=True)
  paths = []
  for i, wnid in enumerate(wnids()):
    name, photo = photos[i % len(photos)]
    path = os.path.join(directory, f"{wnid}_{name}_{i:02d}.JPEG")
    with open(path, "wb") as fh:
      fh.write(_make(i, photo, np.random.default_rng(i)))
    paths.append(path)
  return sorted(paths)


def sample_files(sample_dir: str | None = None) -> list[str]:
  """Paths of the sample JPEGs, sorted (so by wnid): the NUM made from the packaged
  photographs (written on the first call), or the *.JPEG files in sample_dir."""
  global _generated
  if sample_dir is None:
    if _generated is None:
      _generated = tempfile.mkdtemp(prefix="imagenet-samples-")
      atexit.register(shutil.rmtree, _generated, ignore_errors=True)
      generate(_generated)
    sample_dir = _generated
  if not os.path.isdir(sample_dir):
    raise FileNotFoundError(f"{sample_dir} is not a directory; pass a folder of <wnid>_<name>.JPEG files.")
  return sorted(os.path.join(sample_dir, f) for f in os.listdir(sample_dir) if f.endswith(".JPEG"))


def imagenet_folder(root: str, val_every: int = 5, sample_dir: str | None = None) -> str:
  """Link the samples into root/train/<wnid>/ (all of them, one class each, so the
  label is also the example's id) and root/val/<wnid>/ (every val_every-th)."""
  for i, path in enumerate(sample_files(sample_dir)):
    name = os.path.basename(path)
    wnid = name.split("_", 1)[0]
    for split in ("train", "val") if i % val_every == 0 else ("train",):
      os.makedirs(os.path.join(root, split, wnid), exist_ok=True)
      link = os.path.join(root, split, wnid, name)
      if not os.path.exists(link):
        os.symlink(os.path.abspath(path), link)
  return root
