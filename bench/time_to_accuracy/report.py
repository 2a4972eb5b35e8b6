"""results/time_to_accuracy.{md,json,png} from the runs so far: the table and findings (stats.py), the
exchange at the papers' scale (scale.py), the figure of held-out top-1 against wall time, and the
commands."""
import dataclasses
import json
import os

from bench.harness.train_runs import save_top1_figure
from bench.time_to_accuracy.recipe import (EVAL_BATCH, EVALS_PER_EPOCH, LARS_ETA, MODEL, RANKS, SETTINGS,
                                           WARMUP_START_LR, Budget)
from bench.time_to_accuracy.scale import at_scale, section as scale_section
from bench.time_to_accuracy.stats import aggregate, findings, table


def plot(runs: list[dict], budget: Budget, path: str) -> None:
  """Held-out top-1 against wall seconds since the launch, a line per run, a colour per configuration."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(9, 5.5))
  colours = {key: f"C{i}" for i, key in enumerate(SETTINGS)}
  labelled = set()
  for r in runs:
    xs, ys = [p["seconds"] for p in r["curve"]], [p["top1"] * 100 for p in r["curve"]]
    style = ("-", "--", ":", "-.")[r["seed"] % 4]
    ax.plot(xs, ys, style, marker=".", color=colours[r["config"]], lw=1.2,
            label=None if r["config"] in labelled else r["name"])
    labelled.add(r["config"])
    if r["reached"] and xs:
      ax.plot(xs[-1], ys[-1], "o", color=colours[r["config"]], ms=5)
  ax.axhline(budget.target * 100, color="grey", lw=0.8, ls="--")
  lows = [p["top1"] * 100 for r in runs for p in r["curve"]]
  ax.set_ylim(max(0, min(lows, default=0) - 5), 100)
  ax.set_xlim(left=0)
  save_top1_figure(fig, ax, path, "wall seconds since the launch (evaluations included)",
                   f"{MODEL} on Fashion-MNIST, 2 ranks: to {budget.target * 100:g}% held-out top-1 (dashed); "
                   "dot: target reached; line style: seed", title_size=9)


def report(runs: list[dict], stats: list[dict], budget: Budget, scale: dict, wall: float,
           fewer: dict | None = None) -> str:
  """results/time_to_accuracy.md; fewer: {config: why it ran fewer seeds than the others}."""
  commands = "\n".join(f"# {s['name']}\n{next(r['command'] for r in runs if r['config'] == s['config'])}"
                       for s in stats)
  quick = ("**A smoke run (`--quick`): a few steps per run (`--max_steps`), two evaluations, a low target; "
           "the numbers say nothing.**\n\n"
           if budget.quick else "")
  seeds = sorted({r["seed"] for r in runs})
  by = {s["config"]: s for s in stats}
  fewer_seeds = "".join(f" {by[k]['name']} ran seed {', '.join(map(str, by[k]['seeds']))} only: {why}."
                        for k, why in (fewer or {}).items() if k in by and len(by[k]["seeds"]) < len(seeds))
  return f"""# Time to accuracy on Fashion-MNIST (`make time-to-accuracy`)

{quick}{MODEL} on Fashion-MNIST (60,000 training images; the 10,000 test images held out), 2 ranks on
this host (horovodrun -np 2, MPI), seeds {', '.join(map(str, seeds))}. Every run stops at the first held-out
evaluation with top-1 >= {budget.target:g} (`--target_top1`; evaluations every ~1/{EVALS_PER_EPOCH} epoch and at
epoch ends, {EVAL_BATCH} images per rank per batch), or ends after {budget.max_epochs:g} epochs (not reached; its
best top-1 is in the table); the LR schedule spans those {budget.max_epochs:g} epochs. Time to target is
train.py's MLPerf clock: from start-up, before the model is built, to the end of the evaluation
that reached it, evaluations included (the figure's clock starts at the launch, horovodrun's few
seconds of start-up earlier). Images/s counts the training steps only. Warmup rises linearly from
(a)'s LR ({WARMUP_START_LR:g}); momentum 0.9, weight decay 5e-4 (none on bias/BN), zero-init residual
gammas, BatchNorm per rank and micro-batch; LARS eta {LARS_ETA:g}. Sum of the runs' wall times:
{wall / 60:.1f} min (the machine's 2 cores are shared with other jobs: times are noisy).{fewer_seeds}

{table(stats)}

![held-out top-1 against wall time](time_to_accuracy.png)

## Findings

{findings(stats, budget)}

{scale_section(scale)}
## Commands

Each configuration's seed {seeds[0]}; the other seeds differ in `--seed` and `--model_dir` only.

```bash
{commands}
```

Reproduce: `make time-to-accuracy` (`python -m bench.time_to_accuracy --help`: `--only`, `--seeds`,
`--target`, `--max_epochs`, `--reuse`, `--out_dir`, `--quick`).
"""


def write(runs: list[dict], budget: Budget, scale: dict, out_dir: str, fewer: dict | None = None) -> str:
  """OUT_DIR/time_to_accuracy.{json,md,png} from the runs so far; the markdown returned. fewer: as
  report()'s."""
  stats = aggregate(runs)
  scale = dict(scale, rows=at_scale(stats, scale["exchange"]))
  wall = sum(r["wall_seconds"] for r in runs)  # of the runs themselves, also when --reuse read them back
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "time_to_accuracy.json"), "w") as fh:
    json.dump({"budget": dataclasses.asdict(budget), "ranks": RANKS, "wall_seconds": round(wall),
               "stats": stats, "fewer_seeds": fewer or {}, "scale": scale, "runs": runs}, fh, indent=1)
  plot(runs, budget, os.path.join(out_dir, "time_to_accuracy.png"))
  text = report(runs, stats, budget, scale, wall, fewer)
  with open(os.path.join(out_dir, "time_to_accuracy.md"), "w") as fh:
    fh.write(text)
  return text
