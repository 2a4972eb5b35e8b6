"""python -m bench.adaptive [--only=PARTS] [--seeds=0,1] [--reuse] [--quick]: AdaScale and the
adaptive batch against fixed batches (`make adaptive`, issue 24); writes results/adaptive.{md,json,png}.

Fashion-MNIST, ResNet-8 and 2 ranks of 32-image micro-batches, as `make noise-scale`
(bench/noise_scale/study.py), whose search found the peak LR 0.2 best at batch 64: that is the
base batch B0 = 64 and its LR, the one LR of every AdaScale and adaptive run. Parts (--only):

  budget    one budget of base-batch epochs (BUDGET_EPOCHS, cosine to 0, warmup a quarter epoch):
            B0 alone (S = 1); the linear rule + warmup at S = 8 and 32 (accumulation); AdaScale at
            the same S; final held-out top-1 of each seed
  steps     the linear rule + warmup at each S given AdaScale's updates there (its data epochs, from
            the budget part's run of the same seed): whether AdaScale's gain is more than more steps
  change    AdaScale with the scale changed mid-run, S = 8 -> 32 -> 8 by accumulation (the run
            stopped by --max_steps and resumed at the other --accumulation_steps; CHANGE), on the
            budget, against the budget part's AdaScale S = 8 with no LR retuned
  elastic   AdaScale at S = 8 on 2 emulated hosts of 1 rank (horovodrun --elastic over Gloo): the
            second host lost at update LOSE_AT, S = 4 on the one left, the host back (2 -> 1 -> 2)
  target    time to held-out top-1 0.85, make noise-scale's recipe (constant LR after warmup, 8
            evaluations an epoch): the adaptive controller against batch 64 at its searched LR,
            the fastest fixed batch of results/noise_scale.md (233 s there; the others 329-1,078 s)

Each run is a train.py launch from scratch (bench/harness/train_runs.launch) kept under runs/adaptive/;
--reuse reads back a run whose flags match.
"""
import argparse
import json
import os
import shutil
import sys
import time

if __package__ in (None, ""):  # run as a file: the repository on the path
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.harness.hosts import Hosts, regrown, world_sizes  # noqa: E402
from bench.harness.launches import Job  # noqa: E402
from bench.noise_scale import study  # noqa: E402
from bench.harness.train_runs import REPO, command, cpu_model, launch, read_events, record, reused  # noqa: E402

RANKS, MICRO, B0 = study.RANKS, study.BN_BATCH, 64
BASE_LR = 0.2 * 256 / B0  # per 256 images: peak 0.2 at B0 (make noise-scale's best at 64)
BUDGET_EPOCHS = 1.0       # base-batch epochs: B0 reaches ~0.86 in it (0.85 at 0.87 epochs, constant LR)
SCALES = (8, 32)
TARGET = study.TARGET
PARTS = ("budget", "steps", "change", "elastic", "target")
# (S, updates at it) of the change part's phases, the last to the budget's end: at S = 8 the
# budget part's runs counted a third of the base-batch epoch (tau 312) at update ~118, and S = 32
# moves tau by ~4-8 an update there, so 40 updates are about the middle third
CHANGE = ((8, 118), (32, 40), (8, None))
LOSE_AT = 118  # the elastic part's second host is lost at this update (a third of the budget)...
ALONE = 40     # ... and listed again this many updates into the world of one rank
ELASTIC_HOSTS = ("imcada", "198.18.23")  # an emulated cluster of this program's own
# Earlier controllers' runs, kept under target-adaptive-<tag>-s<seed>: what they did is part of the finding.
EARLIER = (("v1", "adaptive, first controller (stale times compared)"),
           ("v2", "adaptive, before b08d572 (the epoch's rest dealt again at each change)"))
QUICK = dict(budget_epochs=0.1, target=0.5, scales=(8,))


def common(seed: int) -> list[str]:
  return ["--dataset=fashion_mnist", f"--model={study.MODEL}", f"--batch_size={MICRO}",
          f"--base_lr={BASE_LR:g}", "--optimizer=sgd", f"--seed={seed}", "--export=false", "--noise_scale=true",
          f"--eval_batch_size={study.EVAL_BATCH}"]


def budget_flags(kind: str, scale: int, epochs: float, seed: int) -> list[str]:
  """kind: base (S = 1), linear or adascale at global batch scale x B0, by accumulation."""
  k = scale * B0 // (RANKS * MICRO)
  flags = common(seed) + [f"--accumulation_steps={k}", "--lr_schedule=cosine", "--warmup_epochs=0.25",
                                     f"--epochs={epochs:g}", f"--log_every={max(1, round(study.TRAIN_IMAGES / (scale * B0) / 8))}"]
  if kind == "adascale":
    flags += ["--lr_scaling=adascale", f"--base_batch={B0}"]
  return flags


def target_flags(kind: str, target: float, seed: int) -> list[str]:
  """kind: fixed (batch 64) or adaptive (starting at 64), make noise-scale's recipe to the target."""
  every = study.eval_every(B0)
  flags = common(seed) + ["--accumulation_steps=1", "--lr_schedule=step", "--decay_epochs=1000",
                                     f"--warmup_epochs={study.warmup_epochs(B0):.4g}", f"--epochs={study.MAX_EPOCHS:g}",
                                     f"--target_top1={target:g}", f"--eval_every={every}", f"--log_every={every}"]
  if kind == "adaptive":
    flags += ["--lr_scaling=adascale", f"--base_batch={B0}", "--batch_policy=adaptive"]
  return flags


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


def shown(cmd: list[str]) -> str:
  return " ".join("python" if a == sys.executable else a for a in cmd)


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


def change_phases(model_dir: str, epochs: float, seed: int) -> list[list[str]]:
  """The flags of each launch of the change part: AdaScale at CHANGE's S in turn, each phase
  ended by --max_steps (updates since the run began) but the last."""
  phases, until = [], 0
  for scale, updates in CHANGE:
    until = until + updates if updates else 0
    phases.append([f"--model_dir={model_dir}", *budget_flags("adascale", scale, epochs, seed)]
                  + ([f"--max_steps={until}"] if until else []))
  return phases


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
      for stream, text in (("stdout", job.stdout()), ("stderr", job.stderr())):
        with open(os.path.join(model_dir, f"{stream}.log"), "w") as fh:
          fh.write(text)
    if left or job.proc.returncode != 0:
      raise RuntimeError(f"{name}: exited {job.proc.returncode}, left {sorted(left)}:\n{job.tail()}")
  return record_run(name, flags, model_dir, time.time() - start, [shown(job.cmd)])


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


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--only", default=",".join(PARTS), help=f"parts to run, of {', '.join(PARTS)}")
  p.add_argument("--seeds", default="0,1", help="seeds of every comparison, e.g. 0,1")
  p.add_argument("--reuse", action="store_true", help="read back runs whose flags match instead of training again")
  p.add_argument("--quick", action="store_true", help="a smoke run: 0.1 epochs, target 0.5, S = 8 only")
  p.add_argument("--scales", default=",".join(map(str, SCALES)), help="the budget part's S = global batch / B0, "
                 "e.g. 8 (a time budget: S = 32 under AdaScale trains ~10 epochs of data for one base-batch epoch)")
  p.add_argument("--out_dir", default=os.path.join(REPO, "results"))
  p.add_argument("--runs_dir", default=os.path.join(REPO, "runs", "adaptive"))
  args = p.parse_args(argv)
  args.only = [x for x in args.only.split(",") if x]
  unknown = set(args.only) - set(PARTS)
  if unknown:
    p.error(f"--only={','.join(args.only)}: {sorted(unknown)} not among the parts {', '.join(PARTS)}")
  try:
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
  except ValueError:
    p.error(f"--seeds={args.seeds}: pass integers separated by commas, e.g. --seeds=0,1")
  quick = QUICK if args.quick else {}
  args.budget_epochs = quick.get("budget_epochs", BUDGET_EPOCHS)
  args.target = quick.get("target", TARGET)
  try:
    args.scales = quick.get("scales") or tuple(int(x) for x in args.scales.split(",") if x)
  except ValueError:
    p.error(f"--scales={args.scales}: pass integers separated by commas, e.g. --scales=8,32")
  if any(x < 2 or x * B0 % (RANKS * MICRO) for x in args.scales):
    p.error(f"--scales={args.scales}: each S must be 2 or more (S = 1 is the base run)")
  return args


def main(argv=None) -> None:
  args = parse_args(argv)
  os.makedirs(args.runs_dir, exist_ok=True)
  os.makedirs(args.out_dir, exist_ok=True)
  start = time.time()
  out = {"setup": {"ranks": RANKS, "micro_batch": MICRO, "base_batch": B0, "base_lr_per_256": BASE_LR,
                   "budget_epochs": args.budget_epochs, "target": args.target, "seeds": args.seeds,
                   "change": CHANGE, "lose_at": LOSE_AT, "alone": ALONE,
                   "cpu": cpu_model()}, "parts": {}}
  path = os.path.join(args.out_dir, "adaptive.json")
  if os.path.exists(path):  # parts run before (another --only) stay in the report
    with open(path) as fh:
      out["parts"] = json.load(fh).get("parts", {})
  for part in args.only:
    print(f"adaptive: {part}", flush=True)
    rows = {"budget": part_budget, "steps": part_steps, "change": part_change, "elastic": part_elastic,
            "target": part_target}[part](args, args.runs_dir)
    out["parts"][part] = {**out["parts"].get(part, {}), **rows}  # rows of another --scales stay
  out["wall_seconds"] = round(time.time() - start, 1)
  from bench.adaptive import report as adaptive_report  # matplotlib only here
  adaptive_report.write(out, args.out_dir)
  print(f"adaptive: wrote {args.out_dir}/adaptive.{{md,json,png}} in {out['wall_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
  main()
