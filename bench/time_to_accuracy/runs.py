"""make time-to-accuracy's runs: one configuration and seed launched from scratch under horovodrun,
its held-out curve read from its events, its record kept beside its model_dir for --reuse."""
import dataclasses
import os
import time

from bench.harness.train_runs import REPO, eval_curve, launch, read_events, record, reused
from bench.time_to_accuracy.recipe import RANKS, SETTINGS, TRAIN_IMAGES, Budget, shown, steps_per_epoch, train_args


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
