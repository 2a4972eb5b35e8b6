"""results/slow_links.png: time to target per arm, a panel per (link rate, hosts)."""
import math

from bench.slow_links import summary


def rows(runs: list[dict], rate: str, hosts: int) -> list[tuple[str, list[dict]]]:
  """(label, runs) per arm of a configuration, in the report's order (pure)."""
  out = []
  for b in sorted({r["per_rank"] for r in summary.select(runs, rate, hosts, "stock")}):
    out.append((f"stock {b}/rank", summary.select(runs, rate, hosts, "stock", b)))
  for arm, label in (("auto", "ours + auto"), ("adaptive", "adaptive K"), ("joint", "joint K + auto"),
                     ("lost", "joint, host lost")):
    rs = summary.select(runs, rate, hosts, arm)
    if rs:
      out.append((label + (f" {rs[0].get('per_rank')}/rank" if arm == "auto" else ""), rs))
  return out


def plot(result: dict, path: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  entries = result["summary"]
  if not entries:
    return
  fig, axes = plt.subplots(1, len(entries), figsize=(max(7.0, 4.2 * len(entries)), 4.6), squeeze=False)
  for ax, e in zip(axes[0], entries):
    labelled = rows(result["runs"], e["rate"], e["hosts"])
    for y, (label, rs) in enumerate(labelled):
      times = [summary.seconds(r) for r in rs]
      med = summary.median(times)
      if med is not None and math.isfinite(med):
        ax.barh(y, med, color="C0" if "stock" in label else "C1", alpha=0.5)
      for r, t in zip(rs, times):
        if math.isfinite(t):
          ax.plot(t, y, "ko", ms=3)
        else:  # not reached: where it ended
          ax.plot(r.get("wall_seconds") or 0, y, "rx", ms=5)
    ax.set_yticks(range(len(labelled)), [label for label, _ in labelled], fontsize=7)
    ax.invert_yaxis()
    link = "unshaped links" if e["link_mbit"] is None else f"{e['link_mbit']:g} Mbit/s"
    ratio = e.get("ratio_to_stock")
    ax.set_title(f"{link}, {e['hosts']} hosts: joint / stock's best "
                 + ("-" if ratio is None else f"{ratio:.2f}x"), fontsize=8)
    ax.set_xlabel("s to target (bar: median, dot: a seed, x: missed, at its end)", fontsize=7)
    ax.grid(axis="x", alpha=0.3)
  fig.suptitle(f"ResNet-8 on Fashion-MNIST to held-out top-1 {result['setup']['target']:g}\nstock Horovod against "
               "ours on emulated hosts" + (" (smoke run: numbers meaningless)" if result["setup"].get("quick") else ""),
               fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
