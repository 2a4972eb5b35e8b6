"""The exchange to the target at the papers' scale: `make time-to-accuracy`'s last section.

ResNet-50's gradients exchanged once per update on the P40 cluster (exchange.py's pricing,
the planner's), for the measured configurations put at ImageNet's size: m times the batch
makes 1/m of the exchanges per epoch, and to the target that times its epochs to target.
"""
import math

from input.datasets import IMAGENET

from bench.plan import exchange
from bench.scaling import simulate

IMAGENET_TRAIN = IMAGENET.num_train
SCALE_RANKS = (256, 2048)
SCALE_CONFIGS = ("a", "c", "e")
# (a)'s global batch at that scale; the others keep their multiple of it, so (e) is Jia et al.'s
# 65,536 and Goyal et al.'s 8,192 lies between (a) and (c).
SCALE_BASE_BATCH = 1024


def dash(value, spec: str, scale: float = 1.0) -> str:
  """value (times scale) formatted by spec, or '-' for None."""
  return "-" if value is None else format(value * scale if scale != 1 else value, spec)


def exchange_per_update() -> tuple[dict, dict]:
  """({ranks: seconds of one ResNet-50 gradient exchange, hybrid}, the stated parameters) on
  exchange.P40 (bench/scaling/simulate.py's P40 cluster); builds ResNet-50 (Keras) for its gradient shapes."""
  from models import gradient_sets  # builds Keras models: only when the report is written
  sizes = exchange.buckets([4 * math.prod(shape) for shape in gradient_sets.shapes("resnet50")])
  stated = dict(simulate.P40_STATED, bucket=f"{simulate.SIM_BUCKET / 2**20:g} MB")
  return {p: sum(exchange.bucket_seconds(exchange.P40, p, sizes)) for p in SCALE_RANKS}, stated


def at_scale(stats: list[dict], seconds: dict, base_batch: int = SCALE_BASE_BATCH,
             images: int = IMAGENET_TRAIN, configs=SCALE_CONFIGS) -> list[dict]:
  """Exchange seconds per epoch and to the target at the papers' scale, for configs of stats
  (stats.aggregate's rows).

  seconds: {ranks: seconds of one gradient exchange}. Each configuration keeps its multiple of
  (a)'s batch from base_batch; one exchange per update, images // global batch updates per epoch
  (train.py's count); to the target: times its measured median epochs to target. A batch smaller
  than the ranks (under one image a rank) gets no figures.
  """
  by = {s["config"]: s for s in stats}
  if "a" not in by:
    return []
  rows = []
  for key in (k for k in configs if k in by):
    s = by[key]
    multiple = s["global_batch"] // by["a"]["global_batch"]
    for ranks, one in sorted(seconds.items()):
      batch = base_batch * multiple
      fits = batch >= ranks
      per_epoch = images // batch * one if fits else None
      epochs = s["epochs_to_target"]["median"]
      rows.append({"config": key, "name": s["name"], "multiple": multiple, "ranks": ranks, "global_batch": batch,
                   "updates_per_epoch": images // batch if fits else None,
                   "exchange_seconds": one if fits else None, "exchange_seconds_per_epoch": per_epoch,
                   "epochs_to_target": epochs,
                   "exchange_seconds_to_target": per_epoch * epochs if fits and epochs is not None else None})
  return rows


def scale_table(rows: list[dict]) -> str:
  out = ["| configuration | ranks | global batch (x (a)) | updates per epoch | exchange ms per update "
         "| exchange s per epoch | epochs to target here | exchange s to target |", "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    out.append(f"| {r['name']} | {r['ranks']:,} | {r['global_batch']:,} (x {r['multiple']}) "
               f"| {dash(r['updates_per_epoch'], ',')} | {dash(r['exchange_seconds'], '.1f', 1e3)} "
               f"| {dash(r['exchange_seconds_per_epoch'], '.1f')} | {dash(r['epochs_to_target'], '.2f')} "
               f"| {dash(r['exchange_seconds_to_target'], '.1f')} |")
  return "\n".join(out)


def scale_findings(rows: list[dict]) -> str:
  """Per ranks: each configuration's exchange to the target against (a)'s, or why (a) has none (pure)."""
  out = []
  for ranks in dict.fromkeys(r["ranks"] for r in rows):
    at = [r for r in rows if r["ranks"] == ranks]
    base = next(r for r in at if r["config"] == "a")  # at_scale() always has (a)
    if base["updates_per_epoch"] is None:
      why = f"(a)'s batch of {base['global_batch']:,} gives under one image a rank"
    elif base["exchange_seconds_to_target"] is None:
      why = "(a) did not reach the target"
    else:
      why = None
    for r in at:
      mine = r["exchange_seconds_to_target"]
      if r["config"] == "a" or mine is None:
        continue
      if why:
        out.append(f"At {ranks:,} ranks {why}; {r['name'][:3]} spends {mine:.1f} s in the exchange to the target.")
        continue
      ratio = base["exchange_seconds_to_target"] / mine
      out.append(f"At {ranks:,} ranks {r['name'][:3]} spends {mine:.1f} s in the exchange to the target against "
                 f"(a)'s {base['exchange_seconds_to_target']:.1f} s "
                 f"({f'{ratio:.0f}x less' if ratio >= 1 else f'{1 / ratio:.1f}x more'}).")
  return " ".join(out) or "No configuration besides (a) reached the target: nothing to compare at this scale."


def section(scale: dict) -> str:
  """The report's section: scale = {'params': stated parameters, 'rows': at_scale()'s rows}."""
  return f"""## At the papers' scale: the exchange to the target

ResNet-50's gradients, exchanged once per update, on the simulated P40 cluster of
`bench/scaling/simulate.py` ({'; '.join(f'{k}: {v}' for k, v in scale['params'].items())}),
each exchange timed as its hybrid allreduce (per bucket the cheaper of ring and hierarchical).
(a) is put at {SCALE_BASE_BATCH:,} images per update and each other configuration at its multiple of
that, on ImageNet's {IMAGENET_TRAIN:,} training images: m times the batch makes 1/m of the exchanges
per epoch, and to the target that times its epochs to target, taken as measured here. Assumed: that
Fashion-MNIST's epochs to target carry over to ImageNet (Goyal et al. kept ImageNet's accuracy up to
8K images per update, Jia et al. trained at 64K with LARS). Left out: the compute, the same images
per epoch whatever the batch.

{scale_table(scale['rows'])}

{scale_findings(scale['rows'])}
"""
