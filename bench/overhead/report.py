"""results/overhead.md and overhead.png from the program's record (bench/overhead/__main__.py)."""

SHOWN = ("startup", "steps", "epoch_input", "evaluation", "statistics", "checkpoint", "export", "finish", "unaccounted")


def _range(m: list, fmt: str) -> str:
  """'median (min-max)' of [median, min, max]."""
  return f"{m[0]:{fmt}} ({m[1]:{fmt}}-{m[2]:{fmt}})" if m[1] != m[2] else f"{m[0]:{fmt}}"


def markdown(record: dict, every: tuple = ()) -> str:
  """The report; `every`: all the program's configurations, those not in the record named as not run."""
  s = record["setup"]
  launches = s["launches"]
  if isinstance(launches, dict):  # configurations run at different counts
    launches = ", ".join(f"{name} {n}" for name, n in launches.items())
  lines = ["# Where the wall time goes outside the steps (`make bench-overhead`)", "",
           f"Commit {s['commit']}, {s['date']}, {s['cores']} cores ({s['cpu']}), launches of each configuration: "
           f"{launches}{', --quick (shorter runs)' if s['quick'] else ''}; 2 ranks under horovodrun on this host "
           "unless the configuration names emulated hosts (one rank each, horovodrun over Gloo on a head host of "
           "their own). Each figure is the median of the launches, with their range; the parts are "
           "training/ledger.py's (docs/time.md). The epoch ends' share is their seconds (epoch input, evaluation, "
           "BatchNorm statistics, checkpoint, commit) over the steps' seconds: per epoch, the same ratio. The "
           "evaluations' gap: the largest time between two consecutive evaluations (here one at each epoch's end) "
           "over the run's median gap; a stall at an epoch's end shows there.", "",
           "| configuration | wall s | steps s | start-up s | productive share | after start-up | epoch ends / steps "
           "| largest gap / median |",
           "|---|---|---|---|---|---|---|---|"]
  for name, c in record["configs"].items():
    m = c["median"]
    gap = _range(m["eval_gap_ratio"], ".2f") if "eval_gap_ratio" in m else "-"
    lines.append(f"| {name}: {c['what']} | {_range(m['wall_seconds'], '.1f')} | {_range(m['step_seconds'], '.1f')} | "
                 f"{_range(m['startup_seconds'], '.1f')} | {_range(m['productive_share'], '.2f')} | "
                 f"{_range(m['productive_share_after_startup'], '.2f')} | "
                 f"{_range(m['epoch_end_share_of_steps'], '.1%')} | {gap} |")
  lines += ["", "## Targets", ""]
  for name, c in record["configs"].items():
    for target, (met, value) in c["verdicts"].items():
      lines.append(f"- {name}: {target}: {'met' if met else 'not met'} ({value:.3g})")
    if not c["verdicts"]:
      lines.append(f"- {name}: reported, no target")
  lines += ["", "## Parts, median seconds", "",
            "| configuration | " + " | ".join(SHOWN) + " |", "|---|" + "---|" * len(SHOWN)]
  for name, c in record["configs"].items():
    parts = [sorted(launch["groups"].get(g, 0.0) for launch in c["launches"]) for g in SHOWN]
    lines.append(f"| {name} | " + " | ".join(f"{p[len(p) // 2]:.2f}" for p in parts) + " |")
  missing = [n for n in every if n not in record["configs"]]
  if missing:
    lines += ["", f"Not in it: {', '.join(missing)} (not run at this commit).", ""]
  else:
    lines.append("")
  return "\n".join(lines)


def figure(record: dict, path: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  names = list(record["configs"])
  fig, ax = plt.subplots(figsize=(9, 1.6 + 0.7 * len(names)))
  for row, name in enumerate(names):
    launches = record["configs"][name]["launches"]
    left = 0.0
    for g in SHOWN:
      values = sorted(launch["groups"].get(g, 0.0) for launch in launches)
      width = values[len(values) // 2]
      ax.barh(row, width, left=left, color=f"C{SHOWN.index(g)}", label=g if row == 0 else None)
      left += width
  ax.set_yticks(range(len(names)), names)
  ax.set_xlabel("seconds (median of the launches, part by part)")
  ax.set_title(f"train.py's wall time by part, commit {record['setup']['commit']}", fontsize=10)
  ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)

