"""Small ImageNet-layout data sets made of the 100 real sample JPEGs.

../shared/data/imagenet-sample holds one real ILSVRC-2012 photograph for each
of 100 classes, named <wnid>_<name>.JPEG. Tests and benchmarks lay them out as
ImageNet's folder (train/<wnid>/, val/<wnid>/) and convert that to TFRecords.
"""
import os

# IMAGENET_SAMPLE_DIR: where they are when shared/ is not beside the repository (a git worktree).
SAMPLE_DIR = os.environ.get("IMAGENET_SAMPLE_DIR") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data", "imagenet-sample")


def sample_files(sample_dir: str = SAMPLE_DIR) -> list[str]:
  """Paths of the sample JPEGs, sorted (so by wnid)."""
  return sorted(os.path.join(sample_dir, f) for f in os.listdir(sample_dir) if f.endswith(".JPEG"))


def imagenet_folder(root: str, val_every: int = 5, sample_dir: str = SAMPLE_DIR) -> str:
  """Link the samples into root/train/<wnid>/ (all 100, one class each, so the
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
