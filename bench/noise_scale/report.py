"""The study's answer: S_min and E_min fitted to each batch's best run, B_crit = E_min / S_min
against the B_simple those runs measured at the target; results/noise_scale.{md,json,png}."""
import dataclasses
import json
import math
import os
import statistics

from bench.noise_scale import study
from training.adaptive import noise_scale

# B_simple's moving average (decay 0.99 a step, a window of ~100 steps) gives the value at the
# target only in a run four windows long (0.99^400: 2% of the weight left on the steps before);
# in a shorter run it is a mean over most of the run, lower, since the noise scale grows as the
# loss falls. The ratio takes the runs this long; the others are shown.
SETTLED_STEPS = 400


def simple_prediction(points: list[tuple[int, int]], b_simple: float) -> float:
  """S_min of the curve S = S_min (1 + B_simple / B) through (batch, steps) points, its one scale
  fitted in log space (closed form): what B_simple alone says of the curve's shape (pure)."""
  return math.exp(statistics.fmean(math.log(s) - math.log(1 + b_simple / b) for b, s in points))


def summarize(by_batch: dict[int, list[dict]], tries: dict[int, int] | None = None,
              starts: dict[int, float] | None = None) -> dict:
  """The rows (one per batch), the fit, B_simple's median at the target, their ratio (pure).
  tries: the runs the search was allowed per batch where not study.MAX_TRIES; starts: the first
  LRs set by hand (--lr) instead of carried along the curve."""
  rows, points = [], []
  for batch in sorted(by_batch):
    runs, best = by_batch[batch], study.best_of(by_batch[batch])
    lrs = sorted(r["peak_lr"] for r in runs)
    allowed = (tries or {}).get(batch, study.MAX_TRIES)
    rows.append({"batch": batch, "accumulation": runs[0]["accumulation"],
                 "tried": [{"peak_lr": r["peak_lr"], "reached": r["reached"], "steps": r["target_step"] or r["steps"],
                            "cap": r["cap"], "status": r["status"]} for r in runs],
                 "best_lr": best["peak_lr"] if best else None,
                 "tries": allowed, "start_set": batch in (starts or {}),
                 "best_at_edge": bool(best) and len(runs) >= allowed and best["peak_lr"] == lrs[-1],
                 "steps": best["target_step"] if best else None,
                 "epochs": round(best["target_step"] * batch / study.TRAIN_IMAGES, 3) if best else None,
                 "b_simple_at_target": best["b_simple_at_target"] if best else None,
                 "images_per_sec": best["images_per_sec"] if best else None})
    if best:
      points.append((batch, best["target_step"]))
  out = {"rows": rows, "fit": None, "b_simple": None, "ratio": None, "prediction": None}
  measured = [r for r in rows if r["b_simple_at_target"]]
  settled = [r for r in measured if r["steps"] >= SETTLED_STEPS] or measured
  if measured:
    values = [r["b_simple_at_target"] for r in settled]
    out["b_simple"] = {"median": statistics.median(values), "min": min(values), "max": max(values),
                       "batches": [r["batch"] for r in settled], "settled": settled is not measured}
  if len({b for b, _ in points}) >= 2:
    fit = noise_scale.fit_tradeoff([(s, s * b) for b, s in points])
    out["fit"] = {"s_min": fit.s_min, "e_min": fit.e_min, "e_min_epochs": fit.e_min / study.TRAIN_IMAGES,
                  "b_crit": fit.b_crit, "rms_log": fit.rms}
    for row in rows:
      row["fit_steps"] = noise_scale.steps_at(row["batch"], fit.s_min, fit.e_min)
  if out["fit"] and out["b_simple"]:
    b_simple = out["b_simple"]["median"]
    out["ratio"] = out["fit"]["b_crit"] / b_simple
    s_min = simple_prediction(points, b_simple)
    residuals = [math.log(s_min * (1 + b_simple / b) / s) for b, s in points]
    out["prediction"] = {"s_min": s_min, "rms_log": math.sqrt(statistics.fmean(r * r for r in residuals))}
    for row in rows:
      row["simple_steps"] = s_min * (1 + b_simple / row["batch"])
  return out


def _f(value, spec: str) -> str:
  return "-" if value is None else format(value, spec)


def table(rows: list[dict]) -> str:
  out = ["| global batch (K) | LRs tried: steps to target | best LR | steps S | epochs E | B_simple at target "
         "| S fitted | S from B_simple | images/s |", "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    tried = ", ".join(f"{t['peak_lr']:.3g}: {t['steps'] if t['reached'] else 'not by ' + str(t['steps'])}"
                      + (" (diverged)" if t["status"] == "diverged" else "") for t in r["tried"])
    edge = " (edge)" if r["best_at_edge"] else ""
    out.append(f"| {r['batch']:,} ({r['accumulation']}) | {tried} | {_f(r['best_lr'], '.3g')}{edge} "
               f"| {_f(r['steps'], ',')} | {_f(r['epochs'], '.2f')} | {_f(r['b_simple_at_target'], ',.0f')} "
               f"| {_f(r.get('fit_steps'), ',.0f')} | {_f(r.get('simple_steps'), ',.0f')} | {_f(r['images_per_sec'], '.0f')} |")
  return "\n".join(out)


def findings(s: dict, budget: study.Budget) -> str:
  """The numbers in words, whatever they are (pure)."""
  out = []
  reached = [r for r in s["rows"] if r["steps"]]
  missing = [r["batch"] for r in s["rows"] if not r["steps"]]
  if len(reached) >= 2:
    lo, hi = reached[0], reached[-1]
    out.append(f"From batch {lo['batch']:,} to {hi['batch']:,} ({hi['batch'] // lo['batch']}x) the steps to "
               f"{budget.target:g} fell {lo['steps'] / hi['steps']:.1f}x and the epochs rose "
               f"{hi['epochs'] / lo['epochs']:.1f}x ({lo['epochs']:.2f} to {hi['epochs']:.2f}).")
  if missing:
    out.append(f"Not reached within {budget.max_epochs:g} epochs at any LR tried: batch "
               f"{', '.join(f'{b:,}' for b in missing)}.")
  if s["fit"]:
    f = s["fit"]
    batches = [r["batch"] for r in reached]
    out.append(f"Fitted: S_min {f['s_min']:.0f} steps, E_min {f['e_min_epochs']:.2f} epochs, B_crit = E_min / S_min "
               f"= {f['b_crit']:,.0f} (rms {100 * (math.exp(f['rms_log']) - 1):.0f}% in steps).")
    if not min(batches) / 10 <= f["b_crit"] <= 10 * max(batches):  # no bend in the measured range
      out.append(f"That B_crit lies far outside the batches measured ({min(batches):,} to {max(batches):,}): the "
                 "steps show no bend there, so the fit only says B_crit is "
                 f"{'above' if f['b_crit'] > max(batches) else 'below'} them.")
  if s["b_simple"]:
    b = s["b_simple"]
    over = ", ".join(f"{x:,}" for x in b["batches"])
    out.append(f"B_simple measured at the target: median {b['median']:,.0f} ({b['min']:,.0f} to {b['max']:,.0f}) "
               f"over batch {over}" + (f", the runs of {SETTLED_STEPS}+ steps to the target, where the moving "
                                       "average is the value there; in shorter runs it averages most of the run, "
                                       "in which the noise scale was growing (lower values in the table)."
                                       if b["settled"] else "."))
  if s["ratio"]:
    out.append(f"**B_crit / B_simple = {s['ratio']:.2f}** (McCandlish et al. found B_simple close to B_crit, "
               f"within a small factor, on most tasks). The curve B_simple predicts, its one scale fitted, "
               f"misses the measured steps by {100 * (math.exp(s['prediction']['rms_log']) - 1):.0f}% rms.")
  cut = [r for r in s["rows"] if r["tries"] < study.MAX_TRIES]
  if cut:
    out.append("The search was cut to fit the time budget (--tries): " + ", ".join(
        f"{r['tries']} run{'s' if r['tries'] > 1 else ''} at batch {r['batch']:,}" for r in cut) + ".")
  set_by_hand = [r for r in s["rows"] if r["start_set"]]
  if set_by_hand:
    out.append("First LR set by hand (--lr) instead of carried along the curve: " + ", ".join(
        f"{r['tried'][0]['peak_lr']:.3g} at batch {r['batch']:,}" for r in set_by_hand) + ".")
  edges = [r["batch"] for r in s["rows"] if r["best_at_edge"]]
  if edges:
    out.append(f"At batch {', '.join(f'{b:,}' for b in edges)} the best LR was the last one the search could "
               "try: a wider search might shorten those runs.")
  return " ".join(out)


def plot(s: dict, by_batch: dict[int, list[dict]], path: str) -> None:
  """Steps to the target against the global batch (measured, fitted, B_simple's curve) and
  B_simple against the epoch in each batch's best run."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5))
  rows = [r for r in s["rows"] if r["steps"]]
  for batch, runs in by_batch.items():
    others = [r["target_step"] for r in runs if r["reached"] and r is not study.best_of(runs)]
    ax.scatter([batch] * len(others), others, marker="x", color="grey", alpha=0.5, label=None)
  ax.plot([r["batch"] for r in rows], [r["steps"] for r in rows], "o", color="C0", label="best LR, measured")
  grid = [2 ** (i / 4) for i in range(4 * 5, 4 * 13 + 1)]  # 32 ... 8,192
  if s["fit"]:
    f = s["fit"]
    ax.plot(grid, [noise_scale.steps_at(b, f["s_min"], f["e_min"]) for b in grid], "-", color="C0",
            label=f"fit: B_crit {f['b_crit']:,.0f}")
    ax.axvline(f["b_crit"], color="C0", ls=":", alpha=0.6)
  if s["prediction"]:
    b = s["b_simple"]["median"]
    ax.plot(grid, [s["prediction"]["s_min"] * (1 + b / x) for x in grid], "--", color="C3",
            label=f"from B_simple {b:,.0f}")
    ax.axvline(b, color="C3", ls=":", alpha=0.6)
  ax.set(xscale="log", yscale="log", xlabel="global batch B (images per update)", ylabel="steps to the target S",
         title="Steps to the target against the batch")
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=8)
  for i, (batch, runs) in enumerate(sorted(by_batch.items())):
    best = study.best_of(runs)
    if best and best["noise_curve"]:
      bx.plot([p["epoch"] for p in best["noise_curve"]], [p["b_simple"] for p in best["noise_curve"]],
              color=f"C{i}", label=f"batch {batch:,}")
  if s["fit"]:
    bx.axhline(s["fit"]["b_crit"], color="k", ls=":", label="fitted B_crit")
  bx.set(yscale="log", xlabel="epoch", ylabel="B_simple (smoothed)", title="B_simple as training goes on")
  bx.grid(alpha=0.3, which="both")
  bx.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def write(by_batch: dict[int, list[dict]], budget: study.Budget, out_dir: str, wall: float, cost: dict | None,
          tries: dict[int, int] | None = None, starts: dict[int, float] | None = None) -> str:
  """results/noise_scale.{md,json,png}; the markdown's text."""
  s = summarize(by_batch, tries, starts)
  os.makedirs(out_dir, exist_ok=True)
  plot(s, by_batch, os.path.join(out_dir, "noise_scale.png"))
  with open(os.path.join(out_dir, "noise_scale.json"), "w") as fh:
    json.dump({"budget": dataclasses.asdict(budget), "ranks": study.RANKS,
               "model": study.MODEL, "wall_seconds": wall, **s, "cost": cost,
               "runs": [r for b in sorted(by_batch) for r in by_batch[b]]}, fh, indent=1, default=list)
  text = markdown(s, by_batch, budget, wall, cost)
  with open(os.path.join(out_dir, "noise_scale.md"), "w") as fh:
    fh.write(text)
  return text


def markdown(s: dict, by_batch: dict, budget: study.Budget, wall: float, cost: dict | None) -> str:
  example = next(iter(by_batch.values()))[0]["command"]
  lines = [
      "# The gradient noise scale against real training (`make noise-scale`)", "",
      f"ResNet-8 on Fashion-MNIST, {study.RANKS} ranks on this host (horovodrun, MPI), BatchNorm batch "
      f"{study.BN_BATCH} per rank, global batch 64 x K by gradient accumulation; SGD (momentum 0.9), warmup then a "
      f"constant LR; the steps S to the first of {study.EVALS_PER_EPOCH} held-out evaluations an epoch with top-1 >= "
      f"{budget.target:g} (at most {budget.max_epochs:g} epochs), at the best LR of a search by factors of 2 "
      "(bench/noise_scale/__init__.py says why). One seed. B_simple: train.py --noise_scale, each rank's gradient "
      "(B_small = 32 K) against the exchanged mean (B_big = 64 K), smoothed, at the target step. "
      f"{sum(r['wall_seconds'] for runs in by_batch.values() for r in runs) / 3600:.1f} hours of runs.", "",
      f"A run: `{example}`", "",
      table(s["rows"]), "",
      findings(s, budget), "",
      "![steps to the target against the batch](noise_scale.png)", ""]
  if cost:
    lines += ["## What measuring it costs", "", cost["text"], ""]
  lines += [
      "## Limits", "",
      "- One seed per (batch, LR): make time-to-accuracy's two seeds of batch 64 differed by 40% in time to 0.85; "
      "the best of a few LRs per batch is biased towards lucky runs alike at every batch.",
      "- B_simple grows as the loss falls (the right panel); compared at the target, every run is at the same "
      "held-out accuracy, which is where the fit's B_crit applies.",
      "- BatchNorm: the per-rank gradient is taken over the BatchNorm batch of one rank (32 K), whose statistics "
      "differ from the global batch's; B_simple assumes examples independent within a batch.", ""]
  return "\n".join(lines)
