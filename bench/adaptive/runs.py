"""`make adaptive`'s runs, part by part: each a train.py launch from scratch (bench/harness/train_runs),
the change part's a launch per phase, the elastic part's on 2 emulated hosts (bench/harness/hosts),
recorded beside its model_dir (run.json) and read back with --reuse."""
import json
import os
import shutil
import time

from bench.adaptive.settings import (ALONE, CHANGE, EARLIER, ELASTIC_HOSTS, LOSE_AT, RANKS, budget_flags, change_phases,
                                     target_flags)
from bench.harness.hosts import Hosts, regrown, world_sizes
from bench.harness.launches import Job
from bench.harness.train_runs import REPO, command, launch, read_events, record, reused, shown


def record_run(name: str, flags, model_dir: str, wall: float, commands: list[str]) -> dict:
  """A finished run's record (run.json): its summary and the traces of its TensorBoard scalars."""
  with open(os.path.join(model_dir, "summary.json")) as fh:
    summary = json.load(fh)
  points = read_events(model_dir)
  done = {"name": name, "flags": flags, "wall_seconds": round(wall, 1), "summary": summary,
          "command": " ; ".join(commands),
          "eval": trace(points, "eval/top1"), "b_simple": trace(points, "noise/b_simple"),
          "gain": trace(points, "adascale/gain"), "tau": trace(points, "adascale/tau"),
          "img_s": trace(points, "train/images_per_sec")}
  record(model_dir, done)
  return done


def trace(points, tag: str) -> list[list[float]]:
  """[[update (TensorBoard's step), value]] of one scalar, in order."""
  return [[step, round(value, 4)] for _, step, t, value in sorted(points, key=lambda p: p[1]) if t == tag]


def run(name: str, flags: list[str], runs_dir: str, reuse: bool, timeout: float) -> dict:
  model_dir = os.path.join(runs_dir, name)
  flags = [f"--model_dir={os.path.relpath(model_dir, REPO)}", *flags]
  done = reuse and reused(model_dir, {"flags": flags})
  if not done:
    _, _, wall = launch(RANKS, flags, model_dir, timeout=timeout, accept=(0, 3))
    done = record_run(name, flags, model_dir, wall, [shown(command(RANKS, flags))])
  report(done)
  return done


def report(done: dict) -> None:
  s = done["summary"]
  print(f"  {done['name']}: {s['status']}, top-1 {s['final_top1']}, {s['steps']} updates, {s['epochs']} epochs, "
        f"{s.get('images_trained')} images, {done['wall_seconds']:.0f} s"
        + (f", target at {s['time_to_target_seconds']} s" if s.get("time_to_target_seconds") else "")
        + (f", K changes {[(c['step'], c['k_to']) for c in s['batch_policy']['changes']]}"
           if s.get("batch_policy") else "")
        + (f", worlds {s['elastic']['worlds']}" if s.get("elastic") else ""), flush=True)


def elastic_run(name: str, flags: list[str], model_dir: str, hosts: Hosts) -> dict:
  shutil.rmtree(model_dir, ignore_errors=True)
  os.makedirs(model_dir)
  hosts.publish(*hosts.names)
  start = time.time()
  with Job(model_dir, *flags, launcher=hosts.launcher(2, 1, 2), extra_env=hosts.env) as job:
    try:
      job.wait_for_step(LOSE_AT, timeout=1800)
      if not hosts.lose(job, hosts.names[1]):
        raise RuntimeError(f"{name}: no process of the job on {hosts.names[1]}:\n{job.tail()}")
      job.wait_until(lambda err: world_sizes(err)[1:2] == [1], "a world of one rank", 600)
      job.wait_for_step(job.step() + ALONE, timeout=600)
      hosts.publish(*hosts.names)
      job.wait_until(lambda err: regrown(err, 2) is not None, "a world of two ranks again", 600)
      _, left = job.wait_gone(3600)
    finally:
      job.save_logs(model_dir)
    if left or job.proc.returncode != 0:
      raise RuntimeError(f"{name}: exited {job.proc.returncode}, left {sorted(left)}:\n{job.tail()}")
  return record_run(name, flags, model_dir, time.time() - start, [shown(job.cmd)])


def part_budget(args, runs_dir) -> dict:
  rows = {}
  for seed in args.seeds:
    rows.setdefault("base S=1", []).append(run(f"budget-base-s{seed}", budget_flags("base", 1, args.budget_epochs,
                                                                                  seed), runs_dir, args.reuse, 3600))
    for scale in args.scales:
      for kind in ("linear", "adascale"):
        rows.setdefault(f"{kind} S={scale}", []).append(
            run(f"budget-{kind}{scale}-s{seed}", budget_flags(kind, scale, args.budget_epochs, seed), runs_dir,
                args.reuse, 7200))
  return rows


def part_steps(args, runs_dir) -> dict:
  """The linear rule at S given as many updates as AdaScale took there (its data epochs)."""
  rows = {}
  for seed in args.seeds:
    for scale in args.scales:
      ada = run(f"budget-adascale{scale}-s{seed}", budget_flags("adascale", scale, args.budget_epochs, seed), runs_dir,
                True, 7200)  # the budget part's run, read back (or run now)
      epochs = round(ada["summary"]["adascale"]["data_epochs"], 3)
      rows.setdefault(f"linear S={scale}, AdaScale's updates", []).append(
          run(f"steps-linear{scale}-s{seed}", budget_flags("linear", scale, epochs, seed), runs_dir, args.reuse, 7200))
  return rows


def part_change(args, runs_dir) -> dict:
  """AdaScale through CHANGE's scales, each phase a launch resuming the last (--max_steps ends it)."""
  rows = {}
  for seed in args.seeds:
    name = f"change-{'-'.join(str(s) for s, _ in CHANGE)}-s{seed}"
    model_dir = os.path.join(runs_dir, name)
    phases = change_phases(os.path.relpath(model_dir, REPO), args.budget_epochs, seed)
    done = args.reuse and reused(model_dir, {"flags": phases})
    if not done:
      wall = 0.0
      for i, flags in enumerate(phases):
        _, _, seconds = launch(RANKS, flags, model_dir, timeout=7200, accept=(0, 3), fresh=i == 0)
        wall += seconds
      done = record_run(name, phases, model_dir, wall, [shown(command(RANKS, f)) for f in phases])
    report(done)
    rows.setdefault("adascale S=8 -> 32 -> 8", []).append(done)
  return rows


def part_elastic(args, runs_dir) -> dict:
  """AdaScale at S = 8 on two emulated hosts, one lost at LOSE_AT and back ALONE updates later."""
  rows = {}
  hosts, up = Hosts(*ELASTIC_HOSTS, 2, os.path.join(runs_dir, "elastic-hosts.txt")), False
  try:
    for seed in args.seeds:
      name = f"elastic-2-1-2-s{seed}"
      model_dir = os.path.join(runs_dir, name)
      flags = [*budget_flags("adascale", 8, args.budget_epochs, seed), "--elastic", "--elastic_commit_every=5"]
      done = args.reuse and reused(model_dir, {"flags": flags})
      if not done:
        why = None if up else hosts.up()  # once, for every seed's run
        if why:
          raise SystemExit(f"adaptive: elastic: no emulated hosts ({why}); run as root with iproute2, or leave the part out")
        up = True
        done = elastic_run(name, flags, model_dir, hosts)
      report(done)
      rows.setdefault("adascale S=8, hosts 2 -> 1 -> 2", []).append(done)
  finally:
    hosts.down()
  return rows


def part_target(args, runs_dir) -> dict:
  rows = {}
  for seed in args.seeds:
    for kind in ("fixed", "adaptive"):
      rows.setdefault(kind, []).append(run(f"target-{kind}-s{seed}", target_flags(kind, args.target, seed),
                                           runs_dir, args.reuse, 3600))
  for tag, label in EARLIER:
    kept = [r for r in (reused(os.path.join(runs_dir, f"target-adaptive-{tag}-s{seed}"), {}) for seed in args.seeds) if r]
    if kept:
      rows[label] = kept
  return rows
