"""The accuracy part: make time-to-accuracy's large-batch LARS recipe ((c): ResNet-8 on
Fashion-MNIST, global batch 1,024 on 2 ranks of this host, LARS, 1 epoch of warmup, poly decay)
run for the same steps uncompressed and with PowerSGD (variants.ACCURACY_CONFIGS), PowerSGD
starting after the warmup. Every run trains its whole length (no stop at the target: equal
steps is what the rows compare); the time to the target is read off its held-out curve, the first
evaluation at or above it, in wall seconds since the launch (train.py's own clock starts a few
seconds later, after horovodrun's start-up)."""
import dataclasses
import os
import time

from bench.compression import variants as V
from bench.harness.train_runs import REPO, eval_curve, launch, read_events, record, reused
from bench.time_to_accuracy import recipe as tta

SETTING = tta.SETTINGS["c"]
RANKS = tta.RANKS
TARGET_TOP1 = tta.TARGET_TOP1  # 0.85: the target of make time-to-accuracy
# (c)'s schedule span: 4 epochs, 232 updates at 1,024, which (c) needed 3-3.5 of to reach the
# target (results/time_to_accuracy.md: 204 and 174 steps); every row trains all of them.
EPOCHS = tta.MAX_EPOCHS
QUICK_STEPS = 4  # --quick: a smoke run, numbers meaningless; PowerSGD from step QUICK_START
QUICK_START = 2


def compression_start(quick: bool) -> int:
  """PowerSGD's first step: the end of (c)'s warmup (58 steps), or QUICK_START in a smoke run."""
  return QUICK_START if quick else V.warmup_steps(SETTING.warmup_epochs, tta.steps_per_epoch(SETTING))


def train_args(key: str, seed: int, model_dir: str, quick: bool) -> list[str]:
  """train.py's flags of one accuracy run: (c)'s recipe at full length, no target stop, the
  configuration's compression; quick: QUICK_STEPS steps, evaluated at the end."""
  budget = tta.Budget(target=0.0, max_epochs=EPOCHS)  # --target_top1=0: train every step
  flags = tta.train_args(SETTING, seed, budget, model_dir) + V.ACCURACY_CONFIGS[key].flags(compression_start(quick))
  return flags + ([f"--max_steps={QUICK_STEPS}"] if quick else [])


def time_to_target(curve: list[dict], target: float) -> dict | None:
  """The first evaluation of a curve (train_runs.eval_curve's) with top-1 >= target: {seconds,
  step, epoch}; None when none reached it."""
  for point in curve:
    if point["top1"] >= target:
      return {k: point[k] for k in ("seconds", "step", "epoch")}
  return None


def run_record(key: str, seed: int, flags: list[str], summary: dict, curve: list[dict], wall: float) -> dict:
  """One run as the report keeps it."""
  reached = time_to_target(curve, TARGET_TOP1)
  return {"config": key, "name": V.ACCURACY_CONFIGS[key].name, "seed": seed, "flags": flags,
          "command": tta.shown(flags), "status": summary["status"], "steps": summary["steps"],
          "epochs": summary["epochs"], "final_top1": summary["final_top1"],
          "images_per_sec": summary["images_per_sec"], "compression": summary.get("compression"),
          "target": TARGET_TOP1, "reached": reached, "wall_seconds": wall, "curve": curve}


def run(key: str, seed: int, runs_dir: str, reuse: bool, quick: bool) -> dict:
  """One accuracy run from scratch (or, with reuse, read back if its flags match)."""
  model_dir = os.path.join(runs_dir, f"{key}-seed{seed}")
  flags = train_args(key, seed, os.path.relpath(model_dir, REPO), quick)  # train.py runs in REPO
  done = reuse and reused(model_dir, {"flags": flags})
  note = " (reused)" if done else ""
  if not done:
    start = time.time()
    # A LARS run can diverge (exit 3): a result, as in make time-to-accuracy.
    summary, _, wall = launch(RANKS, flags, model_dir, accept=(0, 3),
                              timeout=max(900.0, EPOCHS * tta.TRAIN_IMAGES / 20))  # >= 20 images/s
    curve = eval_curve(read_events(model_dir), start, tta.steps_per_epoch(SETTING))
    done = run_record(key, seed, flags, summary, curve, wall)
    record(model_dir, done)
  reached = done["reached"]
  verdict = (f"{TARGET_TOP1:g} at {reached['seconds']:.0f} s (step {reached['step']})" if reached
             else "target not reached")
  print(f"  {done['name']:38s} seed {seed}: final top-1 {done['final_top1']}, {verdict}, "
        f"{done['wall_seconds']:.0f} s{note}", flush=True)
  return done


def setup(quick: bool) -> dict:
  """The part's setup as the JSON keeps it."""
  return {"setting": dataclasses.asdict(SETTING), "ranks": RANKS, "epochs": EPOCHS, "target": TARGET_TOP1,
          "compression_start": compression_start(quick), "quick": quick,
          "steps": QUICK_STEPS if quick else int(EPOCHS * tta.steps_per_epoch(SETTING))}
