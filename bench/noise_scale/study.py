"""The study's runs: train.py's flags for one (batch, LR), the LR search for one batch, a run read back."""
import dataclasses
import os
import time

from bench.harness.train_runs import REPO, command, eval_curve, launch, read_events, record, reused, shown

RANKS = 2
MODEL = "resnet8"
BN_BATCH = 32          # per rank and micro-batch: the BatchNorm batch, the same in every run
TRAIN_IMAGES = 60_000  # Fashion-MNIST's training split
ACCUMULATIONS = (1, 2, 4, 8, 16, 32, 64)  # global batches 64 ... 4,096
TARGET = 0.85          # make time-to-accuracy's: batch 64 reached it in 1.25-1.75 epochs there
MAX_EPOCHS = 12.0      # a run that has not reached the target by then has not (the cap of the first LR)
EVALS_PER_EPOCH = 8    # S is known to within 1/8 epoch
EVAL_BATCH = 250
ANCHOR_LR = 0.05       # make time-to-accuracy's (a): batch 64, SGD, 0.2 per 256
B_GUESS = 1000         # B_crit as (a) and (b) of make time-to-accuracy imply it (bench/plan: 896)
MAX_TRIES = 3          # LRs per batch
QUICK = dict(accumulations=(1, 2), target=0.3, max_epochs=0.5)


@dataclasses.dataclass(frozen=True)
class Budget:
  target: float = TARGET
  max_epochs: float = MAX_EPOCHS
  accumulations: tuple[int, ...] = ACCUMULATIONS


def global_batch(accumulation: int) -> int:
  return RANKS * BN_BATCH * accumulation


def steps_per_epoch(batch: int) -> int:
  return TRAIN_IMAGES // batch


def start_lr(batch: int, previous: tuple[int, float] | None = None) -> float:
  """The search's first peak LR (pure): eps_max / (1 + B_GUESS / B), McCandlish et al.'s optimal-LR
  curve, through ANCHOR_LR at 64, or through the best LR of the previous batch searched,
  previous = (its batch, its best LR): the curve's shape carried from where the search found
  the optimum (at 64 and 256 it lay at 4x the anchor's curve)."""
  at, lr = previous or (64, ANCHOR_LR)
  return lr * (1 + B_GUESS / at) / (1 + B_GUESS / batch)


def warmup_epochs(batch: int) -> float:
  """A quarter epoch, or 20 updates where an epoch has fewer than 80 (at 4,096: 14 a epoch)."""
  return max(0.25, 20 * batch / TRAIN_IMAGES)


def eval_every(batch: int) -> int:
  return max(1, round(steps_per_epoch(batch) / EVALS_PER_EPOCH))


def train_args(batch: int, peak_lr: float, budget: Budget, model_dir: str, max_steps: int | None) -> list[str]:
  """train.py's flags for one run: warmup then a constant peak_lr (a step schedule whose first
  decay lies far past the cap), accumulation to reach `batch`, a target, evaluations 8 an epoch."""
  accumulation = batch // (RANKS * BN_BATCH)
  every = eval_every(batch)
  flags = [f"--model_dir={model_dir}", "--dataset=fashion_mnist", f"--model={MODEL}",
           f"--global_batch_size={batch}", f"--accumulation_steps={accumulation}",
           f"--base_lr={peak_lr * 256 / batch:.6g}", f"--warmup_epochs={warmup_epochs(batch):.4g}",
           "--optimizer=sgd", "--lr_schedule=step", "--decay_epochs=1000", f"--epochs={budget.max_epochs:g}",
           f"--target_top1={budget.target:g}", f"--eval_every={every}", f"--log_every={every}",
           f"--eval_batch_size={EVAL_BATCH}", "--seed=0", "--export=false", "--noise_scale=true"]
  if max_steps:
    flags.append(f"--max_steps={max_steps}")
  return flags


def noise_curve(points, batch: int) -> list[dict]:
  """B_simple as the progress lines reported it: [{step, epoch, b_simple}] from TensorBoard points."""
  spe = steps_per_epoch(batch)
  return [{"step": step, "epoch": round(step / spe, 3), "b_simple": value}
          for _, step, tag, value in sorted(points, key=lambda p: p[1]) if tag == "noise/b_simple"]


def run(batch: int, peak_lr: float, budget: Budget, runs_dir: str, reuse: bool, max_steps: int | None = None) -> dict:
  """One run from scratch (or, with reuse, read back if its flags match): its record."""
  model_dir = os.path.join(runs_dir, f"b{batch}-lr{peak_lr:.4g}" + (f"-cap{max_steps}" if max_steps else ""))
  flags = train_args(batch, peak_lr, budget, os.path.relpath(model_dir, REPO), max_steps)
  done = reuse and reused(model_dir, {"flags": flags})
  note = " (reused)" if done else ""
  if not done:
    start = time.time()
    summary, _, wall = launch(RANKS, flags, model_dir, accept=(0, 3),  # a diverged LR is a result
                              timeout=max(1800.0, budget.max_epochs * TRAIN_IMAGES / 20))
    points = read_events(model_dir)
    noise = summary.get("noise_scale") or {}
    done = {"batch": batch, "accumulation": batch // (RANKS * BN_BATCH), "peak_lr": peak_lr, "cap": max_steps,
            "flags": flags, "command": shown(command(RANKS, flags)),
            "status": summary["status"], "reached": bool(summary.get("target_reached")),
            "target_step": summary.get("target_step"), "target_epoch": summary.get("target_epoch"),
            "steps": summary["steps"], "epochs": summary["epochs"], "images_per_sec": summary["images_per_sec"],
            "b_simple_at_target": (noise.get("at_target") or {}).get("b_simple"), "noise_scale": noise,
            "best_top1": max([p["top1"] for p in eval_curve(points, start, steps_per_epoch(batch))] + [0.0]),
            "curve": eval_curve(points, start, steps_per_epoch(batch)), "noise_curve": noise_curve(points, batch),
            "wall_seconds": wall}
    record(model_dir, done)
  verdict = (f"target at step {done['target_step']} (epoch {done['target_epoch']:.2f}), B_simple "
             f"{done['b_simple_at_target'] or 0:.0f}" if done["reached"] else
             f"{done['status']}, not reached by step {done['steps']} (best top-1 {done['best_top1']:.4f})")
  print(f"  batch {batch:5d} LR {peak_lr:.4g}{f' (cap {max_steps})' if max_steps else ''}: {verdict}, "
        f"{done['wall_seconds']:.0f} s{note}", flush=True)
  return done


def better(new: dict, best: dict | None) -> bool:
  """Whether a run reached the target in fewer steps than the best so far (pure)."""
  return new["reached"] and (best is None or new["target_step"] < best["target_step"])


def search(batch: int, attempt, lr0: float, tries: int = MAX_TRIES) -> list[dict]:
  """The LR search for one batch (pure but for attempt(lr, cap) -> run record): lr0, then doubled
  while that reaches the target in fewer steps; halved instead only if none reached it. At most
  `tries` runs, each after the first capped at the best steps so far. The runs in the order taken.

  Upward only: lr0 is the previous batch's best carried along the optimal-LR curve, which rises
  with the batch, and each doubling costs a run of up to the steps to beat (hours at 4,096)."""
  runs, best = [], None

  def take(lr):
    nonlocal best
    r = attempt(lr, best["target_step"] if best else None)
    runs.append(r)
    if better(r, best):
      best = r
    return r is best

  take(lr0)
  for factor in (2.0, 0.5):
    lr = lr0 * factor
    while len(runs) < tries and take(lr):
      lr *= factor
    if best is not None:
      break  # halving is for a start that reached nothing
  return runs


def best_of(runs: list[dict]) -> dict | None:
  """The run that reached the target in the fewest steps (None: none reached)."""
  reached = [r for r in runs if r["reached"]]
  return min(reached, key=lambda r: r["target_step"]) if reached else None
