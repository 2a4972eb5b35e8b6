"""The plan as the user reads it: the findings, the tables, the figure and the JSON (pure but for write)."""
import dataclasses
import json
import math
import os
import statistics

from bench.plan import predict, validate
from bench.plan.exchange import Cluster
from bench.plan.predict import Point
from bench.plan.workload import Workload


def duration(seconds: float) -> str:
  """'42 s', '6.9 min', '3.2 h' or '2.1 d'."""
  for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
    if seconds >= 2 * size:
      return f"{seconds / size:.1f} {unit}"
  return f"{seconds:.0f} s"


def past(q: Point, support: int) -> str:
  """'' for a batch a measurement supports, else how far past the largest measured one it lies."""
  return "" if q.global_batch <= support else \
      f" [extrapolated: {q.global_batch / support:.3g}x the largest measured batch, {support:,}]"


def describe(q: Point, support: int | None = None) -> str:
  """One point in a sentence: where, the batch, the time, epochs, steps, GPU-hours, and whether
  its batch lies past the largest one measured (support; None: not said)."""
  return (f"{q.ranks:,} rank{'s' if q.ranks > 1 else ''}, global batch {q.global_batch:,} ({q.policy}): "
          f"{duration(q.seconds)}, {q.epochs:.2f} epochs, {q.steps:,.0f} steps of {q.step * 1e3:.1f} ms, "
          f"{q.gpu_hours:,.2f} GPU-hours" + (past(q, support) if support else ""))


def support(workload: Workload, measured) -> int:
  """The largest global batch a measurement supports: the run's, or a measured batch that reached the target."""
  return max([workload.batch] + [b for b, _, reached in measured if reached])


def within(points: list[Point], max_epochs: float | None) -> list[Point]:
  """The points whose predicted epochs to the target are within max_epochs (all when None)."""
  return [q for q in points if max_epochs is None or q.epochs <= max_epochs]


def bounds(model: predict.Model, measured) -> list[str]:
  """The model beside each measured batch that did not reach the target: a lower bound (pure)."""
  out = []
  for batch, epochs, reached in measured:
    if reached:
      continue
    mine = model.epochs(batch)
    out.append(f"At global batch {batch:,} the model predicts {mine:.2f} epochs; measured not reached within "
               f"{epochs:g} ({'consistent' if mine > epochs else 'the model expected it to'}).")
  return out


def out_of_sample(workload: Workload, check: validate.Validation | None, fitted: bool) -> list[str]:
  """The leave-one-out figures and B_crit / B_simple's spread in sentences (pure)."""
  if check is None:
    return (["With two measured batches the fit passes through both: nothing is left to test it out of sample."]
            if fitted else [])
  misses = [h for h in check.held if not h.within]
  each = ", ".join(f"{h.batch:,}: {h.ratio:.2f}x" for h in check.held)
  b = workload.b_simple
  lo, hi = check.loo_range
  return [f"Out of sample (each measured batch predicted by the fit of the others), predicted / measured epochs: "
          f"{each}; within {validate.WITHIN:g}x at {len(check.held) - len(misses)} of {len(check.held)}"
          + (f", missed at {', '.join(f'{h.batch:,}' for h in misses)}." if misses else "."),
          f"B_crit / B_simple = {check.b_crit / b:.2f} over every batch (B_crit {check.b_crit:,.0f}, B_simple "
          f"{b:,.0f} the run's); {lo / b:.2f} to {hi / b:.2f} leaving one batch out; 95% bootstrap interval "
          f"{check.interval[0] / b:.2f} to {check.interval[1] / b:.2f} ({check.draws} resamples of the "
          f"{len(check.held)} batches). Each batch counts once: the spread of repeated runs at one batch "
          "(seeds, LR searches) is not in it."]


def findings(workload: Workload, model: predict.Model, points: list[Point], max_epochs: float | None = None,
             measured=(), check: validate.Validation | None = None, fitted: bool = False) -> list[str]:
  """The plan's answers, one sentence each, over the points within max_epochs: the least time (at
  a measured batch, then past it if faster there), the least GPU-hours, where doubling the ranks
  stops paying, the largest batch within max_epochs, the plan at the reference run, the model
  against measurement (out of sample when fitted)."""
  top = support(workload, measured)
  ok = within(points, max_epochs)
  out = []
  if max_epochs:
    largest = model.steps.largest_within(max_epochs * model.images)
    out.append(f"Within {max_epochs:g} epochs the model reaches the target at global batches up to {largest:,.0f} "
               "(E(B) <= that many epochs); every answer below is among those.")
  if not ok:
    return out + ["No planned configuration reaches the target within the epoch limit: plan smaller batches "
                  "(--per_rank_batches, --accumulation) or raise --max_epochs."] + \
        out_of_sample(workload, check, fitted)
  fastest = min(ok, key=lambda q: q.seconds)
  measured_ok = [q for q in ok if q.global_batch <= top]
  if measured_ok:
    out.append(f"Least time to the target at a measured batch or below (up to {top:,}): "
               f"{describe(min(measured_ok, key=lambda q: q.seconds))}.")
  if fastest.global_batch > top:
    out.append(f"Least time past it, where the model is extrapolated: {describe(fastest, top)}.")
  cheapest = min(ok, key=lambda q: q.gpu_hours)
  # The fewest GPU-hours are the fewest examples, the smallest batch on one rank: days. What a
  # user weighs is cost near the least time, so the cheapest within twice it is named too.
  near = min((q for q in ok if q.seconds <= 2 * fastest.seconds), key=lambda q: q.gpu_hours)
  out += [f"Least GPU-hours: {describe(cheapest, top)}.",
          f"Least GPU-hours within twice the least time: {describe(near, top)}."]
  best = predict.best_by_ranks(ok)
  knee = predict.knee(best)
  if knee:
    after = next(q for q in best if q.ranks == 2 * knee.ranks)
    out.append(f"Doubling the ranks buys less than 10% from {knee.ranks:,} ranks on: {duration(knee.seconds)} "
               f"at {knee.ranks:,}, {duration(after.seconds)} at {after.ranks:,} (each at its best batch)"
               f"{past(after, top)}.")
  else:
    out.append(f"Every doubling up to {best[-1].ranks:,} ranks still cuts the time by 10% or more.")
  if workload.reference:
    ranks, per_rank, accumulation, seconds, what = workload.reference
    mine = next((q for q in points if (q.ranks, q.per_rank_batch, q.accumulation) == (ranks, per_rank, accumulation)),
                None)
    if mine:
      out.append(f"At {ranks:,} ranks x {per_rank} x {accumulation} the plan predicts {duration(mine.seconds)} "
                 f"against {what} {duration(seconds)} ({mine.seconds / seconds:.2f}x).")
  return out + out_of_sample(workload, check, fitted) + bounds(model, measured)


def best_table(points: list[Point], top: int | None = None) -> str:
  """Per number of ranks its fastest batch: time, epochs, steps, the step's parts, GPU-hours,
  speed-up, and how far past the largest measured batch (top) it lies."""
  rows = ["| ranks | global batch (per rank x accumulation) | epochs | steps | overhead + compute ms "
          "| exchange ms (exposed) | time to target | GPU-hours | vs half the ranks | x largest measured |",
          "|---|---|---|---|---|---|---|---|---|---|"]
  best = predict.best_by_ranks(points)
  by = {q.ranks: q for q in best}
  for q in best:
    half = by.get(q.ranks // 2) if q.ranks > 1 else None
    gain = f"{half.seconds / q.seconds:.2f}x" if half else "-"
    accumulation = f" x {q.accumulation}" if q.accumulation > 1 else ""
    beyond = f"{q.global_batch / top:.3g}x" if top and q.global_batch > top else "-"
    rows.append(f"| {q.ranks:,} | {q.global_batch:,} ({q.per_rank_batch}{accumulation}) | {q.epochs:.2f} "
                f"| {q.steps:,.0f} | {q.overhead * 1e3:.1f} + {q.compute * 1e3:.1f} "
                f"| {q.exchange * 1e3:.1f} ({q.exposed * 1e3:.1f}) "
                f"| {duration(q.seconds)} | {q.gpu_hours:,.2f} | {gain} | {beyond} |")
  return "\n".join(rows)


def epochs_table(workload: Workload, model: predict.Model, points: list[Point], top: int | None = None) -> str:
  """Epochs and steps to the target at powers of 4 across the plan's global batches, and the run's;
  those past the largest measured batch (top) marked."""
  low, high = min(q.global_batch for q in points), max(q.global_batch for q in points)
  batches = sorted({4 ** k for k in range(math.ceil(math.log(low, 4)), math.floor(math.log(high, 4)) + 1)}
                   | {workload.batch})
  rows = ["| global batch | epochs to target | steps to target |", "|---|---|---|"]
  for b in batches:
    mark = " (the run)" if b == workload.batch else " (extrapolated)" if top and b > top else ""
    rows.append(f"| {b:,}{mark} | {model.epochs(b):.2f} "
                f"| {model.steps.at(b):,.0f} |")
  return "\n".join(rows)


def held_table(workload: Workload, check: validate.Validation) -> str:
  """Leave-one-out, a row per measured batch: epochs measured, predicted without it, their ratio, B_crit without it."""
  rows = ["| global batch | epochs measured | predicted without it | predicted / measured | B_crit without it |",
          "|---|---|---|---|---|"]
  for h in check.held:
    epochs = h.batch / workload.train_images
    rows.append(f"| {h.batch:,} | {h.measured * epochs:.2f} | {h.predicted * epochs:.2f} | {h.ratio:.2f}x"
                f"{'' if h.within else ' (missed)'} | {h.b_crit:,.0f} |")
  return "\n".join(rows)


def speed_line(workload: Workload, compute: predict.Compute, settings: dict) -> str:
  """The step's compute in words: a constant speed, or the fitted overhead and per-image time
  with the fit's predicted / measured images/s at each measured batch."""
  if settings.get("images_per_sec") or not settings.get("speeds"):
    speed = 1 / compute.per_image
    return (f"A step (training/goodput.StepTime): one rank's compute at {speed:,.1f} images/s whatever its batch "
            f"({'--images_per_sec' if settings.get('images_per_sec') else 'the run, one rate measured'}), then")
  times = predict.update_times(workload, settings["speeds"])
  micro = workload.ranks * workload.per_rank_batch
  fits = ", ".join(f"{k * micro:,}: {compute.step_time(workload.per_rank_batch, 0.0)(k) / statistics.median(t):.2f}x"
                   for k, t in sorted(times.items()))
  return (f"A step (training/goodput.StepTime): one rank's overhead of {compute.overhead * 1e3:.1f} ms an update plus "
          f"{compute.per_image * 1e3:.2f} ms an image (goodput.fit_step_time on the update times measured at "
          f"{len(times)} global batches on {workload.ranks} ranks of {workload.per_rank_batch} by accumulation; "
          f"predicted / measured update time: {fits}), then")


def setup(workload: Workload, cluster: Cluster, model: predict.Model, settings: dict) -> list[str]:
  """The plan's premises, one line each: the workload, the steps model, a step, the cluster, the notes."""
  s = model.steps
  overlap = ("overlapping the last micro-batch's backward pass (2/3 of its images' compute)" if settings["overlap"]
             else "after backprop (no overlap)")
  return [f"Workload: {workload.model} on {workload.dataset} ({workload.train_images:,} training images) to "
          f"{workload.target}: {workload.epochs:g} epochs at global batch {workload.batch:,}.",
          f"Steps (McCandlish et al. 2018): E(B) = E_min (1 + B/B_crit), S = E/B, read as AdaScale's clock "
          f"(training/goodput.updates_to: S(B) = S(B0) / r(B), B0 = {s.base_batch:,}, r with B_crit for B_simple); "
          f"{s.source}; E_min = {s.e_min / workload.train_images:.2f} epochs, S_min = {s.s_min:,.0f} steps.",
          f"{speed_line(workload, model.compute, settings)} the exchange: 32 MB buckets, each by hybrid allreduce, "
          f"{overlap}. Times are of the training steps only (no start-up, no evaluations).",
          f"Cluster {cluster.name}: " + "; ".join(f"{k}: {v}" for k, v in cluster.stated.items()) + ".",
          *(n[0].upper() + n[1:] + "." for n in workload.notes)]


def markdown(workload: Workload, cluster: Cluster, model: predict.Model, points: list[Point], settings: dict,
             check: validate.Validation | None = None) -> str:
  """The plan's page. settings: name, command, overlap, max_epochs, measured, speeds, images_per_sec, fitted."""
  bullets = lambda lines: "\n".join(f"- {line}" for line in lines)
  measured = settings.get("measured", ())
  top = support(workload, measured)
  ok = within(points, settings.get("max_epochs"))
  answers = findings(workload, model, points, settings.get("max_epochs"), measured, check, settings.get("fitted"))
  held = (f"\n## Against measurement, out of sample\n\nEach measured batch predicted by the trade-off fitted to "
          f"the others (training/noise_scale.fit_tradeoff), then set against its measured epochs.\n\n"
          f"{held_table(workload, check)}\n") if check else ""
  limit = f" within {settings['max_epochs']:g} epochs" if settings.get("max_epochs") else ""
  return f"""# Plan: {workload.name} on {cluster.name}

`{settings['command']}`

{bullets(setup(workload, cluster, model, settings))}

## Answers

{bullets(answers)}

## The fastest batch at each number of ranks{limit}

{best_table(ok, top) if ok else "None."}

![time to target against ranks](plan_{settings['name']}.png)

## Epochs to the target by global batch

{epochs_table(workload, model, points, top)}
{held}
Limits: a batch past the largest measured ({top:,}) is the model extrapolated; B_crit is fitted
or the noise scale times a ratio; the noise scale grows during training; BatchNorm's batch is the
per-rank batch ([docs/noise_scale.md](../docs/noise_scale.md)). Every (ranks, batch) is in
`plan_{settings['name']}.json`.
"""


def figure(workload: Workload, cluster: Cluster, points: list[Point], top: int, path: str) -> None:
  """Time to the target against ranks, a line per batch policy, the fastest at each ranks dashed,
  the batches past the largest measured one (top) crossed."""
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
  beyond = [q for q in points if q.global_batch > top]
  if beyond:
    ax.plot([q.ranks for q in beyond], [q.seconds / size for q in beyond], "kx", ms=5, alpha=0.6,
            label=f"batch past the largest measured ({top:,}): extrapolated")
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


def write(workload: Workload, cluster: Cluster, model: predict.Model, points: list[Point], settings: dict,
          out_dir: str, check: validate.Validation | None = None) -> str:
  """OUT_DIR/plan_NAME.{md,json,png}; the markdown returned. The figure shows the points within
  max_epochs; the JSON holds every point, marked within the limit or not, past the largest measured batch or not."""
  os.makedirs(out_dir, exist_ok=True)
  base = os.path.join(out_dir, f"plan_{settings['name']}")
  measured = settings.get("measured", ())
  top = support(workload, measured)
  ok = within(points, settings.get("max_epochs"))
  s = model.steps
  with open(base + ".json", "w") as fh:
    json.dump({"workload": dataclasses.asdict(workload), "cluster": {"name": cluster.name, "stated": cluster.stated},
               "settings": settings, "steps": dataclasses.asdict(s), "s_min": s.s_min, "e_min": s.e_min,
               "b_crit": s.b_noise, "compute": dataclasses.asdict(model.compute), "largest_measured_batch": top,
               "validation": dict(dataclasses.asdict(check), held=[dict(dataclasses.asdict(h), ratio=h.ratio)
                                                                   for h in check.held]) if check else None,
               "findings": findings(workload, model, points, settings.get("max_epochs"), measured, check,
                                    settings.get("fitted")),
               "points": [dict(dataclasses.asdict(q), step=q.step, gpu_hours=q.gpu_hours,
                               within_epochs=q in ok, extrapolated=q.global_batch > top) for q in points]},
              fh, indent=1)
  if ok:
    figure(workload, cluster, ok, top, base + ".png")
  text = markdown(workload, cluster, model, points, settings, check)
  with open(base + ".md", "w") as fh:
    fh.write(text)
  return text
