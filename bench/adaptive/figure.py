"""results/adaptive.png: the runs' held-out top-1 and AdaScale's gain, and seed 0's traces of the global
batch against B_simple and of AdaScale's clock."""


def _batches(run: dict, setup_change, ranks: int, micro: int, last: int) -> list[tuple[int, int]]:
  """(update, global batch) steps of one run: the adaptive runs' from their changes, the change
  run's from its --max_steps segments (exact: it resumed at each), the rest fixed."""
  changes = (run["summary"].get("batch_policy") or {}).get("changes")
  if changes:
    points = [(0, changes[0]["global_from"])] + [(c["step"], c["global_to"]) for c in changes]
  elif run["name"].startswith("change-"):
    points, at = [], 0
    for k, updates in setup_change:
      points.append((at, k * micro * ranks))
      at += updates or 0
  else:
    points = [(0, run["summary"]["global_batch"])]
  return points + [(last, points[-1][1])]


def _traces(parts: dict, setup: dict, axes) -> None:
  """The issue's traces over a run, seed 0: global batch B (so K) with B_simple, and tau."""
  picks = [("target", "adaptive"), ("change", None), ("elastic", None), ("budget", "adascale S=8")]
  for part, name in picks:
    for row, runs in parts.get(part, {}).items():
      if (name and row != name) or (not name and part == "target"):
        continue
      run = next((r for r in runs if r["name"].endswith("-s0")), None)
      if run is None or not run.get("tau"):
        continue
      label = f"{row} (s0)"
      last = run["tau"][-1][0]
      if part != "elastic":  # its world's times are the discovery's, not known to the update
        b = _batches(run, setup.get("change", ()), setup.get("ranks", 2), setup.get("micro_batch", 32), last)
        line, = axes[0].step([p[0] for p in b], [p[1] for p in b], where="post", label=f"B, {label}")
        axes[0].plot([p[0] for p in run["b_simple"]], [p[1] for p in run["b_simple"]], ":",
                     color=line.get_color(), label=f"B_simple, {label}")
      axes[1].plot([p[0] for p in run["tau"]], [p[1] for p in run["tau"]], label=f"tau, {label}")
  axes[0].set_yscale("log")
  axes[0].set_xlabel("update")
  axes[0].set_ylabel("images")
  axes[0].set_title("global batch B (solid; K = B / 64) and B_simple (dotted), seed 0", fontsize=9)
  axes[1].set_xlabel("update")
  axes[1].set_ylabel("tau (base-batch steps)")
  axes[1].set_title("AdaScale's clock tau (S=1 would be the diagonal); elastic: worlds 2 -> 1 -> 2", fontsize=9)


def plot(parts: dict, setup: dict, path: str) -> None:
  """results/adaptive.png: held-out top-1 and AdaScale's gain of the runs, the global batch, B_simple and tau."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, grid = plt.subplots(2, 2, figsize=(11, 8))
  axes = grid[0]
  target = parts.get("target", {})
  for name, runs in target.items():
    for r in runs:
      axes[0].plot([p[0] for p in r["eval"]], [p[1] * 100 for p in r["eval"]], marker=".",
                   label=f"{name} ({r['name'][-2:]})")
  axes[0].set_xlabel("update")
  axes[0].set_ylabel("held-out top-1 (%)")
  axes[0].set_title("time-to-target runs: held-out top-1 by update", fontsize=9)
  for name, runs in list(target.items()) + list(parts.get("budget", {}).items()):
    for r in runs:
      if r.get("gain"):
        axes[1].plot([p[0] for p in r["gain"]], [p[1] for p in r["gain"]], label=f"r, {name} ({r['name'][-2:]})")
      for c in (r["summary"].get("batch_policy") or {}).get("changes", []):
        axes[1].axvline(c["step"], color="grey", alpha=0.3)
  axes[1].set_xlabel("update")
  axes[1].set_ylabel("AdaScale's gain r")
  axes[1].set_title("r over updates (grey lines: K changes)", fontsize=9)
  _traces(parts, setup, grid[1])
  for ax in grid.flat:
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
