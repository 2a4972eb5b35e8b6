"""results/compression.png from compression.json (report.write draws it): step time against the link
rate, predicted against measured exchange, the compressed rows' link part alone, held-out top-1."""
from bench.compression import variants as V


def plot(result: dict, rows: list[dict], tolerance: float, path: str) -> None:
  """From report.speed_rows' rows: step ms against the link rate per variant (2 hosts solid, 4
  dashed); predicted against measured exchange ms; the compressed rows' link part, predicted against
  measured (exchange less encode); then held-out top-1 against steps per accuracy run. The bands:
  the cost model's tolerance."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ((a, b), (d, c)) = plt.subplots(2, 2, figsize=(13, 10))
  colour = {v: f"C{i}" for i, v in enumerate(V.SPEED_VARIANTS)}
  for (variant, hosts) in sorted({(r["variant"], r["hosts"]) for r in rows}):
    mine = sorted((V.rate_gbps(r["rate"]), r["step_ms"]) for r in rows
                  if (r["variant"], r["hosts"]) == (variant, hosts))
    a.plot(*zip(*mine), "-" if hosts == 2 else "--", marker="o", color=colour.get(variant),
           label=f"{variant}, {hosts} hosts")
  a.set_xscale("log")
  a.set_yscale("log")
  a.set_xlabel("link rate (Gbit/s, tc)")
  a.set_ylabel("ms per step (ResNet-50)")
  if rows:
    a.legend(fontsize=7)
  for r in rows:
    b.plot(r["predicted_ms"], r["exchange_ms"], "o" if r["hosts"] == 2 else "s", color=colour.get(r["variant"]))
  top = max([max(r["predicted_ms"], r["exchange_ms"]) for r in rows], default=1) * 1.2
  b.plot([1, top], [1, top], "k-", lw=0.8)
  b.fill_between([1, top], [1 - tolerance, top * (1 - tolerance)],
                 [1 + tolerance, top * (1 + tolerance)], color="grey", alpha=0.2)
  b.set_xscale("log")
  b.set_yscale("log")
  b.set_xlabel("predicted exchange ms")
  b.set_ylabel("measured exchange ms (band: 25%)")
  parts = [r for r in rows if r["compressed"] and r["predicted_link_ms"] is not None and r["encode_ms"] is not None]
  for r in parts:
    d.plot(r["predicted_link_ms"], r["link_ms"], "o" if r["hosts"] == 2 else "s", color=colour.get(r["variant"]),
           label=f"{r['variant']}, {r['hosts']} hosts")
  top = max([max(r["predicted_link_ms"], r["link_ms"]) for r in parts], default=1) * 1.2
  d.plot([0, top], [0, top], "k-", lw=0.8)
  d.fill_between([0, top], [0, top * (1 - tolerance)], [0, top * (1 + tolerance)], color="grey", alpha=0.2)
  d.axhline(0, color="grey", lw=0.8)
  d.set_xlabel("predicted link part ms (the prediction less its encode)")
  d.set_ylabel("measured exchange less encode ms (band: 25%)")
  d.set_title("compressed rows: the link part alone", fontsize=9)
  handles = dict(zip(*reversed(d.get_legend_handles_labels())))
  if handles:
    d.legend(handles.values(), handles.keys(), fontsize=7)
  keys = list(V.ACCURACY_CONFIGS)
  for r in result.get("accuracy", {}).get("runs", []):
    points = [(p["step"], p["top1"] * 100) for p in r["curve"]]
    if points:
      c.plot(*zip(*points), ("-", "--")[r["seed"] % 2], marker=".", color=f"C{keys.index(r['config'])}",
             label=r["name"] if r["seed"] == 0 else None)
  c.axhline(result.get("accuracy", {}).get("setup", {}).get("target", 0) * 100, color="grey", lw=0.8, ls="--")
  c.set_xlabel("step")
  c.set_ylabel("held-out top-1 (%)")
  if c.get_legend_handles_labels()[0]:
    c.legend(fontsize=7, loc="lower right")
  for ax in (a, b, c, d):
    ax.grid(alpha=0.3)
  fig.suptitle("bench-compression: ResNet-50 on emulated hosts; ResNet-8 on Fashion-MNIST, 2 ranks", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
