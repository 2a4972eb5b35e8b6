"""python -m bench.faults.join_ahead [--pairs=5] [--out_dir=results]   (make bench-join-ahead)

What a returning host costs the survivor with its process started ahead (scripts/horovod/join_ahead.patch,
comm/joining.py) and without (HOROVOD_JOIN_AHEAD=0: stock Horovod's order), launch for launch in turn on
the same 2 emulated hosts: make faults' elastic-horovod launch (bench/faults/elastic.launch_once:
ResNet-20 on digits, the second host lost at step 25 and listed again once the survivor trains alone).
Per launch, from rank 0's time ledger (summary.json's time.world_changes, the return's the last): the
survivor's pause for the return (its world_change parts, from its reset to the new world's first
step) and its re-init (Horovod's shutdown and init, and the state's sync, which waits for the joining
rank); and from the launcher's clock the seconds from the listing to the first step of two ranks.
Writes results/join_ahead.{json,md}: every launch, and each arm's median and range.
"""
import argparse
import os
import statistics
import sys
import tempfile

from bench.faults import elastic
from bench.faults.report import measured_at
from bench.harness.hosts import Hosts
from bench.harness.train_runs import REPO, cpu_model
from progress import emit, write_json_atomic

ARMS = {"ahead": "1", "stock": "0"}  # HOROVOD_JOIN_AHEAD for each arm
FIGURES = ("return_s", "return_reinit_s", "return_first_step_s", "seconds_to_join", "world_change_s")
WORDS = {"return_s": "the survivor's pause for the return (s)", "return_reinit_s": "... of it, re-init (s)",
         "return_first_step_s": "... of it, the new world's first step (s)",
         "seconds_to_join": "listing to the first step of two ranks (s)",
         "world_change_s": "the survivor's world changes, loss and return (s)"}


def summarise(launches: list[dict]) -> dict:
  """{arm: {figure: {"median", "min", "max", "n"}}, "started_ahead": n, "finished": n} over the launches
  that finished and kept the row's promise (pure)."""
  out = {}
  for arm in ARMS:
    done = [r for r in launches if r["arm"] == arm and r["outcome"] == "finished" and not elastic.launch_kept(r)]
    figures = {}
    for key in FIGURES:
      known = [r[key] for r in done if r.get(key) is not None]
      if known:
        figures[key] = {"median": round(statistics.median(known), 2), "min": min(known), "max": max(known),
                        "n": len(known)}
    out[arm] = {"launches": sum(r["arm"] == arm for r in launches), "finished": len(done),
                "started_ahead": sum(bool(r.get("started_ahead")) for r in done), **figures}
  return out


def markdown(record: dict) -> str:
  """results/join_ahead.md (pure)."""
  s, arms = record["setup"], record["arms"]
  lines = ["# A returning host: its process started ahead, and stock Horovod's order", "",
           f"Commit {s['commit']}{' with ' + ', '.join(s['changed']) + ' changed' if s.get('changed') else ''}, "
           f"{s['cores']} cores ({s['cpu']}); {s['pairs']} pairs of launches in turn "
           f"(`python -m bench.faults.join_ahead --pairs={s['pairs']}`). Median (min-max) over each arm's launches "
           "that finished and kept make faults' promise (the survivor trained alone, the host joined, replicas "
           "identical, exit 0).", "",
           "| figure | started ahead | stock |", "|---|---|---|"]
  for key in FIGURES:
    cells = [f"{f['median']} ({f['min']}-{f['max']})" if (f := arms[a].get(key)) else "-" for a in ARMS]
    lines.append(f"| {WORDS[key]} | {' | '.join(cells)} |")
  kept = [f"{arms[a]['finished']} / {arms[a]['launches']}" for a in ARMS]
  lines.append(f"| launches kept / made | {' | '.join(kept)} |")
  lines.append(f"| joining process started ahead | {' | '.join(str(arms[a]['started_ahead']) for a in ARMS)} |")
  lines += ["", "Not shown: the joining process's own start-up, which in the ahead arm overlaps the survivor's "
            "training (the listing-to-two-ranks figure includes it in both arms); the first step after the return "
            "is a trace on every rank in both.", ""]
  return "\n".join(lines)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(prog="python -m bench.faults.join_ahead", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--pairs", type=int, default=5, help="launches of each arm, in turn (default: %(default)s)")
  p.add_argument("--out_dir", default=os.path.join(REPO, "results"))
  args = p.parse_args(argv)
  at = measured_at(REPO)  # the commit, and the tracked files that differed from it
  record = {"setup": {"commit": (at["sha"] or "")[:7], "changed": at["changed"], "cpu": cpu_model(),
                      "cores": os.cpu_count(), "pairs": args.pairs,
                      "fault": "elastic-horovod", "launcher": elastic.LAUNCHER}, "launches": []}
  os.makedirs(args.out_dir, exist_ok=True)
  with tempfile.TemporaryDirectory(prefix="join-ahead-") as workdir:
    hosts = Hosts(elastic.NAME, elastic.SUBNET, 2, os.path.join(workdir, "hosts.txt"))
    if why := hosts.up():
      sys.exit(f"error: no emulated hosts ({why}); the bench needs root and ip netns")
    try:
      for i in range(args.pairs):
        for arm, value in ARMS.items():
          os.environ["HOROVOD_JOIN_AHEAD"] = value  # read by horovodrun's driver (the launch's environment)
          r = elastic.launch_once(hosts, os.path.join(workdir, f"{arm}-{i}"), "elastic-horovod")
          record["launches"].append(dict(r, arm=arm, pair=i + 1))
          emit(f"join-ahead: pair {i + 1}/{args.pairs}, {arm}: {r['outcome']}, pause for the return "
               f"{r.get('return_s')} s (re-init {r.get('return_reinit_s')} s), joined {r.get('seconds_to_join')} s "
               f"after the listing, started ahead: {r.get('started_ahead')}")
          record["arms"] = summarise(record["launches"])
          write_json_atomic(os.path.join(args.out_dir, "join_ahead.json"), record)  # kept launch by launch
    finally:
      os.environ.pop("HOROVOD_JOIN_AHEAD", None)
      hosts.down()
  with open(os.path.join(args.out_dir, "join_ahead.md"), "w") as fh:
    fh.write(markdown(record))
  emit(markdown(record))


if __name__ == "__main__":
  main()
