"""results/slow_links.{json,md,png} from the study's result (pure but for write): the summary, the
targets' verdicts, a table per configuration, each run's K and compression trace, the budget part,
and what the study does not show (limits.py). `python -m bench.slow_links.report` renders it again from the
JSON, no launch."""
import argparse
import json
import math
import os

from bench.slow_links import arms, figure, summary
from bench.slow_links.limits import limits

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results")


def finite(x) -> bool:
  return x is not None and math.isfinite(x)


def num(x, fmt: str = ".0f", missing: str = "-") -> str:
  if x is None:
    return missing
  return "not reached" if not math.isfinite(x) else format(x, fmt)


def med_range(values, fmt: str = ".0f") -> str:
  """'median (low-high)', or the one value; not-reached seeds (infinite) shown as such."""
  values = list(values)
  if not values:
    return "-"
  m, (lo, hi) = summary.median(values), summary.spread(values)
  if len(values) == 1 or lo == hi:
    return num(m, fmt)
  if not math.isfinite(hi):  # a seed that missed: each seed's
    return f"{num(m, fmt)} (seeds: {', '.join(num(v, fmt) for v in values)})"
  return f"{num(m, fmt)} ({num(lo, fmt)}-{num(hi, fmt)})"


def link(rate: str) -> str:
  mbit = arms.link_mbit(rate)
  return "unshaped" if mbit is None else f"{mbit:g} Mbit/s"


def trace(run: dict) -> str:
  """The start and every change of (K, compression) of one run, e.g. 'K1 powersgd; u50 K1->2 (try)'."""
  if run["arm"] == "stock":
    return f"K{run['per_rank'] // arms.MICRO} none (fixed)"
  c0 = run.get("compression_chose") or "none"
  parts = [f"K{run['per_rank'] // arms.MICRO if run.get('per_rank') else 1} {c0}"]
  for c in run.get("changes") or []:
    what = f"K{c['k_from']}->{c['k_to']}" if c["k_from"] != c["k_to"] else f"K{c['k_to']}"
    if c["c_from"] != c["c_to"]:
      what += f" {c['c_from']}->{c['c_to']}"
    parts.append(f"u{c['step']} {what}" + (" (try)" if c.get("probe") else "") + (" (back)" if c.get("ends_try") else ""))
  return "; ".join(parts)


def mb_per_update(run: dict) -> float | None:
  steps = run.get("steps")
  return run["link_mb_per_host"] / steps if steps else None


def arm_row(label: str, rs: list[dict], batch: str) -> str:
  reached = sum(r.get("reached", False) for r in rs)
  return "| " + " | ".join([
      label, batch, f"{reached}/{len(rs)}", med_range(summary.seconds(r) for r in rs),
      med_range((r["target_step"] for r in rs if r.get("reached")), ".0f"),
      med_range((r["images_trained"] for r in rs if r.get("images_trained") is not None), ",.0f"),
      med_range((r["final_top1"] for r in rs if r.get("final_top1") is not None), ".4f"),
      med_range((r["link_mb_per_host"] for r in rs), ".1f"),
      med_range((x for r in rs if (x := mb_per_update(r)) is not None), ".3f")]) + " |"


def configuration_section(result: dict, e: dict) -> list[str]:
  runs, rate, hosts = result["runs"], e["rate"], e["hosts"]
  out = [f"### {link(rate)}, {hosts} hosts", "",
         "| arm | images a rank an update | reached | time to target s | updates to target | images trained | "
         "final top-1 | MB sent a host | MB a host an update |", "|---|---|---|---|---|---|---|---|---|"]
  for b in sorted({r["per_rank"] for r in summary.select(runs, rate, hosts, "stock")}):
    best = " (best)" if b == e["stock_best_per_rank"] else ""
    out.append(arm_row(f"stock Horovod{best}", summary.select(runs, rate, hosts, "stock", b), str(b)))
  for arm in ("auto", "adaptive", "joint", "lost"):
    rs = summary.select(runs, rate, hosts, arm)
    if rs:
      batch = ", ".join(sorted({str(r["per_rank"]) for r in rs})) if arm == "auto" else f"{arms.MICRO} x K"
      out.append(arm_row(arms.LABELS[arm], rs, batch))
  out += ["", "K and compression, run by run (u: the update a change came after; the first pair is the start):", ""]
  for r in sorted(summary.select(runs, rate, hosts, "auto") + summary.select(runs, rate, hosts, "adaptive")
                  + summary.select(runs, rate, hosts, "joint") + summary.select(runs, rate, hosts, "lost"),
                  key=lambda r: (arms.ARMS.index(r["arm"]), r["seed"])):
    extra = ""
    if r["arm"] == "lost":
      loss = r.get("loss") or {}
      extra = (f"; host lost at {num(loss.get('lost_at_s'), '.0f')} s (planned {loss.get('lose_planned_s')}), listed "
               f"again at {num(loss.get('back_at_s'), '.0f')} s (planned {loss.get('back_planned_s')}), worlds "
               f"{(r.get('elastic') or {}).get('worlds') or loss.get('worlds_logged')}")
    if r.get("timed_out") or r.get("exit"):
      extra += (f"; **ended by the study's bound after {r['wall_seconds']:.0f} s**" if r.get("timed_out")
                else f"; exit {r['exit']}") + (f" ({r['hang']})" if r.get("hang") else "")
    starts = f" (start: {r['start_line']})" if r.get("start_line") else ""
    out.append(f"- {r['arm']} seed {r['seed']}: {trace(r)}{extra}{starts}")
  return out + [""]


def summary_section(result: dict) -> list[str]:
  out = ["| link | hosts | stock's best, images a rank | its time to target s | joint s | **ratio_to_stock** "
         "(seeds) | adaptive K alone | ours + auto at the best batch | lost host / joint |",
         "|---|---|---|---|---|---|---|---|---|"]
  for e in result["summary"]:
    def ratio(fig, key="ratio_to_stock", rng="ratio_range"):
      r = fig.get(key)
      s = fig.get(rng)
      return num(r, ".2f") + (f" ({s[0]:.2f}-{s[1]:.2f})" if s and len(s) == 2 and s[0] != s[1] else "")
    out.append(f"| {link(e['rate'])} | {e['hosts']} | {e['stock_best_per_rank']} | "
               f"{num(e['stock_best']['median_s'])} | {num(e['joint']['median_s'])} | **{ratio(e)}** | "
               f"{ratio(e['adaptive'])} | {ratio(e['auto'])} | {ratio(e['lost'], 'ratio_to_joint', 'ratio_to_joint_range')} |")
  return out + ["", "Ratios are of medians over seeds; in brackets the range of the seed-by-seed ratios (each seed's "
                "run over stock's best batch's run of the same seed).", ""]


def verdict_section(result: dict) -> list[str]:
  word = {True: "**met**", False: "**not met**", None: "not measured"}
  return [f"- {v['target']}, {link(v['rate'])}, {v['hosts']} hosts: {word[v['met']]}: {v['why']}"
          for v in result["verdicts"]] + [""]


def budget_section(result: dict) -> list[str]:
  rs = [r for r in result["runs"] if r.get("part") == "budget"]
  if not rs:
    return ["Not run (--only without budget).", ""]
  b = result["setup"]["budget_epochs"]
  out = [f"{b:g} base-batch epochs, cosine to 0, the same recipe otherwise, no target; final held-out top-1 at the "
         "run's end:", "", "| arm | link | hosts | images a rank an update | final top-1 | images trained | wall s |",
         "|---|---|---|---|---|---|---|"]
  for arm in ("stock", "joint"):
    group = [r for r in rs if r["arm"] == arm]
    if group:
      out.append(f"| {arms.LABELS[arm]} | {link(group[0]['rate'])} | {group[0]['hosts']} | "
                 f"{group[0]['per_rank'] or f'{arms.MICRO} x K'} | "
                 f"{med_range((r['final_top1'] for r in group if r.get('final_top1') is not None), '.4f')} | "
                 f"{med_range((r['images_trained'] for r in group if r.get('images_trained')), ',.0f')} | "
                 f"{med_range(r['wall_seconds'] for r in group)} |")
  return out + [""]


def setup_lines(s: dict) -> list[str]:
  return [
      f"{s['model']} on Fashion-MNIST (60,000 training images, the 10,000 test images held out), on emulated "
      f"hosts of one rank each (network namespaces on this machine's {s['cores']} cores, {s['cpu']}; links shaped by "
      f"tc, or unshaped, where the namespaces' TCP on the shared cores is the link), {s['transport']}. Rates "
      f"{', '.join(link(r) for r in s['rates'])}; hosts {', '.join(map(str, s['hosts']))}; seeds "
      f"{', '.join(map(str, s['seeds']))}; {s['date']}." + (" **A smoke run (--quick): the numbers mean nothing.**"
                                                             if s["quick"] else ""),
      "",
      f"One recipe for every arm: micro-batch (BatchNorm's batch) {s['micro_batch']} a rank, larger batches by "
      f"accumulation; SGD, momentum 0.9, LR {s['base_lr_per_256']:g} per 256 images (peak 0.2 at batch 64, make "
      f"noise-scale's best there), warmup {s['warmup_epochs']:g} epochs then constant; a held-out evaluation every "
      f"{s['eval_images']:,} images; stop at top-1 {s['target']:g}, or at {s['max_epochs']:g} epochs (AdaScale's: "
      "base-batch epochs). Arms:",
      f"- **stock Horovod**: `--allreduce=horovod`, no compression, the linear rule with gradual warmup, fixed "
      f"batches of {', '.join(map(str, s['stock_per_rank']))} images a rank; its best (lowest median time to target) "
      "is the anchor;",
      f"- **ours + auto**: `--allreduce={s['ours']} --compression=auto --compression_start={s['compression_start']}` "
      "at stock's best batch (the best over the seeds run before it);",
      f"- **adaptive K**: `--lr_scaling=adascale --batch_policy=adaptive`, base batch the smallest stock batch, "
      f"at most the largest, `--compression=none`;",
      "- **joint**: the same with `--compression=auto`: the controller chooses K and the exchange together;",
      "- **lost host**: the joint arm under `--elastic` (Horovod's elastic driver), a host without rank 0 lost a third "
      "of the way into the joint arm's own time to target (same seed and configuration) and listed again at two "
      "thirds.",
      "",
      "Time to target is MLPerf's clock, train.py's `time_to_target_seconds`: from the process's start-up "
      "(evaluations, the start-up probes included). Bytes: each rank host's link, tx counted by the kernel before "
      "and after the launch (everything that crossed it, TCP/IP headers and start-up included), the mean over hosts.",
      ""]


def render(result: dict) -> str:
  s = result["setup"]
  out = ["# Slow links: stock Horovod against ours on emulated hosts (`make slow-links`)", "", *setup_lines(s),
         "## The joint arm against stock's best fixed batch", "", *summary_section(result),
         "## Targets", "", *verdict_section(result), "## Runs", ""]
  for e in result["summary"]:
    out += configuration_section(result, e)
  out += ["## Final top-1 at equal epochs (the budget part)", "", *budget_section(result),
          "## What this does not show", "", *limits(result), "## Commands", ""]
  seen = set()
  for r in result["runs"]:
    if (r.get("part", "target"), r["arm"]) not in seen:
      seen.add((r.get("part", "target"), r["arm"]))
      out.append(f"- {r.get('part', 'target')} {r['arm']}: `{r['command']}`")
  return "\n".join(out + ["", f"{result.get('wall_seconds', 0) / 3600:.2f} hours of launches in this invocation.", ""])


def jsonable(x):
  """Infinite figures (not reached) as null: JSON has no infinity."""
  if isinstance(x, float) and not math.isfinite(x):
    return None
  if isinstance(x, dict):
    return {k: jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [jsonable(v) for v in x]
  return x


def write(result: dict, out_dir: str) -> str:
  """OUT_DIR/slow_links.{json,md,png}; the markdown returned."""
  os.makedirs(out_dir, exist_ok=True)
  text = render(result)
  tmp = os.path.join(out_dir, "slow_links.json.tmp")
  with open(tmp, "w") as fh:
    json.dump(jsonable(result), fh, indent=1)
  os.replace(tmp, os.path.join(out_dir, "slow_links.json"))
  with open(os.path.join(out_dir, "slow_links.md"), "w") as fh:
    fh.write(text)
  figure.plot(result, os.path.join(out_dir, "slow_links.png"))
  return text


def main(argv=None) -> None:
  p = argparse.ArgumentParser(prog="python -m bench.slow_links.report", description=__doc__)
  p.add_argument("--out_dir", default=RESULTS, help="where slow_links.json is")
  args = p.parse_args(argv)
  with open(os.path.join(args.out_dir, "slow_links.json")) as fh:
    result = json.load(fh)
  result["summary"], result["verdicts"] = summary.of_runs(result["runs"])  # the JSON's nulls were infinities
  print(write(result, args.out_dir))


if __name__ == "__main__":
  main()
