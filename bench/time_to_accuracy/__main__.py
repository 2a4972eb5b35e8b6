"""Time to a held-out accuracy on Fashion-MNIST, small batch against large (`make time-to-accuracy`).

The papers' headline is a time to accuracy ("ImageNet in 4 minutes": 75.8% top-1 in 6.6
minutes), as MLPerf's: train until the held-out metric reaches a target, then stop. This
measures it at this machine's size: ResNet-8 on Fashion-MNIST (60,000 training images, its
10,000 test images held out), 2 ranks on this host (horovodrun -np 2), every configuration
with each of SEEDS:

  (a) small-batch baseline: SGD, global batch 64 (32 per rank), no warmup
  (b) 16x the batch (1,024): the linear scaling rule + gradual warmup from (a)'s LR (Goyal et al.)
  (c) (b) with LARS, warmup and poly decay (You et al.; Jia et al.; MLPerf)
  (d) (c) in bf16 (Jia et al.'s mixed precision, in the CPU's bfloat16)
  (e) 64x the batch (4,096) through 8 accumulation steps of 256 per rank, (c)'s recipe

Each run stops at the first held-out evaluation (every ~1/4 epoch, and at epoch ends) with top-1
at or above --target; a run that has not reached it by --max_epochs ends there and is reported as
not reached, with its best top-1. The LR schedule spans --max_epochs (as MLPerf's runs lay out
their schedule and stop at the target).

  python -m bench.time_to_accuracy                          # all 10 runs: ~1.5 hours of both cores
  python -m bench.time_to_accuracy --only=a --target=0.9    # calibrate the target on the baseline
  python -m bench.time_to_accuracy --reuse                  # finished runs of the same flags read back
  python -m bench.time_to_accuracy --quick --only=a --seeds=0 --out_dir=/tmp/tta   # smoke run

Writes OUT_DIR/time_to_accuracy.json (every run), .md (the tables, the commands, the findings
(stats.py) and the exchange at the papers' scale, priced by the planner's model
(scale.py)) and .png (held-out top-1 against wall time) after every run. A report covers the runs of its invocation: --only=a now and
the full set with --reuse later (the runs of a read back) writes the full report.
"""
import argparse
import dataclasses
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # this program reads the events and builds ResNet-50

from bench.time_to_accuracy.scale import at_scale, exchange_per_update, section as scale_section  # noqa: E402
from bench.time_to_accuracy.stats import aggregate, findings, table  # noqa: E402
from bench.harness.train_runs import (Setting, command, eval_curve, launch, read_events, record, reused,  # noqa: E402
                              save_top1_figure)

RESULTS = os.path.join(REPO, "results")
RANKS = 2
TRAIN_IMAGES = 60_000  # Fashion-MNIST's training split; train.py's steps per epoch: this // global batch
SEEDS = (0, 1)
# ResNet-8, the smallest CIFAR ResNet: 2.8x ResNet-20's images/s here (410 against 145 at global
# batch 64 or 1,024, 2 ranks, measured back to back), so ten runs fit in under two hours of both
# cores. ResNet-20 was calibrated first (2026-12-01, (a) seed 0): held-out top-1 0.700 / 0.793 /
# 0.831 / 0.842 / 0.861 / 0.865 / 0.880 / 0.886 every quarter epoch, 0.86 after ~12 minutes; a
# large batch needs several times the baseline's epochs, and 6 epochs of it are 50 minutes a run.
MODEL = "resnet8"
# The held-out top-1 that ends a run: what the baseline reaches in about 1.5-2 epochs (ResNet-20
# passed it at 1.25), so the large batches, which need more epochs, can reach it within MAX_EPOCHS.
TARGET_TOP1 = 0.85
# The cap of a run that does not reach the target, and the span of its LR schedule: 232 updates at
# 1,024 and 56 at 4,096, and a run that misses ends in ~12 minutes here.
MAX_EPOCHS = 4.0
EVALS_PER_EPOCH = 4  # the stop is found within ~1/4 epoch of the target
# Every configuration evaluates in batches of this many per rank (10,000 / 2 ranks = 20 of them),
# so the evaluations in the clock cost the same whatever the training batch.
EVAL_BATCH = 250
# Base LRs per 256 images (train.py: peak = base * global batch / 256).
BASELINE_LR = 0.2     # He et al.'s CIFAR ResNet: 0.1 at batch 128; peak 0.05 at 64
LARGE_SGD_LR = 0.2    # the linear scaling rule: (a)'s base, peak 0.8 at 1,024 (the retired make reproduce's search: 0.2)
LARS_LR = 4.0         # the retired make reproduce's search on digits at 256: 4-16 within a point of the best
# (e) by the rule from (c) would peak at 64, the LR that lost 9 points in that search (LARS leaves
# biases and BatchNorm at the global LR): half of it.
ACCUM_LARS_LR = 2.0
LARS_ETA = 0.001      # MLPerf
WARMUP_EPOCHS = 1.0   # 58 updates at 1,024 (Goyal et al.: 5 of 90 epochs)
ACCUM_WARMUP_EPOCHS = 2.0  # 28 updates at 4,096: one epoch is only 14
WARMUP_START_LR = BASELINE_LR * 64 / 256  # Goyal et al.: warmup starts from the small-batch LR

SETTINGS = {
    "a": Setting("(a) batch 64, SGD", 64, RANKS, BASELINE_LR, 0),
    "b": Setting("(b) batch 1,024, SGD + warmup", 1024, RANKS, LARGE_SGD_LR, WARMUP_EPOCHS),
    "c": Setting("(c) batch 1,024, LARS + warmup", 1024, RANKS, LARS_LR, WARMUP_EPOCHS, "lars",
                 schedule="poly"),
    "d": Setting("(d) batch 1,024, LARS + warmup, bf16", 1024, RANKS, LARS_LR, WARMUP_EPOCHS, "lars", "bf16",
                 "poly"),
    "e": Setting("(e) batch 4,096 by accumulation, LARS + warmup", 4096, RANKS, ACCUM_LARS_LR,
                 ACCUM_WARMUP_EPOCHS, "lars", schedule="poly", accumulation_steps=8),
}
# --quick: a smoke run of the program, numbers meaningless: about QUICK_IMAGES images a run, and a
# target (a) reaches at its first evaluation (24% held-out top-1 after 20 steps, 30% after 40 in
# the smoke run), so the stop is taken too.
QUICK_TARGET = 0.2
QUICK_IMAGES = 64 * 40


@dataclasses.dataclass(frozen=True)
class Budget:
  """How every run ends: at the target top-1, or after max_epochs (quick: a few steps)."""
  target: float
  max_epochs: float
  quick: bool = False


# ------------------------------------------------------------------------ runs --
def steps_per_epoch(s: Setting) -> int:
  return TRAIN_IMAGES // s.global_batch


def quick_steps(s: Setting) -> int:
  return max(2, QUICK_IMAGES // s.global_batch)


def eval_every(s: Setting, budget: Budget) -> int:
  """Steps between held-out evaluations, counted into each epoch (train.py's --eval_every):
  EVALS_PER_EPOCH of them an epoch, its end the last (937 steps: 235, 470, 705 and 937); quick:
  twice a run."""
  if budget.quick:
    return max(1, quick_steps(s) // 2)
  return max(1, -(-steps_per_epoch(s) // EVALS_PER_EPOCH))


def train_args(s: Setting, seed: int, budget: Budget, model_dir: str) -> list[str]:
  """train.py's flags for one run of setting s."""
  every = eval_every(s, budget)
  flags = [f"--model_dir={model_dir}", "--dataset=fashion_mnist", f"--model={MODEL}", *s.flags(),
           f"--epochs={budget.max_epochs:g}", f"--seed={seed}", f"--target_top1={budget.target:g}",
           f"--eval_every={every}", f"--eval_batch_size={EVAL_BATCH}", f"--log_every={every}",
           "--export=false"]  # a SavedModel per run is not what is timed
  if s.warmup_epochs:
    flags.append(f"--warmup_start_lr={WARMUP_START_LR:g}")
  if s.optimizer == "lars":
    flags.append(f"--lars_eta={LARS_ETA:g}")
  if budget.quick:
    flags.append(f"--max_steps={quick_steps(s)}")
  return flags


def shown(flags: list[str]) -> str:
  """The command a user would type for these flags."""
  return " ".join("python" if a == sys.executable else a for a in command(RANKS, flags))


def run_record(key: str, seed: int, flags: list[str], summary: dict, curve: list[dict], wall: float) -> dict:
  """One run as the report keeps it: its configuration, train.py's summary and its curve."""
  return {"config": key, "name": SETTINGS[key].name, "setting": dataclasses.asdict(SETTINGS[key]), "seed": seed,
          "flags": flags, "command": shown(flags), "status": summary["status"],
          "reached": bool(summary.get("target_reached")),
          "time_to_target_seconds": summary.get("time_to_target_seconds"),
          "target_epoch": summary.get("target_epoch"), "target_step": summary.get("target_step"),
          "images_per_sec": summary["images_per_sec"], "final_top1": summary["final_top1"],
          "final_top5": summary["final_top5"],
          "best_top1": max([p["top1"] for p in curve] + [summary["final_top1"] or 0]),
          "epochs": summary["epochs"], "steps": summary["steps"], "wall_seconds": wall, "curve": curve}


def run(key: str, seed: int, budget: Budget, runs_dir: str, reuse: bool) -> dict:
  """One run of configuration key from scratch (or, with reuse, read back if its flags match)."""
  s = SETTINGS[key]
  model_dir = os.path.join(runs_dir, f"{key}-seed{seed}")
  flags = train_args(s, seed, budget, os.path.relpath(model_dir, REPO))  # train.py runs in REPO
  done = reuse and reused(model_dir, {"flags": flags})
  note = " (reused)" if done else ""
  if not done:
    start = time.time()
    # A LARS run can diverge at these LRs (exit 3): a result, not reached, not the benchmark's end.
    summary, _, wall = launch(RANKS, flags, model_dir, accept=(0, 3),
                              timeout=max(900.0, budget.max_epochs * TRAIN_IMAGES / 20))  # >= 20 images/s
    curve = eval_curve(read_events(model_dir), start, steps_per_epoch(s))
    done = run_record(key, seed, flags, summary, curve, wall)
    record(model_dir, done)
  verdict = (f"reached in {done['time_to_target_seconds']:.0f} s (epoch {done['target_epoch']:.2f})"
             if done["reached"] else f"{done['status']}, not reached (best top-1 {done['best_top1']:.4f})")
  print(f"  {s.name:48s} seed {seed}: {verdict}, {done['images_per_sec']} images/s, "
        f"{done['wall_seconds']:.0f} s{note}", flush=True)
  return done


# --------------------------------------------------------------------- report --
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


def prepare_data() -> None:
  """Fashion-MNIST's records written before the first run, so no run's clock pays for it."""
  from flags.config import ConfigError
  from input import fashion_mnist
  try:
    fashion_mnist.write(os.path.join(REPO, "data", "fashion_mnist"))  # train.py's default --data_dir
  except ConfigError as e:
    sys.exit(f"time-to-accuracy: {e}")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python -m bench.time_to_accuracy", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--only", default=",".join(SETTINGS),
                      help=f"configurations to run, e.g. a,b (default: all of {','.join(SETTINGS)})")
  parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="seeds, e.g. 0,1")
  parser.add_argument("--target", type=float, default=None,
                      help=f"held-out top-1 that ends a run (default {TARGET_TOP1:g}; --quick: {QUICK_TARGET:g})")
  parser.add_argument("--max_epochs", type=float, default=MAX_EPOCHS,
                      help="epochs after which a run that has not reached the target ends; the LR schedule's span")
  parser.add_argument("--reuse", action="store_true",
                      help="read back finished runs with the same train.py flags instead of running them again")
  parser.add_argument("--out_dir", default=RESULTS, help="where time_to_accuracy.{json,md,png} go (default: results/)")
  parser.add_argument("--quick", action="store_true",
                      help=f"smoke run of the program, numbers meaningless: ~{QUICK_IMAGES:,} images a run "
                      f"(at least 2 steps), two evaluations, target {QUICK_TARGET:g}")
  args = parser.parse_args(argv)
  keys = [k for k in args.only.split(",") if k]
  unknown = [k for k in keys if k not in SETTINGS]
  if unknown or not keys:
    parser.error(f"--only={args.only}: name configurations among {','.join(SETTINGS)}, e.g. --only=a,c")
  try:
    seeds = [int(x) for x in args.seeds.split(",") if x]
  except ValueError:
    seeds = []
  if not seeds:
    parser.error(f"--seeds={args.seeds}: pass integers separated by commas, e.g. --seeds=0,1")
  target = args.target if args.target is not None else (QUICK_TARGET if args.quick else TARGET_TOP1)
  if not 0 < target <= 1:
    parser.error(f"--target={target} lies outside (0, 1]; pass a fraction, e.g. --target=0.9")
  if args.max_epochs <= 0:
    parser.error(f"--max_epochs={args.max_epochs} must be positive, e.g. --max_epochs={MAX_EPOCHS:g}")
  return args, keys, seeds, Budget(target=target, max_epochs=args.max_epochs, quick=args.quick)


def slow_precisions(keys, flags=None) -> dict:
  """{key: why} for the configurations of keys whose precision is not faster than fp32 on this CPU
  (optimizers/precision.cpu_lacks: no AMX): they run their first seed only. On an AVX2-only CPU (bf16
  converted element by element) (d) trains at ~1/7 of (c)'s images/s, ~65 minutes a seed."""
  from optimizers import precision
  flags = precision.cpu_flags() if flags is None else flags
  lacks = {k: precision.cpu_lacks(SETTINGS[k].precision, flags) for k in keys}
  return {k: why for k, why in lacks.items() if why}


def main(argv=None) -> None:
  args, keys, seeds, budget = parse_args(argv)
  # Quick runs in a directory of their own: a smoke run never replaces a measured run's model_dir.
  runs_dir = os.path.join(REPO, "runs", "time_to_accuracy" + ("-quick" if budget.quick else ""))
  prepare_data()
  exchange, params = exchange_per_update()
  scale = {"params": params, "exchange": exchange}
  slow = slow_precisions(keys)
  for key, why in slow.items():
    print(f"  {SETTINGS[key].name}: seed {seeds[0]} only: {why}", flush=True)
  runs = []
  for seed in seeds:  # every configuration once before any twice: a stopped benchmark still compares
    for key in keys:
      if key in slow and seed != seeds[0]:
        continue
      runs.append(run(key, seed, budget, runs_dir, args.reuse))
      text = write(runs, budget, scale, args.out_dir, slow)  # after every run: an interrupted benchmark keeps its runs
  print(text)


if __name__ == "__main__":
  main()
