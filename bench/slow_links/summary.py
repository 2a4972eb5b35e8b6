"""The study's figures from its run records (pure): medians over seeds, stock's best fixed batch,
each configuration's ratio to it and the targets' verdicts.

A run record (bench/slow_links/launch.py) holds at least: arm, rate, hosts, seed, per_rank (the
fixed arms'), reached, time_to_target_seconds, final_top1. A run that did not reach the target
counts as infinitely slow: a median over seeds with one such run is infinite when the other seeds
cannot outvote it (with two seeds: always), and a batch that missed in some seed is never stock's
best unless every batch missed.
"""
import math
import statistics

from bench.slow_links import arms

SLOW_TARGET, SLOW_FLOOR = 0.5, 0.8  # the joint arm's time to target over stock's best, at a shaped rate
FAST_TARGET = 1.0                   # unshaped: no slower
TOP1_POINTS = 0.5                   # final top-1 within this many points of stock's best
LOST_TARGET = 1.2                   # the lost-host arm over the joint arm without the loss
INF = math.inf


def seconds(run: dict) -> float:
  """Time to target (MLPerf's clock, from start-up), infinite when not reached."""
  t = run.get("time_to_target_seconds")
  return float(t) if run.get("reached") and t is not None else INF


def median(values) -> float | None:
  values = list(values)
  return statistics.median(values) if values else None


def spread(values) -> tuple[float, float] | None:
  values = list(values)
  return (min(values), max(values)) if values else None


def select(runs: list[dict], rate: str, hosts: int, arm: str, per_rank: int | None = None) -> list[dict]:
  """The time-to-target runs of one arm in one configuration (of one batch for the fixed arms)."""
  return [r for r in runs if r.get("part", "target") == "target" and r["rate"] == rate and r["hosts"] == hosts
          and r["arm"] == arm and (per_rank is None or r.get("per_rank") == per_rank)]


def best_stock(runs: list[dict], rate: str, hosts: int) -> int | None:
  """Stock's best fixed batch (images per rank per update) in a configuration: the lowest median
  time to target over seeds; ties (every batch missing the target) to the higher median final
  top-1, then the smaller batch. None before any stock run."""
  batches = sorted({r["per_rank"] for r in select(runs, rate, hosts, "stock")})
  if not batches:
    return None

  def key(b):
    rs = select(runs, rate, hosts, "stock", b)
    return median(seconds(r) for r in rs), -(median((r.get("final_top1") or 0.0) for r in rs)), b
  return min(batches, key=key)


def by_seed_ratio(num: list[dict], den: list[dict]) -> list[float]:
  """Seed by seed (paired), num's time over den's: the spread of a ratio of medians."""
  times = {r["seed"]: seconds(r) for r in den}
  out = []
  for r in num:
    d = times.get(r["seed"])
    if d is not None and math.isfinite(d):
      out.append(seconds(r) / d)
  return out


def ratio(a: float | None, b: float | None) -> float | None:
  if a is None or b is None or not math.isfinite(b) or b <= 0:
    return None
  return a / b  # infinite when a is


def arm_figures(rs: list[dict]) -> dict:
  times = [seconds(r) for r in rs]
  top1 = [r.get("final_top1") or 0.0 for r in rs]
  return {"runs": len(rs), "reached": sum(r.get("reached", False) for r in rs), "median_s": median(times),
          "range_s": spread(times), "final_top1": median(top1), "final_top1_range": spread(top1)}


def configuration(runs: list[dict], rate: str, hosts: int) -> dict:
  """One (rate, hosts) configuration's summary entry."""
  best = best_stock(runs, rate, hosts)
  stock = select(runs, rate, hosts, "stock", best) if best else []
  out = {"rate": rate, "link_mbit": arms.link_mbit(rate), "hosts": hosts, "stock_best_per_rank": best,
         "stock_best": arm_figures(stock)}
  for arm in ("auto", "adaptive", "joint", "lost"):
    rs = select(runs, rate, hosts, arm)
    figures = arm_figures(rs)
    figures["ratio_to_stock"] = ratio(figures["median_s"], out["stock_best"]["median_s"])
    figures["ratio_range"] = spread(by_seed_ratio(rs, stock))
    figures["ratio_seeds"] = len(by_seed_ratio(rs, stock))
    if arm == "auto":
      figures["per_rank"] = sorted({r.get("per_rank") for r in rs})
    out[arm] = figures
  joint = select(runs, rate, hosts, "joint")
  out["ratio_to_stock"] = out["joint"]["ratio_to_stock"]
  out["ratio_range"], out["ratio_seeds"] = out["joint"]["ratio_range"], out["joint"]["ratio_seeds"]
  out["lost"]["ratio_to_joint"] = ratio(out["lost"]["median_s"], out["joint"]["median_s"])
  paired = by_seed_ratio(select(runs, rate, hosts, "lost"), joint)
  out["lost"]["ratio_to_joint_range"], out["lost"]["ratio_to_joint_seeds"] = spread(paired), len(paired)
  s, j = out["stock_best"]["final_top1"], out["joint"]["final_top1"]
  out["top1_points"] = None if s is None or j is None or not stock or not joint else round(100 * (j - s), 3)
  return out


def summarize(runs: list[dict], rates, hosts) -> list[dict]:
  """results/slow_links.json's `summary`: an entry per link rate and host count with runs."""
  return [configuration(runs, rate, h) for rate in rates for h in hosts
          if any(r["rate"] == rate and r["hosts"] == h and r.get("part", "target") == "target" for r in runs)]


def slowest_first(rates) -> list[str]:
  """Link rates, the slowest shaped one first and unshaped ('none') last."""
  return sorted(set(rates), key=lambda x: (arms.link_mbit(x) is None, arms.link_mbit(x) or 0))


def of_runs(runs: list[dict]) -> tuple[list[dict], list[dict]]:
  """(summary, verdicts) of every configuration the runs cover, slowest link first."""
  rates = slowest_first(r["rate"] for r in runs)
  s = summarize(runs, rates, sorted({r["hosts"] for r in runs}))
  return s, verdicts(s)


def _verdict(target: str, entry: dict, value, met, why: str) -> dict:
  return {"target": target, "rate": entry["rate"], "hosts": entry["hosts"], "value": value, "met": met, "why": why}


def verdicts(summary: list[dict]) -> list[dict]:
  """Each target, met (True), not met (False) or not measured (None), per configuration."""
  out = []
  for e in summary:
    r = e["ratio_to_stock"]
    joint = e.get("joint") or {}
    if e["link_mbit"] is not None:
      for target, bound in (("time, slow link", SLOW_TARGET), ("time, slow link (floor)", SLOW_FLOOR)):
        out.append(_verdict(target, e, r, None if r is None else r <= bound, _times(r, e, bound, joint)))
    else:
      out.append(_verdict("time, fast link", e, r, None if r is None else r <= FAST_TARGET,
                          _times(r, e, FAST_TARGET, joint)))
    d = e["top1_points"]
    out.append(_verdict("final top-1", e, d, None if d is None else d >= -TOP1_POINTS,
                        "not measured" if d is None else f"{d:+.2f} points against stock's best "
                        f"(target: no more than {TOP1_POINTS} below)"))
    lost, lr = e["lost"], e["lost"]["ratio_to_joint"]
    out.append(_verdict("lost host", e, lr, None if lr is None else lr <= LOST_TARGET,
                        "not measured" if lr is None else
                        f"{_x(lr)} the joint arm without the loss{_seeds(lost['ratio_to_joint_range'], lost['ratio_to_joint_seeds'])}"
                        f" (target <= "
                        f"{LOST_TARGET}x; {lost['reached']} of {lost['runs']} lost-host runs reached the target)"))
  return out


def _x(r: float) -> str:
  return f"{r:.2f}x" if math.isfinite(r) else "not reached: infinitely slower than"


def _seeds(rng, n: int) -> str:
  """The seed-by-seed ratios' range: ' (seeds 0.42-0.57)', ' (one seed)', '' (none paired)."""
  return "" if not rng else " (one seed)" if n == 1 else f" (seeds {rng[0]:.2f}-{rng[1]:.2f})"


def _times(r, e: dict, bound: float, joint: dict) -> str:
  if r is None:
    return "no ratio: stock's best did not reach the target, or an arm was not run"
  return (f"{_x(r)} stock's best{_seeds(e['ratio_range'], e['ratio_seeds'])} against <= {bound}x; the joint arm "
          f"reached the target in "
          f"{joint.get('reached', 0)} of {joint.get('runs', 0)} runs")
