"""The tables and findings of results/adaptive.md (pure: the runs' records in, markdown lines out): each
comparison's median and range over seeds, the warmups, the controller's K, the issue's targets."""
from bench.noise_scale.study import TRAIN_IMAGES


def _spread(values, fmt=".4g"):
  """'median (min-max)' of the seeds' values, '-' when none."""
  values = sorted(v for v in values if v is not None)
  if not values:
    return "-"
  return f"{_median(values):{fmt}}" + (f" ({values[0]:{fmt}}-{values[-1]:{fmt}})" if len(values) > 1 else "")


def _median(values):
  values = sorted(v for v in values if v is not None)
  if not values:
    return None
  n = len(values)
  return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def budget_table(rows: dict) -> list[str]:
  out = ["| run | seeds | final held-out top-1 | updates | data epochs | AdaScale's r at the end | wall s |",
         "|---|---|---|---|---|---|---|"]
  for name, runs in rows.items():
    s = [r["summary"] for r in runs]
    ada = [x.get("adascale") or {} for x in s]
    data_epochs = [a.get("data_epochs", x["images_trained"] / 60_000) for a, x in zip(ada, s)]
    out.append(f"| {name} | {len(runs)} | {_spread([x['final_top1'] for x in s])} | {_spread([x['steps'] for x in s])} "
               f"| {_spread(data_epochs)} | {_spread([a.get('gain') for a in ada])} "
               f"| {_spread([r['wall_seconds'] for r in runs])} |")
  return out


def target_table(rows: dict) -> list[str]:
  out = ["| run | seeds | time to target s (from start-up) | updates to it | images to it | K changes (update: K) | wall s |",
         "|---|---|---|---|---|---|---|"]
  for name, runs in rows.items():
    s = [r["summary"] for r in runs]
    changes = ["; ".join(f"{c['step']}: {c['k_to']}{' (try)' if c.get('probe') else ''}"
                         for c in (x.get("batch_policy") or {}).get("changes", [])) or "none" for x in s]
    out.append(f"| {name} | {len(runs)} | {_spread([x.get('time_to_target_seconds') for x in s])} "
               f"| {_spread([x.get('target_step') for x in s], ',.0f')} | {_spread([x.get('images_trained') for x in s], ',.0f')} "
               f"| {' / '.join(changes) if 'batch_policy' in s[0] else '-'} | {_spread([r['wall_seconds'] for r in runs])} |")
  return out


def _flag(run: dict, name: str):
  """The value of --name in the run's command line, or None."""
  return next((f.split("=", 1)[1] for f in run.get("flags", []) if f.startswith(f"--{name}=")), None)


def warmups(budget: dict) -> list[str]:
  """Per S with both arms: the linear rule's warmup in updates against AdaScale's, read off its clock.
  The linear arm's is --warmup_epochs of its updates an epoch (train.py: TRAIN_IMAGES // the global
  batch; optimizers/schedules.py rounds); AdaScale's is --warmup_epochs of the base schedule's epoch,
  S times as many base-batch steps, which it has trained through when tau passes them (tau is logged
  every --log_every updates: the two logged updates around it)."""
  out = []
  for name, linear in budget.items():
    scale = name.split("=")[1] if name.startswith("linear S=") else None
    traced = [r for r in budget.get(f"adascale S={scale}", []) if r.get("tau")]
    if not (scale and linear and traced and _flag(linear[0], "warmup_epochs")):
      continue
    epochs, s = float(_flag(linear[0], "warmup_epochs")), int(scale)
    per_epoch = TRAIN_IMAGES // linear[0]["summary"]["global_batch"]
    base = int(round(epochs * per_epoch * s))
    spans = sorted({(max((u for u, t in r["tau"] if t < base), default=0),
                     next((u for u, t in r["tau"] if t >= base), None)) for r in traced})
    where = " / ".join(f"between updates {a} and {b}" if b else f"after update {a} (not passed in the log)"
                       for a, b in spans) + (" in every seed" if len(spans) == 1 and len(traced) > 1 else "")
    out.append(f"- S = {scale}: the linear rule warms up in {int(round(epochs * per_epoch))} updates ({epochs:g} of its "
               f"{per_epoch} an epoch) to {s}x the base LR; AdaScale's warmup, {base} base-batch steps of tau "
               f"({epochs:g} of {per_epoch} x {s}), ended {where} (tau logged every "
               f"{_flag(traced[0], 'log_every') or '?'} updates).")
  return out


def k_updates(run: dict) -> tuple[int, int, int]:
  """(updates at K > 1 before the target, or the run's end; updates to it; K there), from
  summary.json's batch_policy changes (K 1 from the start without them)."""
  s = run["summary"]
  end = s.get("target_step") or s["steps"]
  changes = sorted((s.get("batch_policy") or {}).get("changes", []), key=lambda c: c["step"])
  k, at, above = (changes[0]["k_from"] if changes else 1), 0, 0
  for c in changes:
    if c["step"] >= end:
      break
    above += c["step"] - at if k > 1 else 0
    k, at = c["k_to"], c["step"]
  return above + (end - at if k > 1 else 0), end, k


def k_note(target: dict) -> str | None:
  """What the adaptive runs' K says about the comparison with the fixed batch: when K was 1 at
  the target in every seed, that the study could not tell the controller from the fixed run."""
  runs, fixed = target.get("adaptive", []), target.get("fixed", [])
  use = [k_updates(r) for r in runs]
  if not use or any(k != 1 for _, _, k in use):
    return None
  probes = all(c.get("probe") for r in runs for c in (r["summary"].get("batch_policy") or {}).get("changes", [])
               if c["k_to"] > c["k_from"])
  # At K = 1 the global batch is the base batch (r = 1: the fixed run's LR) when it starts there.
  at_base = all(c["global_from"] == c["k_from"] * int(_flag(r, "base_batch") or 0) for r in runs
                for c in (r["summary"].get("batch_policy") or {}).get("changes", [])[:1])
  text = (f"K was 1 at the target in every seed: {' and '.join(f'{a:,} of {n:,}' for a, n, _ in use)} updates to it "
          f"ran at a larger K ({'the controller trying twice K, then back' if probes else 'then back to K = 1'})."
          + (" At K = 1 the global batch is the base batch and AdaScale's r is 1, so but for those updates an adaptive "
             "run followed the fixed run's recipe." if at_base else "")
          + " This study could not tell the controller from the fixed run.")
  steps = [[r["summary"].get("target_step") for r in group] for group in (runs, fixed)]
  if all(None not in g for g in steps) and fixed:
    gap, spread = abs(round(_median(steps[0])) - round(_median(steps[1]))), max(steps[1]) - min(steps[1])
    text += (f" Updates to the target, {_median(steps[0]):,.0f} against {_median(steps[1]):,.0f}"
             + (f": not fewer updates won by the controller, and the {gap:,.0f} between the medians is less than the "
                f"{spread:,} between the fixed runs' own seeds ({min(steps[1]):,}-{max(steps[1]):,})." if spread > gap
                else f" (the fixed runs' seeds: {min(steps[1]):,}-{max(steps[1]):,})."))
  return text


def drift(parts):
  """The host's own drift, read from the fixed batch's runs: same recipe, same machine, one session."""
  fixed = [r for r in parts.get("target", {}).get("fixed", []) if r["summary"].get("target_step")]
  if len(fixed) < 2:
    return []
  ms = sorted(r["summary"]["time_to_target_seconds"] / r["summary"]["target_step"] * 1000 for r in fixed)
  return [f"- The host's speed drifts: the fixed batch's runs, one recipe in one session, took {ms[0]:.0f} to "
          f"{ms[-1]:.0f} ms an update to the target (x{ms[-1] / ms[0]:.2f}); a ratio of wall times inside that "
          "spread is not a difference in speed. Updates and images to the target do not drift."]


def _met(ok: bool) -> str:
  return "met" if ok else "not met"


def targets(parts: dict) -> list[str]:
  """The issue's targets against what was measured (only those this study's parts measure)."""
  out = []
  budget = parts.get("budget", {})
  base = _median([r["summary"]["final_top1"] for r in budget.get("base S=1", [])])
  for name, runs in budget.items():
    if name.startswith("adascale") and base is not None:
      got = _median([r["summary"]["final_top1"] for r in runs])
      if got is None:
        out.append(f"- {name}: no final top-1 (every seed diverged or stopped)")
        continue
      linear = _median([r["summary"]["final_top1"] for r in budget.get(name.replace("adascale", "linear"), [])])
      out.append(f"- {name}: final top-1 {got:.4f} against S = 1's {base:.4f} ({(got - base) * 100:+.2f} points; the "
                 f"target: at most 0.5 below, {_met(got >= base - 0.005)}), linear at the same S {linear:.4f} ({(linear - base) * 100:+.2f})"
                 if linear is not None else f"- {name}: {got:.4f} against {base:.4f}")
  for name, runs in parts.get("steps", {}).items():
    scale = name.split(",")[0].split("=")[1]
    got = _median([r["summary"]["final_top1"] for r in runs])
    ada = _median([r["summary"]["final_top1"] for r in budget.get(f"adascale S={scale}", [])])
    if got is not None and ada is not None:
      out.append(f"- {name}: final top-1 {got:.4f} against AdaScale's {ada:.4f} at the same S and updates "
                 f"({(got - ada) * 100:+.2f} points): {'AdaScale gains more than its extra steps' if ada > got else 'the extra steps explain AdaScale'}")
  unchanged = _median([r["summary"]["final_top1"] for r in budget.get("adascale S=8", [])])
  for part in ("change", "elastic"):
    for name, runs in parts.get(part, {}).items():
      got = _median([r["summary"]["final_top1"] for r in runs])
      if got is not None and unchanged is not None:
        out.append(f"- {name}: final top-1 {got:.4f} against the unchanged AdaScale S=8's {unchanged:.4f} "
                   f"({(got - unchanged) * 100:+.2f} points; the target: within 0.5, "
                   f"{_met(abs(got - unchanged) <= 0.005)}), no LR retuned")
  target = parts.get("target", {})
  if target.get("fixed") and target.get("adaptive"):
    fixed = _median([r["summary"].get("time_to_target_seconds") for r in target["fixed"]])
    adaptive = _median([r["summary"].get("time_to_target_seconds") for r in target["adaptive"]])
    if fixed and adaptive:
      spans = [[r["summary"].get("time_to_target_seconds") or float("inf") for r in target[name]]
               for name in ("fixed", "adaptive")]
      overlap = min(spans[1]) <= max(spans[0])
      verdict = "met" if adaptive <= fixed else ("not met by the medians, the seeds' ranges overlapping" if overlap
                                                 else "not met")
      stayed = ("; K stayed 1 but for the controller's trial, so this sets the fixed recipe against itself"
                if k_note(target) else "")
      out.append(f"- adaptive: time to the target {adaptive:.0f} s against batch 64's {fixed:.0f} s at its searched LR "
                 f"(ratio {adaptive / fixed:.2f}; the target: no worse, {verdict}){stayed}")
      per_update = {name: _median([r["summary"]["time_to_target_seconds"] / r["summary"]["target_step"]
                                   for r in target[name] if r["summary"].get("target_step")]) for name in ("fixed", "adaptive")}
      out.append(f"- per update to the target: {per_update['adaptive'] * 1000:.0f} ms adaptive against "
                 f"{per_update['fixed'] * 1000:.0f} ms fixed (x{per_update['adaptive'] / per_update['fixed']:.2f}; "
                 "whole-run times, start-up and evaluations in them, on a host whose speed drifts between runs)")
    policy = [(r["summary"]["batch_policy"], r["wall_seconds"]) for r in target["adaptive"]
              if "own_seconds" in r["summary"].get("batch_policy", {})]
    if policy:
      own = _median([p["own_seconds"] / wall * 100 for p, wall in policy])
      change = _median([p["change_seconds"] / wall * 100 for p, wall in policy])
      out.append(f"- the controller's cost: its own work (hooks, fits, decisions and their broadcast) {own:.2f}% of "
                 f"the run's wall time, rebuilding the input at its changes {change:.2f}% (the target: under 2%; "
                 "measured by the run itself, summary.json's batch_policy; the tried K's updates are training, "
                 "counted in the time to target, not here)")
  return out
