"""python -m bench.slow_links [--only=PARTS] [--rates=20mbit,none] [--hosts=2,4] [--seeds=0,1] [--reuse]
[--quick]: the command line of the study (bench/slow_links/__init__.py says what it measures).

Seed-major: for each seed, each rate (an emulated cluster per rate and host count, up for that
configuration's runs and down after), every arm once; so drift in the machine's speed spreads over
the arms. Each run is recorded beside its model_dir under runs/slow_links[-quick]/, and
results/slow_links.{json,md,png} are written after every run: an interrupted study keeps what it
ran, and --reuse reads back finished runs of the same flags instead of training again.
"""
import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a file: the repository on the path
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.slow_links import arms, launch, summary  # noqa: E402
from bench.harness.train_runs import REPO, cpu_model, prepare_fashion_mnist  # noqa: E402

PARTS = ("stock", "auto", "adaptive", "joint", "lost", "budget")


def parse_args(argv=None):
  p = argparse.ArgumentParser(prog="python -m bench.slow_links", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--only", default=",".join(PARTS), help=f"arms and parts to run, of {', '.join(PARTS)} (an arm "
                 "that needs another's runs reads them back: auto stock's best, lost the joint arm's time)")
  p.add_argument("--rates", default=None, help=f"link rates (tc), e.g. 20mbit,none (default {','.join(arms.RATES)})")
  p.add_argument("--hosts", default=None, help=f"emulated hosts of one rank, e.g. 2,4 (default "
                 f"{','.join(map(str, arms.HOSTS))})")
  p.add_argument("--seeds", default=None, help=f"seeds (default {','.join(map(str, arms.SEEDS))})")
  p.add_argument("--stock", default=None, help="the stock arm's images per rank per update to run, of "
                 f"{','.join(map(str, arms.STOCK_PER_RANK))} (default all; a batch that missed the target at one seed "
                 "cannot be the best by a median over two, so a second seed may leave it out)")
  p.add_argument("--reuse", action="store_true", help="read back finished runs of the same flags")
  p.add_argument("--quick", action="store_true", help="a smoke run, numbers meaningless: target 0.7, 1-epoch cap, "
                 "stock at 32 and 128 a rank, evaluations 4x as often, seed 0, 20mbit, 2 hosts")
  p.add_argument("--out_dir", default=None, help="where slow_links.{json,md,png} go (default results/; --quick: "
                 "runs/slow_links-quick/)")
  p.add_argument("--runs_dir", default=None)
  args = p.parse_args(argv)
  args.only = [x for x in args.only.split(",") if x]
  if set(args.only) - set(PARTS):
    p.error(f"--only={','.join(args.only)}: {sorted(set(args.only) - set(PARTS))} not among {', '.join(PARTS)}")
  args.budget = arms.QUICK if args.quick else arms.Budget()
  args.rates = (args.rates or ("20mbit" if args.quick else ",".join(arms.RATES))).split(",")
  try:
    for rate in args.rates:
      arms.link_mbit(rate)
    args.hosts = [int(h) for h in (args.hosts or ("2" if args.quick else ",".join(map(str, arms.HOSTS)))).split(",")]
    args.seeds = [int(s) for s in (args.seeds or ("0" if args.quick else ",".join(map(str, arms.SEEDS)))).split(",")]
    args.stock = [int(b) for b in args.stock.split(",")] if args.stock else list(args.budget.stock)
  except ValueError as e:
    p.error(f"{e}; --hosts, --seeds and --stock take integers separated by commas, e.g. --hosts=2,4")
  if set(args.stock) - set(args.budget.stock):
    p.error(f"--stock={','.join(map(str, args.stock))}: the stock batches are {','.join(map(str, args.budget.stock))}"
            " (the adaptive arms' range is drawn from them)")
  if not all(2 <= h <= 15 for h in args.hosts):
    p.error(f"--hosts={args.hosts}: 2 to 15 hosts (cluster.sh's 16, one of them the launcher's head)")
  tag = "slow_links-quick" if args.quick else "slow_links"
  args.runs_dir = args.runs_dir or os.path.join(REPO, "runs", tag)
  args.out_dir = args.out_dir or (args.runs_dir if args.quick else os.path.join(REPO, "results"))
  return args


class Study:
  """The runs of one invocation, with those recorded before (results JSON) kept unless run again."""

  def __init__(self, args):
    self.args, self.cores = args, os.cpu_count() or 1
    self.timeout = launch.QUICK_TIMEOUT_S if args.quick else launch.TIMEOUT_S
    self.path = os.path.join(args.out_dir, "slow_links.json")
    self.runs: list[dict] = []
    if os.path.exists(self.path):
      with open(self.path) as fh:
        self.runs = json.load(fh).get("runs", [])
    self.started = time.time()

  def keep(self, run: dict) -> dict:
    ident = lambda r: (r.get("part", "target"), r["arm"], r["rate"], r["hosts"], r["seed"], r.get("per_rank"))  # noqa: E731
    self.runs = [r for r in self.runs if ident(r) != ident(run)] + [run]
    self.write()
    tt, budget = run.get("time_to_target_seconds"), run.get("part") == "budget"
    print(f"  {run['name']}: {run['status']}{' (reused)' if run.get('reused') else ''}, "
          + ("no target" if budget else f"target at {tt} s, update {run.get('target_step')}" if run.get("reached")
             else "target not reached")
          + f", final top-1 {run.get('final_top1')}, {run.get('link_mb_per_host')} MB a host on the link, "
          f"{len(run.get('changes') or [])} K/c changes, {run['wall_seconds']:.0f} s", flush=True)
    return run

  def write(self) -> None:
    from bench.slow_links import report  # matplotlib only here
    report.write(self.result(), self.args.out_dir)

  def result(self) -> dict:
    a, b = self.args, self.args.budget
    ran = lambda key: sorted({r[key] for r in self.runs if r.get(key) is not None})  # noqa: E731
    # what the record holds, over every invocation that added to it (not only this one's flags)
    rates = summary.slowest_first(ran("rate"))
    setup = {"model": arms.MODEL, "micro_batch": arms.MICRO, "base_lr_per_256": arms.BASE_LR,
             "warmup_epochs": arms.WARMUP_EPOCHS, "target": b.target, "max_epochs": b.max_epochs,
             "eval_images": b.eval_images, "stock_per_rank": list(b.stock), "ours": arms.OURS,
             "compression_start": arms.COMPRESSION_START, "budget_epochs": b.budget_epochs,
             "rates": rates or a.rates, "hosts": ran("hosts") or a.hosts, "seeds": ran("seed") or a.seeds,
             "quick": a.quick, "cores": self.cores,
             "cpu": cpu_model(), "transport": "gloo (horovodrun on a head host, one rank a host)",
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    s, verdicts = summary.of_runs(self.runs)
    return {"setup": setup, "runs": self.runs, "summary": s, "verdicts": verdicts,
            "wall_seconds": round(time.time() - self.started, 1)}

  def slowest(self) -> str:
    """The budget part's rate: the slowest shaped one asked for (else the first)."""
    shaped = [r for r in self.args.rates if arms.link_mbit(r) is not None]
    return min(shaped, key=arms.link_mbit) if shaped else self.args.rates[0]

  # ------------------------------------------------------------------ runs --
  def key(self, arm, rate, hosts, seed, per_rank=None, part="target"):
    return {"name": arms.name(arm, rate, hosts, seed, per_rank, part), "part": part, "arm": arm, "rate": rate,
            "link_mbit": arms.link_mbit(rate), "hosts": hosts, "seed": seed, "per_rank": per_rank}

  def one(self, cluster, arm, rate, hosts, seed, per_rank=None, part="target", schedule=None) -> dict:
    key = self.key(arm, rate, hosts, seed, per_rank, part)
    make = arms.budget_flags if part == "budget" else arms.flags
    flags = make(arm, hosts, seed, self.args.budget, self.cores, per_rank or arms.MICRO)
    model_dir = os.path.join(self.args.runs_dir, key["name"])  # the launch adds --model_dir
    if arm == "lost":  # bounded by its own target (1.2x the joint arm's time) rather than the cap's hour
      key["schedule"] = list(schedule)
      bound = min(self.timeout, max(launch.LOST_BOUND_S, launch.LOST_BOUND_X * 3 * schedule[0]))
      return self.keep(launch.run_lost(key, flags, model_dir, cluster, schedule, self.args.reuse, bound))
    return self.keep(launch.run_fixed(key, flags, model_dir, cluster, self.args.reuse, self.timeout))

  def configuration(self, rate: str, hosts: int, seed: int) -> None:
    only, b = self.args.only, self.args.budget
    cluster = launch.hosts_for(rate, hosts, self.args.runs_dir)
    cluster.down()  # one an interrupted study left behind
    why = cluster.up()
    if why:
      sys.exit(f"slow-links: the emulated cluster did not come up ({why}); run as root with iproute2")
    try:
      print(f"slow-links: seed {seed}, {rate}, {hosts} hosts", flush=True)
      if "stock" in only:
        for per_rank in self.args.stock:
          self.one(cluster, "stock", rate, hosts, seed, per_rank)
      best = summary.best_stock(self.runs, rate, hosts)  # over the seeds run so far
      if "auto" in only and best:
        self.one(cluster, "auto", rate, hosts, seed, best)
      for arm in ("adaptive", "joint"):
        if arm in only:
          self.one(cluster, arm, rate, hosts, seed)
      joint = [r for r in summary.select(self.runs, rate, hosts, "joint") if r["seed"] == seed]
      if "lost" in only and joint:
        j = joint[0]
        self.one(cluster, "lost", rate, hosts, seed,
                 schedule=arms.lose_schedule(j["time_to_target_seconds"] if j["reached"] else j["wall_seconds"]))
      if "budget" in only and rate == self.slowest() and hosts == min(self.args.hosts) and best:
        self.one(cluster, "stock", rate, hosts, seed, best, part="budget")
        self.one(cluster, "joint", rate, hosts, seed, part="budget")
    finally:
      cluster.down()


def main(argv=None) -> None:
  args = parse_args(argv)
  if os.geteuid() != 0:
    sys.exit("slow-links: needs root (network namespaces and tc for the emulated hosts)")
  prepare_fashion_mnist("slow-links")  # Fashion-MNIST's records, before any run's clock
  os.makedirs(args.runs_dir, exist_ok=True)
  study = Study(args)
  for seed in args.seeds:
    for rate in args.rates:
      for hosts in args.hosts:
        study.configuration(rate, hosts, seed)
  study.write()
  with open(os.path.join(args.out_dir, "slow_links.md")) as fh:
    print(fh.read())


if __name__ == "__main__":
  main()
