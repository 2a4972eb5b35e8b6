"""Convert an image folder in ImageNet's layout into sharded TFRecords.

  python -m input.convert --src /data/imagenet-folder --dst /data/imagenet-tfrecords

--src holds train/<wnid>/*.JPEG and val/<wnid>/*.JPEG (classes = the sorted
wnids of train/); --dst receives train-00000-of-01024 ... and
validation-00000-of-00128 in the layout of input/records.py (image/encoded,
1-based image/class/label, image/class/synset, image/filename, height, width)
and dataset_info.json (classes and record counts), so `--dataset=imagenet
--data_dir=DST` trains on it. Training images are dealt to shards in a fixed
random order (tensorflow/models' build_imagenet_data.py does the same), so
every shard mixes the classes. Shards are written in parallel worker
processes, each under a temporary name renamed into place when complete: an
interrupted conversion rerun with the same arguments writes only the missing
shards. JPEGs are copied byte for byte; other formats and CMYK JPEGs are
re-encoded as RGB JPEG (quality 95), as the reference script does.
"""
import argparse
import contextlib
import io
import json
import multiprocessing
import os
import sys
import time

import numpy as np
import tensorflow as tf

from flags.config import ConfigError
from input import records, sources

ORDER_SEED = 20120101  # fixed: a resumed conversion deals the same images to the same shards


def plan(files, labels, num_shards: int, shuffle: bool):
  """[(shard index, [(path, 0-based label)])]: contiguous runs of a fixed permutation."""
  order = np.random.default_rng(ORDER_SEED).permutation(len(files)) if shuffle else np.arange(len(files))
  pairs = [(files[i], labels[i]) for i in order]
  bounds = np.linspace(0, len(pairs), num_shards + 1).astype(int)
  return [(i, pairs[bounds[i]:bounds[i + 1]]) for i in range(num_shards)]


def jpeg_bytes(path: str) -> tuple[bytes, int, int]:
  """(RGB or grey JPEG bytes, height, width) of an image file; raises on a damaged one."""
  from PIL import Image
  with open(path, "rb") as fh:
    data = fh.read()
  with Image.open(io.BytesIO(data)) as image:
    image.load()  # decodes fully: a truncated or damaged file fails here, not in training
    width, height = image.size
    if image.format == "JPEG" and image.mode in ("RGB", "L"):
      return data, height, width
    out = io.BytesIO()
    image.convert("RGB").save(out, format="JPEG", quality=95)
    return out.getvalue(), height, width


def write_shard(job) -> tuple[str, int, list[str]]:
  """Write one shard unless it is there; (path, records, skipped damaged files)."""
  dst, split, index, count, pairs, classes, skip_corrupt = job
  path = os.path.join(dst, records.shard_name(split, index, count))
  if os.path.exists(path):
    return path, records.count_records(path), []
  skipped, written = [], 0
  tmp = f"{path}.tmp-{os.getpid()}"
  with tf.io.TFRecordWriter(tmp) as writer:
    for image_path, label in pairs:
      try:
        encoded, height, width = jpeg_bytes(image_path)
      except Exception as e:  # PIL raises several types for damaged files
        if not skip_corrupt:
          writer.close()
          os.remove(tmp)
          raise ConfigError(f"--src: {image_path} cannot be decoded ({e}); replace it, or pass "
                            "--skip_corrupt to leave it out.") from None
        skipped.append(image_path)
        continue
      writer.write(records.make_example(encoded, label, synset=classes[label], height=height, width=width,
                                        filename=os.path.basename(image_path), format="JPEG"))
      written += 1
  os.replace(tmp, path)
  return path, written, skipped


def convert(src: str, dst: str, train_shards: int = 1024, validation_shards: int = 128,
            workers: int = 0, skip_corrupt: bool = False, progress=sys.stderr) -> dict:
  """Convert src into dst; returns the dataset_info.json it writes."""
  classes, train, evals = sources.folder_splits(src, flag="--src")
  os.makedirs(dst, exist_ok=True)
  jobs = []
  for split, data, shards, shuffle in (("train", train, train_shards, True),
                                       ("eval", evals, validation_shards, False)):
    if not data.total:
      continue
    shards = max(1, min(shards, data.total))
    jobs += [(dst, split, i, shards, pairs, classes, skip_corrupt)
             for i, pairs in plan(data.files, data.labels, shards, shuffle)]
  total = sum(len(job[4]) for job in jobs)
  workers = workers or len(os.sched_getaffinity(0))
  done_images, results, start = 0, {}, time.time()
  # spawn: each worker imports TensorFlow itself (forking a process that has it is unsafe).
  pool = multiprocessing.get_context("spawn").Pool(workers) if workers > 1 else None
  with pool or contextlib.nullcontext():
    for n, (job, (path, written, skipped)) in enumerate(
        zip(jobs, (pool.imap if pool else map)(write_shard, jobs)), 1):
      results[path] = written
      done_images += len(job[4])
      for bad in skipped:
        print(f"\nconvert: skipped damaged {bad}", file=progress)
      rate = done_images / max(time.time() - start, 1e-9)
      eta = (total - done_images) / rate if rate else 0
      print(f"\rconvert: {n}/{len(jobs)} shards  {done_images:,}/{total:,} images  "
            f"{rate:,.0f} img/s  eta {int(eta // 60)}:{int(eta % 60):02d}", end="", file=progress, flush=True)
  print(file=progress)
  records.write_index(dst, results)  # start-up reads these counts instead of walking every record
  meta = {"num_classes": len(classes), "classes": classes,
          "records": {os.path.basename(p): c for p, c in sorted(results.items())},
          "train_examples": sum(c for p, c in results.items() if os.path.basename(p).startswith("train-")),
          "validation_examples": sum(c for p, c in results.items()
                                     if os.path.basename(p).startswith(records.SPLITS["eval"] + "-"))}
  tmp = os.path.join(dst, f"{sources.INFO_FILE}.tmp-{os.getpid()}")
  with open(tmp, "w") as fh:
    json.dump(meta, fh, indent=1)
  os.replace(tmp, os.path.join(dst, sources.INFO_FILE))
  return meta


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m input.convert", description=__doc__.split("\n\n")[0])
  parser.add_argument("--src", required=True, help="folder with train/<wnid>/*.JPEG and val/<wnid>/*.JPEG")
  parser.add_argument("--dst", required=True, help="directory for the TFRecord shards")
  parser.add_argument("--train_shards", type=int, default=1024, help="ImageNet's layout: 1024")
  parser.add_argument("--validation_shards", type=int, default=128, help="ImageNet's layout: 128")
  parser.add_argument("--workers", type=int, default=0, help="processes (0: the cores)")
  parser.add_argument("--skip_corrupt", action="store_true", help="leave out damaged images, listing them")
  args = parser.parse_args(argv)
  if not os.path.isdir(args.src):
    print(f"error: --src={args.src} does not exist; point it at the image folder.", file=sys.stderr)
    return 2
  if args.train_shards < 1 or args.validation_shards < 1:
    print("error: --train_shards and --validation_shards must be at least 1.", file=sys.stderr)
    return 2
  try:
    meta = convert(args.src, args.dst, args.train_shards, args.validation_shards, args.workers,
                   args.skip_corrupt)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"convert: {meta['train_examples']:,} training and {meta['validation_examples']:,} validation "
        f"images of {meta['num_classes']} classes in {args.dst}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
