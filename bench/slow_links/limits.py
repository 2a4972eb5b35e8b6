"""results/slow_links.md's "What this does not show" (pure: the study's result in, markdown lines out):
lost hosts that did not rejoin, arms that ran at fewer seeds, the stalls between evaluations, and
what the emulated cluster and the study's design leave out."""
from bench.slow_links import arms


def rejoins(result: dict) -> list[str]:
  """A line when a lost host, listed again, did not rejoin (no world of full size after it)."""
  lost = [r for r in result["runs"] if r["arm"] == "lost" and (r.get("loss") or {}).get("back_at_s") is not None]
  stuck = [r for r in lost if r["loss"].get("rejoined_at_s") is None]
  if not stuck:
    return []
  return [f"- **A lost host did not rejoin in {len(stuck)} of {len(lost)} lost-host runs** that listed it again "
          f"({', '.join(r['name'] for r in stuck)}): no world of full size formed after it, and the run is not "
          "a measurement of the arm's target; its stderr.log under the runs directory says where it stopped.", ""]


STALL = 1.8  # a gap between evaluations this many times the run's median gap is a stall


def stalls(runs: list[dict]) -> dict:
  """The gaps between a run's held-out evaluations over STALL x its median gap: runs with one (of
  those with three gaps or more), the longest's excess over the median and where the three longest
  were, and of the fixed arms' stalls (whose epochs are known) how many span an epoch's end."""
  out = {"runs": 0, "counted": 0, "fixed": 0, "at_epoch_end": 0, "longest": 0.0, "where": []}
  excess = []
  for r in runs:
    curve = (r.get("curve") or []) if r.get("part", "target") == "target" else []
    gaps = [(b[0] - a[0], a[1], b[1]) for a, b in zip(curve, curve[1:])]
    if len(gaps) < 3:
      continue
    out["counted"] += 1
    med = sorted(g for g, _, _ in gaps)[len(gaps) // 2]
    big = [(g - med, u0, u1) for g, u0, u1 in gaps if g > STALL * med]
    out["runs"] += bool(big)
    excess += [(x, f"{r['name']} updates {u0}-{u1}") for x, u0, u1 in big]
    if big and r["arm"] in ("stock", "auto"):
      spe = arms.TRAIN_IMAGES // (r["per_rank"] * r["hosts"])
      out["fixed"] += len(big)
      out["at_epoch_end"] += sum(u1 // spe > u0 // spe for _, u0, u1 in big)
  excess.sort(reverse=True)
  out["longest"], out["where"] = (excess[0][0] if excess else 0.0), [w for _, w in excess[:3]]
  return out


def coverage(runs: list[dict]) -> str:
  """Which arms (stock by batch) ran at fewer seeds than the study's: '' when every arm ran at each."""
  seeds = sorted({r["seed"] for r in runs})
  per: dict[str, set] = {}
  for r in runs:
    if r.get("part", "target") == "target":
      arm = f"stock at {r['per_rank']} a rank" if r["arm"] == "stock" else r["arm"]
      per.setdefault(arm, set()).add(r["seed"])
  short = [f"{arm} at seed {', '.join(map(str, sorted(s)))}" for arm, s in per.items() if sorted(s) != seeds]
  return ("- **Not every arm ran at every seed**: " + "; ".join(short) + " only (the rest at seeds "
          f"{', '.join(map(str, seeds))}); an arm's median over one seed has no spread.") if short else ""


def limits(result: dict) -> list[str]:
  s = result["setup"]
  st = stalls(result["runs"])
  stall = (f"- **Stalls**: in {st['runs']} of {st['counted']} runs a gap between two evaluations was over {STALL:g}x "
           f"the run's median gap, the longest {st['longest']:.0f} s past it ({'; '.join(st['where'])}). Of the fixed "
           f"arms' {st['fixed']}, {st['at_epoch_end']} span an epoch's end (not every epoch end stalls); those of the "
           "adaptive and lost-host arms read by hand fell at epoch ends, K changes and world changes. They are inside "
           "the clock, in every arm, and a large part of the seeds' spread; their cause is not found yet (train.py's "
           "epoch end builds the next epoch's input and evaluates; a mid-epoch evaluation does not stall).") \
      if st["runs"] else ""
  return [*rejoins(result), *(x for x in (coverage(result["runs"]), stall) if x),
      "- **Final top-1 is at the stop**: every time-to-target run ends at its first evaluation at or past the "
      f"target, so its final top-1 is within one evaluation ({s['eval_images']:,} images) of {s['target']:g}; "
      "the budget part compares top-1 at equal epochs.",
      "- **The emulated links run on the same cores as the ranks**: the namespaces' TCP, tc and Gloo's threads "
      f"take time from the {s['cores']} cores the ranks compute on; 4 hosts put 2 ranks on a core. An unshaped link "
      "is not a fast network, it is this machine's loopback-like veth under load.",
      "- **Evaluations are as far apart in images in every arm** (under the adaptive batch train.py's "
      "`--eval_every` counts the flags' batch's steps); train.py also evaluates at every epoch end, which the "
      "spacing does not hit; an evaluation due within half an interval of it is left to it (from 2026-12-08; "
      "before, every arm evaluated twice near each epoch end, inside the clock).",
      "- **--compression=auto probes the link at start-up** (allreduces of the model's gradient size, "
      "comm/probe.large_bytes), inside the clock, and again in each elastic world: a few seconds at 20 Mbit/s "
      "for ResNet-8's 0.3 MB.",
      "- Seeds are few: a difference inside the seeds' ranges is not a difference; one model and data set; the "
      "target is reached in about an epoch, so what happens late in a long run is not shown.",
      ""]
