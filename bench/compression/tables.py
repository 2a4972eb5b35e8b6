"""The accuracy and trust sections of results/compression.md (report.py's other half): pure
functions of compression.json's `accuracy` and `trust` parts (tests/bench/test_compression.py)."""
import statistics

from bench.compression import variants as V


def fmt(x, spec: str, none: str = "-") -> str:
  return none if x is None else format(x, spec)


def accuracy_text(setting: dict, acc_setup: dict, stats: list[dict]) -> str:
  """The accuracy section's setting and table, or one line when that part was not run."""
  if not stats:
    return "Not measured (`--only=accuracy`)."
  target = acc_setup.get("target", 0)
  return (f"{setting.get('name', '-')} of `make time-to-accuracy` (ResNet-8, 2 ranks on this host), every run\n"
          f"{acc_setup.get('steps', '-')} steps (no stop at the target: equal steps), PowerSGD from step\n"
          f"{acc_setup.get('compression_start', '-')} (the end of the warmup). Final held-out top-1 on the 10,000 test\n"
          f"images; time to {target} read off the held-out curve (evaluations every ~1/4 epoch), in\n"
          f"wall seconds since the launch.\n\n{accuracy_table(stats, target)}")


def accuracy_stats(runs: list[dict]) -> list[dict]:
  """Per configuration (variants.ACCURACY_CONFIGS order): seeds, final held-out top-1 (mean, min,
  max), runs that reached the target and their mean seconds to it."""
  out = []
  for key, config in V.ACCURACY_CONFIGS.items():
    mine = [r for r in runs if r["config"] == key]
    if not mine:
      continue
    finals = [r["final_top1"] for r in mine if r["final_top1"] is not None]
    reached = [r["reached"]["seconds"] for r in mine if r["reached"]]
    out.append({"config": key, "name": config.name, "seeds": [r["seed"] for r in mine],
                "final_mean": statistics.mean(finals) if finals else None,
                "final_min": min(finals, default=None), "final_max": max(finals, default=None),
                "reached": len(reached), "runs": len(mine),
                "seconds_mean": statistics.mean(reached) if reached else None,
                "images_per_sec": statistics.mean(r["images_per_sec"] for r in mine),
                "compression": mine[0].get("compression") or {}})
  return out


def sent(entry: dict) -> str:
  """'9 | 35' from summary.json's compression entry: layers compressed, KB one rank hands the
  allreduces per compressed step ('- | -' for an uncompressed run or a summary without it)."""
  per_step = entry.get("bytes_per_step") or {}
  nbytes = per_step.get("compressed") if entry.get("layers_compressed") else per_step.get("uncompressed")
  return f"{entry.get('layers_compressed', '-')} | {fmt(nbytes and nbytes / 1024, '.0f')}"


def accuracy_table(stats: list[dict], target: float) -> str:
  lines = [f"| configuration | seeds | final top-1 (mean, min-max) | reached {target:g} | mean s to {target:g} | "
           "images/s | layers compressed | KB/step sent per rank |", "|---|---|---|---|---|---|---|---|"]
  for s in stats:
    final = (f"{s['final_mean'] * 100:.2f}% ({s['final_min'] * 100:.2f}-{s['final_max'] * 100:.2f})"
             if s["final_mean"] is not None else "-")
    lines.append(f"| {s['name']} | {','.join(map(str, s['seeds']))} | {final} | {s['reached']} of {s['runs']} | "
                 f"{fmt(s['seconds_mean'], '.0f')} | {s['images_per_sec']:.0f} | {sent(s['compression'])} |")
  return "\n".join(lines)


QUANTITIES = ("trust", "norm", "cos", "step")  # bench/compression/trust.py's KEYS, in the table's order


def trust_text(trust: dict) -> str:
  """The trust section: per compressed layer and configuration, the medians (min-max) of
  bench/compression/trust.py's ratios, or one line when that part was not run."""
  configs = trust.get("configs", {})
  if not configs:
    return "Not measured (`--only=trust`, after the accuracy part)."
  lines = [f"At the checkpoints the accuracy part's PowerSGD runs kept, {trust['batches']} batches of 1,024 each, split as\n"
           f"the {trust['halves']} ranks split them (`bench/compression/trust.py`). Per compressed layer: **t(U)/t(G)**, LARS's\n"
           "trust ratio on the update PowerSGD hands it over the one the uncompressed mean gradient would have had at\n"
           "the same weights; **\\|U\\|/\\|G\\|**; **cos(U, G)**; **step**: the length of the layer's move against\n"
           "the uncompressed one's. Medians over seeds, checkpoints and batches (min-max).", ""]

  def cell(x: dict) -> str:
    return f"{x['median']:.2f} ({x['min']:.2f}-{x['max']:.2f})"
  for key, entry in configs.items():
    lines += [f"{V.ACCURACY_CONFIGS[key].name} (seeds {', '.join(map(str, entry['seeds']))}; steps "
              f"{', '.join(map(str, entry['steps']))}):", "",
              "| layer | view | t(U)/t(G) | \\|U\\|/\\|G\\| | cos(U, G) | step |", "|---|---|---|---|---|---|"]
    lines += [f"| {l['layer']} | {l['view'][0]}x{l['view'][1]} | " + " | ".join(cell(l[q]) for q in QUANTITIES) + " |"
              for l in entry["layers"]]
    med = {q: statistics.median(l[q]["median"] for l in entry["layers"]) for q in QUANTITIES}
    lines += ["", f"The layers' medians: t(U)/t(G) {med['trust']:.2f}, \\|U\\|/\\|G\\| {med['norm']:.2f}, "
              f"cos {med['cos']:.2f}, step {med['step']:.2f}.", ""]
  if trust.get("missing"):
    lines.append(f"Runs not found (not measured): {', '.join(trust['missing'])}.")
  return "\n".join(lines).rstrip()
