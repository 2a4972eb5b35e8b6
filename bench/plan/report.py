"""The plan as the user reads it: the findings, the tables, the figure and the JSON (pure but for write)."""
import dataclasses
import json
import math
import os

from bench.plan import predict
from bench.plan.exchange import Cluster
from bench.plan.predict import Point
from bench.plan.workload import Workload


def duration(seconds: float) -> str:
  """'42 s', '6.9 min', '3.2 h' or '2.1 d'."""
  for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
    if seconds >= 2 * size:
      return f"{seconds / size:.1f} {unit}"
  return f"{seconds:.0f} s"


def describe(q: Point) -> str:
  """One point in a sentence: where, the batch, the time, epochs, steps and GPU-hours."""
  return (f"{q.ranks:,} rank{'s' if q.ranks > 1 else ''}, global batch {q.global_batch:,} ({q.policy}): "
          f"{duration(q.seconds)}, {q.epochs:.2f} epochs, {q.steps:,.0f} steps of {q.step * 1e3:.1f} ms, "
          f"{q.gpu_hours:,.2f} GPU-hours")


def against(workload: Workload, ratio: float, measured: list[tuple[int, float, bool]]) -> list[str]:
  """The model's epochs to the target at each measured (global batch, epochs, reached) beside the
  measurement; a run that did not reach the target is a lower bound (pure)."""
  out = []
  for batch, epochs, reached in measured:
    mine = predict.epochs_at(workload, batch, ratio)
    steps = mine * workload.train_images / batch
    seen = f"{epochs:.2f} ({mine / epochs:.2f}x)" if reached else \
        f"not reached within {epochs:g} ({'consistent' if mine > epochs else 'the model expected it to'})"
    out.append(f"At global batch {batch:,} the model predicts {mine:.2f} epochs ({steps:,.0f} steps); measured {seen}.")
  return out


def findings(workload: Workload, points: list[Point], ratio: float, max_epochs: float | None = None,
             measured: list[tuple[int, float, bool]] = ()) -> list[str]:
  """The plan's answers, one sentence each: the least time, the least GPU-hours, where doubling the
  ranks stops paying, the largest batch within max_epochs, the plan at the reference run and the
  model against the measured epochs of other batches."""
  best = predict.best_by_ranks(points)
  fastest, cheapest = min(points, key=lambda q: q.seconds), min(points, key=lambda q: q.gpu_hours)
  # The fewest GPU-hours are the fewest examples, the smallest batch on one rank: days. What a
  # user weighs is cost near the least time, so the cheapest within twice it is named too.
  near = min((q for q in points if q.seconds <= 2 * fastest.seconds), key=lambda q: q.gpu_hours)
  out = [f"Least time to the target: {describe(fastest)}.", f"Least GPU-hours: {describe(cheapest)}.",
         f"Least GPU-hours within twice the least time: {describe(near)}."]
  knee = predict.knee(best)
  if knee:
    after = next(q for q in best if q.ranks == 2 * knee.ranks)
    out.append(f"Doubling the ranks buys less than 10% from {knee.ranks:,} ranks on: {duration(knee.seconds)} "
               f"at {knee.ranks:,}, {duration(after.seconds)} at {after.ranks:,} (each at its best batch).")
  else:
    out.append(f"Every doubling up to {best[-1].ranks:,} ranks still cuts the time by 10% or more.")
  if max_epochs:
    largest = predict.largest_batch_within(workload, max_epochs, ratio)
    out.append(f"Within {max_epochs:g} epochs the model reaches the target at global batches up to {largest:,.0f} "
               "(E(B) <= that many epochs).")
  if workload.reference:
    ranks, per_rank, accumulation, seconds, what = workload.reference
    mine = next((q for q in points if (q.ranks, q.per_rank_batch, q.accumulation) == (ranks, per_rank, accumulation)),
                None)
    if mine:
      out.append(f"At {ranks:,} ranks x {per_rank} x {accumulation} the plan predicts {duration(mine.seconds)} "
                 f"against {what} {duration(seconds)} ({mine.seconds / seconds:.2f}x).")
  return out + against(workload, ratio, measured)


def best_table(points: list[Point]) -> str:
  """Per number of ranks its fastest batch: time, epochs, steps, the step's parts, GPU-hours, speed-up."""
  rows = ["| ranks | global batch (per rank x accumulation) | epochs | steps | compute ms | exchange ms (exposed) "
          "| time to target | GPU-hours | vs half the ranks |", "|---|---|---|---|---|---|---|---|---|"]
  best = predict.best_by_ranks(points)
  by = {q.ranks: q for q in best}
  for q in best:
    half = by.get(q.ranks // 2) if q.ranks > 1 else None
    gain = f"{half.seconds / q.seconds:.2f}x" if half else "-"
    accumulation = f" x {q.accumulation}" if q.accumulation > 1 else ""
    rows.append(f"| {q.ranks:,} | {q.global_batch:,} ({q.per_rank_batch}{accumulation}) | {q.epochs:.2f} "
                f"| {q.steps:,.0f} | {q.compute * 1e3:.1f} | {q.exchange * 1e3:.1f} ({q.exposed * 1e3:.1f}) "
                f"| {duration(q.seconds)} | {q.gpu_hours:,.2f} | {gain} |")
  return "\n".join(rows)


def epochs_table(workload: Workload, points: list[Point], ratio: float) -> str:
  """Epochs and steps to the target at powers of 4 across the plan's global batches, and the run's."""
  low, high = min(q.global_batch for q in points), max(q.global_batch for q in points)
  batches = sorted({4 ** k for k in range(math.ceil(math.log(low, 4)), math.floor(math.log(high, 4)) + 1)}
                   | {workload.batch})
  rows = ["| global batch | epochs to target | steps to target |", "|---|---|---|"]
  for b in batches:
    epochs = predict.epochs_at(workload, b, ratio)
    rows.append(f"| {b:,}{' (the run)' if b == workload.batch else ''} | {epochs:.2f} "
                f"| {epochs * workload.train_images / b:,.0f} |")
  return "\n".join(rows)


def setup(workload: Workload, cluster: Cluster, settings: dict) -> list[str]:
  """The plan's premises, one line each: the workload, the steps model, a step, the cluster, the notes."""
  ratio = settings["ratio"]
  s_min, e_min = predict.tradeoff(workload, ratio)
  overlap = ("overlapping the last micro-batch's backward pass (2/3 of its compute)" if settings["overlap"]
             else "after backprop (no overlap)")
  return [f"Workload: {workload.model} on {workload.dataset} ({workload.train_images:,} training images) to "
          f"{workload.target}: {workload.epochs:g} epochs at global batch {workload.batch:,}.",
          f"Steps (McCandlish et al. 2018): E(B) = E_min (1 + B/B_crit), S = E/B, with B_crit = {ratio:g} x "
          f"B_simple {workload.b_simple:,.0f} = {ratio * workload.b_simple:,.0f} images; through the run's point "
          f"E_min = {e_min / workload.train_images:.2f} epochs, S_min = {s_min:,.0f} steps.",
          f"A step: one rank's compute at {settings['images_per_sec']:,.1f} images/s (whatever its batch), then the "
          f"exchange: 32 MB buckets, each by hybrid allreduce, {overlap}. Times are of the training steps only "
          "(no start-up, no evaluations).",
          f"Cluster {cluster.name}: " + "; ".join(f"{k}: {v}" for k, v in cluster.stated.items()) + ".",
          *(n[0].upper() + n[1:] + "." for n in workload.notes)]


def markdown(workload: Workload, cluster: Cluster, points: list[Point], settings: dict) -> str:
  """The plan's page. settings: name, command, ratio, images_per_sec (per rank, as planned), overlap, max_epochs."""
  bullets = lambda lines: "\n".join(f"- {line}" for line in lines)
  answers = findings(workload, points, settings["ratio"], settings.get("max_epochs"), settings.get("measured", ()))
  return f"""# Plan: {workload.name} on {cluster.name}

`{settings['command']}`

{bullets(setup(workload, cluster, settings))}

## Answers

{bullets(answers)}

## The fastest batch at each number of ranks

{best_table(points)}

![time to target against ranks](plan_{settings['name']}.png)

## Epochs to the target by global batch

{epochs_table(workload, points, settings['ratio'])}

Limits: B_crit is the noise scale times a ratio the study measures; the noise scale grows during
training; BatchNorm's batch is the per-rank batch ([docs/noise_scale.md](../docs/noise_scale.md)).
Every (ranks, batch) is in `plan_{settings['name']}.json`.
"""


def figure(workload: Workload, cluster: Cluster, points: list[Point], path: str) -> None:
  """Time to the target against ranks, a line per batch policy, the fastest at each ranks dashed."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(8, 5))
  unit, size = ("hours", 3600) if max(q.seconds for q in points) >= 7200 else ("minutes", 60)
  for policy in dict.fromkeys(q.policy for q in points):
    mine = sorted((q for q in points if q.policy == policy), key=lambda q: q.ranks)
    style = "o-" if mine[0].accumulation == 1 else "s:"  # accumulation dotted: it can share a line's batch
    ax.plot([q.ranks for q in mine], [q.seconds / size for q in mine], style, ms=3, lw=1.2, label=policy)
  best = predict.best_by_ranks(points)
  ax.plot([q.ranks for q in best], [q.seconds / size for q in best], "k--", lw=1, label="fastest batch")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xlabel("ranks")
  ax.set_ylabel(f"{unit} to the target (training steps)")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  ax.set_title(f"{workload.name} on {cluster.name}: B_simple {workload.b_simple:,.0f}", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def write(workload: Workload, cluster: Cluster, points: list[Point], settings: dict, out_dir: str) -> str:
  """OUT_DIR/plan_NAME.{md,json,png}; the markdown returned."""
  os.makedirs(out_dir, exist_ok=True)
  base = os.path.join(out_dir, f"plan_{settings['name']}")
  s_min, e_min = predict.tradeoff(workload, settings["ratio"])
  with open(base + ".json", "w") as fh:
    json.dump({"workload": dataclasses.asdict(workload), "cluster": {"name": cluster.name, "stated": cluster.stated},
               "settings": settings, "s_min": s_min, "e_min": e_min, "b_crit": settings["ratio"] * workload.b_simple,
               "findings": findings(workload, points, settings["ratio"], settings.get("max_epochs"),
                                    settings.get("measured", ())),
               "points": [dict(dataclasses.asdict(q), step=q.step, gpu_hours=q.gpu_hours) for q in points]},
              fh, indent=1)
  figure(workload, cluster, points, base + ".png")
  text = markdown(workload, cluster, points, settings)
  with open(base + ".md", "w") as fh:
    fh.write(text)
  return text
