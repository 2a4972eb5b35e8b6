"""The report's two figures: measured vs modelled exchange times per topology, and training efficiency."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the file backend)

from bench.scaling.report import COMM_TOPOLOGIES, comm_rows, training_table  # noqa: E402
from bench.scaling.settings import ALGORITHMS, MB  # noqa: E402


def comm(report, out_dir: str) -> None:
  """scaling_comm.png: seconds against MB exchanged, measured and modelled, one panel per topology."""
  topologies = [t for t in COMM_TOPOLOGIES if report["launches"].get(t)]
  if not topologies:
    return
  fig, axes = plt.subplots(1, len(topologies), figsize=(5 * len(topologies), 4), squeeze=False)
  for ax, topo in zip(axes[0], topologies):
    rows = [r for t, r in comm_rows(report) if t == topo]
    for i, algorithm in enumerate(ALGORITHMS):
      pts = sorted((r["bytes"] / MB, r["measured_s"], r["predicted_s"])
                   for r in rows if r["algorithm"] == algorithm)
      mb = [p[0] for p in pts]
      ax.plot(mb, [p[1] for p in pts], "o-", color=f"C{i}", label=f"{algorithm} measured")
      ax.plot(mb, [p[2] for p in pts], "--", color=f"C{i}", alpha=0.7, label=f"{algorithm} model")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("MB exchanged (single buffers, then a gradient set)")
    ax.set_ylabel("seconds")
    ax.set_title(f"{topo} (hosts x ranks), {report['setup']['rate']} links")
    ax.grid(True, which="both", alpha=0.3)
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(out_dir, "scaling_comm.png"), dpi=100)
  plt.close(fig)


def training(report, out_dir: str) -> None:
  """scaling_training.png: e = S_N / S_1 against N per model and algorithm."""
  rows = training_table(report)
  if not rows:
    return
  fig, ax = plt.subplots(figsize=(6, 4))
  for model in sorted({r[0] for r in rows}):
    for variant in ALGORITHMS:
      pts = [(r[1], r[5]) for r in rows if r[0] == model and (r[2] == variant or r[1] == 1)]
      if len(pts) >= 2:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{model} {variant}")
  ax.set_xlabel("ranks N")
  ax.set_ylabel("scaling efficiency e = S_N / S_1")
  ax.set_xticks([1, 2, 4])
  ax.set_ylim(0, 1.1)
  ax.grid(True, alpha=0.3)
  if ax.lines:  # a run without N = 1 has no efficiency to draw
    ax.legend(fontsize=7)
  ax.set_title("training efficiency (all ranks share 2 cores)")
  fig.tight_layout()
  fig.savefig(os.path.join(out_dir, "scaling_training.png"), dpi=100)
  plt.close(fig)


def write(report, out_dir: str) -> None:
  """Both PNGs (scaling_comm.png, scaling_training.png) in out_dir."""
  comm(report, out_dir)
  training(report, out_dir)
