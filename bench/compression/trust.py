"""The trust part: what PowerSGD does to LARS's trust ratios, per layer (issue 25, item 1).

LARS multiplies each layer's LR by t(g) = eta ||w|| / (||g|| + wd ||w||) (optimizers/lars.py),
g being what the optimizer is handed: under PowerSGD the rank-r update U = P^ P^T (G + e), not
the mean gradient G. At the weights and PowerSGD state (Qs, residuals e) the accuracy part's
runs checkpointed, and for batches of the training set split as its 2 ranks split a step's
1,024, per compressed layer: t(U) / t(G), the trust ratio on the update over the one the
uncompressed mean gradient would have had at the same weights; ||U|| / ||G||; cos(U, G); and
the layer's step, |t(U) (U + wd w)| / |t(G) (G + wd w)|, the factor by which its move differs.

One process, no Horovod, and the same numbers as the 2 ranks': the mean gradient is the mean of
the two halves' gradients (each half its own BatchNorm batch, as each rank's), and an update
depends on the residuals only through their mean (comm/powersgd.py), which is what a checkpoint
holds (training/persist/saving.py averages them before each save). One PowerSGD step per batch, each
from the checkpoint's state, nothing applied. Images as the recipe's pipeline gives them
(plain_image: normalised, not flipped or cropped).
"""
import json
import os
import statistics

import numpy as np
import tensorflow as tf

from comm.exchange import make_powersgd
from flags.config import CommConfig, OptimConfig
from input import fashion_mnist, preprocessing
from models import build_model
from optimizers import build_optimizer, precision
from training.persist import checkpoints
from training.step import make_gradients

BATCHES = 8   # per checkpoint; each a step's 1,024 images in the 2 ranks' halves
HALVES = 2    # the accuracy part's ranks
CONFIGS = ("r4", "r4-noef")  # rank 4 with and without error feedback: the runs the accuracy target is about
KEYS = ("trust", "norm", "cos", "step")


def ratios(lars, w, g, u) -> dict:
  """KEYS for one layer: weight w, uncompressed mean gradient g, PowerSGD's update u."""
  t_g, t_u = float(lars.trust_ratio(w, g)), float(lars.trust_ratio(w, u))
  wd = lars.lars_weight_decay
  return {"trust": t_u / t_g, "norm": float(tf.norm(u) / tf.norm(g)),
          "cos": float(tf.reduce_sum(u * g) / (tf.norm(u) * tf.norm(g))),
          "step": t_u * float(tf.norm(u + wd * w)) / (t_g * float(tf.norm(g + wd * w)))}


def measure(model_dir: str, batches: int = BATCHES, seed: int = 0) -> dict:
  """Per compressed layer of the run in model_dir: {layer, view, steps: {step: {key: per-batch values}}}
  for KEYS, at every checkpoint the run kept that PowerSGD had begun at; the same batches at every one."""
  with open(os.path.join(model_dir, "config.json")) as fh:
    cfg = json.load(fh)["config"]
  info, comm = cfg["data"]["dataset"], CommConfig(**cfg["comm"])
  model = build_model(cfg["model"]["name"], info["num_classes"], info["image_shape"],
                      zero_init_residual=cfg["model"]["zero_init_residual"])
  variables = model.trainable_variables
  lars = build_optimizer(OptimConfig(**cfg["optim"]), variables)
  compressor = make_powersgd(comm, variables, cfg["run"]["seed"])
  checkpoint = tf.train.Checkpoint(model=model, **{f"powersgd_rank{compressor.rank}": compressor})
  gradients = tf.function(make_gradients(model, precision.for_precision("fp32"), info["num_classes"],
                                         cfg["optim"]["label_smoothing"], 1, micro_norms=False))
  layers = [i for i, view in enumerate(compressor.views) if view and not lars.excluded(variables[i])]
  images, labels = fashion_mnist.load_arrays()["train"]
  picks = np.random.default_rng(seed).choice(len(labels), size=(batches, cfg["data"]["global_batch"]), replace=False)
  out = {i: {"layer": variables[i].path, "view": list(compressor.views[i]), "steps": {}} for i in layers}
  for step in sorted(checkpoints.on_disk(model_dir)):
    if step <= comm.compression_start:
      continue
    checkpoint.restore(os.path.join(model_dir, f"ckpt-{step}")).expect_partial()
    values = {i: {k: [] for k in KEYS} for i in layers}
    for pick in picks:
      x = preprocessing.normalise(tf.constant(images[pick]), info["mean"], info["std"])
      y = tf.constant(labels[pick], tf.int32)
      halves = [gradients(xh, yh)[4] for xh, yh in zip(tf.split(x, HALVES), tf.split(y, HALVES))]
      mean = [tf.add_n(list(g)) / HALVES for g in zip(*halves)]
      update, _ = compressor(mean, lambda tensors: tensors)  # the mean over ranks is already taken
      for i in layers:
        for k, value in ratios(lars, tf.convert_to_tensor(variables[i]), mean[i], update[i]).items():
          values[i][k].append(value)
    for i in layers:
      out[i]["steps"][str(step)] = values[i]
  return {"layers": [out[i] for i in layers], "compression_start": comm.compression_start,
          "rank": compressor.rank, "error_feedback": compressor.error_feedback}


def summarise(measured: list[dict]) -> list[dict]:
  """Per layer, over every run, checkpoint and batch given: median, min and max of each of KEYS."""
  by_layer = {}
  for run in measured:
    for layer in run["layers"]:
      entry = by_layer.setdefault(layer["layer"], {"layer": layer["layer"], "view": layer["view"],
                                                   **{k: [] for k in KEYS}})
      for values in layer["steps"].values():
        for k in KEYS:
          entry[k] += values[k]
  return [{"layer": e["layer"], "view": e["view"], "count": len(e["trust"]),
           **{k: {"median": statistics.median(e[k]), "min": min(e[k]), "max": max(e[k])} for k in KEYS}}
          for e in by_layer.values() if e["trust"]]


def run(runs_dir: str, configs, seeds, batches: int = BATCHES) -> dict:
  """The part: every configuration's runs of the given seeds found in runs_dir (the accuracy
  part's), measured and summarised per layer; the runs not found are named."""
  result = {"batches": batches, "halves": HALVES, "configs": {}, "missing": []}
  for key in configs:
    measured, seeds_done = [], []
    for seed in seeds:
      model_dir = os.path.join(runs_dir, f"{key}-seed{seed}")
      if not os.path.exists(os.path.join(model_dir, "summary.json")):
        result["missing"].append(f"{key}-seed{seed}")
        continue
      measured.append(measure(model_dir, batches, seed))
      seeds_done.append(seed)
      print(f"  trust ratios: {key} seed {seed}: {len(measured[-1]['layers'])} layers at checkpoints "
            f"{', '.join(measured[-1]['layers'][0]['steps']) if measured[-1]['layers'] else '-'}", flush=True)
    if measured:
      result["configs"][key] = {"seeds": seeds_done, "steps": sorted({int(s) for m in measured for l in m["layers"]
                                                                       for s in l["steps"]}),
                                "rank": measured[0]["rank"], "error_feedback": measured[0]["error_feedback"],
                                "layers": summarise(measured)}
  return result
