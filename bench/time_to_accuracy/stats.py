"""`make time-to-accuracy`'s runs over their seeds: the statistics, the table and the findings (pure:
run records of bench/time_to_accuracy/__main__.run_record in, numbers and markdown out)."""
import statistics

from bench.time_to_accuracy.scale import dash
from bench.harness.train_runs import Setting


def center(values) -> dict:
  """{'median', 'mean'} of the values that are not None; both None where there are none."""
  vals = [v for v in values if v is not None]
  if not vals:
    return {"median": None, "mean": None}
  return {"median": statistics.median(vals), "mean": statistics.mean(vals)}


def aggregate(runs: list[dict]) -> list[dict]:
  """Per configuration, in the order of runs, over its seeds: time and epochs to target over the
  seeds that reached it, images/s and final top-1/top-5 over all of them, the best top-1 of any."""
  out = []
  for key in dict.fromkeys(r["config"] for r in runs):
    group = [r for r in runs if r["config"] == key]
    hit = [r for r in group if r["reached"]]
    s = Setting(**group[0]["setting"])
    out.append({"config": key, "name": group[0]["name"], "global_batch": s.global_batch,
                "per_rank_batch": s.per_rank_batch, "accumulation_steps": s.accumulation_steps,
                "optimizer": s.optimizer, "precision": s.precision, "base_lr": s.base_lr, "peak_lr": s.peak_lr,
                "warmup_epochs": s.warmup_epochs, "schedule": s.schedule,
                "seeds": [r["seed"] for r in group], "reached": len(hit),
                "time_to_target_seconds": center(r["time_to_target_seconds"] for r in hit),
                "epochs_to_target": center(r["target_epoch"] for r in hit),
                "images_per_sec": center(r["images_per_sec"] for r in group),
                "final_top1": center(r["final_top1"] for r in group),
                "final_top5": center(r["final_top5"] for r in group),
                "best_top1": max(r["best_top1"] for r in group),
                "epochs_trained": max(r["epochs"] for r in group),
                "diverged": sum(r["status"] == "diverged" for r in group),
                "wall_seconds": center(r["wall_seconds"] for r in group)})
  return out


def _both(c: dict, spec: str) -> str:
  """'median (mean)' of a center(), or '-'."""
  return "-" if c["median"] is None else f"{c['median']:{spec}} ({c['mean']:{spec}})"


def table(stats: list[dict]) -> str:
  """The report's table: a row per configuration (pure: aggregate()'s rows in, markdown out)."""
  rows = ["| configuration | global batch (per rank x accumulation) | optimizer, precision | base LR per 256 "
          "(peak) | warmup epochs, decay | reached | time to target s: median (mean) | epochs to target: "
          "median (mean) | images/s: median | final top-1 %: mean | final top-5 %: mean | best top-1 % |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for s in stats:
    accumulation = f" x {s['accumulation_steps']}" if s["accumulation_steps"] > 1 else ""
    rows.append(f"| {s['name']} | {s['global_batch']:,} ({s['per_rank_batch']}{accumulation}) "
                f"| {s['optimizer']}, {s['precision']} | {s['base_lr']:g} ({s['peak_lr']:g}) "
                f"| {s['warmup_epochs']:g}, {s['schedule']} | {s['reached']} of {len(s['seeds'])} "
                f"| {_both(s['time_to_target_seconds'], '.0f')} | {_both(s['epochs_to_target'], '.2f')} "
                f"| {dash(s['images_per_sec']['median'], '.0f')} | {dash(s['final_top1']['mean'], '.2f', 100)} "
                f"| {dash(s['final_top5']['mean'], '.2f', 100)} | {s['best_top1'] * 100:.2f} |")
  return "\n".join(rows)


def findings(stats: list[dict], budget) -> str:
  """The findings paragraph, every figure from stats: each configuration against the baseline (a)
  in time, epochs and images/s, the fastest, and what bf16 and accumulation did to images/s.
  budget: time_to_accuracy.Budget (its target)."""
  by = {s["config"]: s for s in stats}
  base = by.get("a") if by.get("a", {}).get("reached") else None
  target = f"{budget.target * 100:g}% top-1"
  out = []
  for s in stats:
    t, e, ips = (s["time_to_target_seconds"]["median"], s["epochs_to_target"]["median"],
                 s["images_per_sec"]["median"])
    seeds = f" in {s['reached']} of {len(s['seeds'])} seeds" if s["reached"] < len(s["seeds"]) else ""
    if not s["reached"]:
      diverged = f"; {s['diverged']} of {len(s['seeds'])} seeds diverged" if s["diverged"] else ""
      out.append(f"{s['name']} did not reach {target} in {s['epochs_trained']:.2f} epochs "
                 f"(best held-out top-1 {s['best_top1']:.2%}{diverged}).")
      continue
    line = f"{s['name']} reached {target}{seeds} in a median {t:.0f} s, {e:.2f} epochs, at {dash(ips, '.0f')} images/s"
    if base and s is not base and ips and base["images_per_sec"]["median"]:
      ratio = t / base["time_to_target_seconds"]["median"]
      line += (f": {ratio:.2f}x the baseline's time ({'faster' if ratio < 1 else 'slower'}), "
               f"{e / base['epochs_to_target']['median']:.2f}x its epochs at "
               f"{ips / base['images_per_sec']['median']:.2f}x its images/s")
    out.append(line + ".")
  reached = [s for s in stats if s["reached"]]
  if len(reached) > 1:
    best = min(reached, key=lambda s: s["time_to_target_seconds"]["median"])
    out.append(f"Fastest to the target: {best['name']}.")
  rate = lambda k: by[k]["images_per_sec"]["median"] if k in by else None
  if rate("c") and rate("d"):
    out.append(f"bf16 ({by['d']['name'][:3]}) trained at {rate('d') / rate('c'):.2f}x the images/s of fp32 "
               f"({by['c']['name'][:3]}).")
  if rate("c") and rate("e"):
    e = by["e"]
    out.append(f"{e['per_rank_batch']} images per rank x {e['accumulation_steps']} accumulation steps "
               f"({e['name'][:3]}: one exchange per {e['global_batch']:,} images, against one per "
               f"{by['c']['global_batch']:,}) trained at {rate('e') / rate('c'):.2f}x {by['c']['name'][:3]}'s "
               "images/s.")
  return " ".join(out)
