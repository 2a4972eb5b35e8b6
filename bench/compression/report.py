"""results/compression.{md,png} from results/compression.json alone, so the report can be
rewritten without measuring again: `python -m bench.compression.report [--out_dir=DIR]`.

Rows, targets and statistics are pure functions of the JSON (tests/bench/test_compression.py); the
issue's targets are targets.py's, the accuracy and trust sections tables.py's.
"""
import argparse
import json
import os

from bench.compression import variants as V
from bench.compression.figure import plot
from bench.compression.tables import accuracy_stats, accuracy_text, fmt, trust_text
from bench.compression.targets import MODEL_TOLERANCE, model_parts, targets, targets_table

MB = 1 << 20
RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results")


def launches(result: dict) -> list[dict]:
  """The speed launches of several hosts that finished, slowest rate first, then by hosts."""
  found = [l for name, l in result.get("speed", {}).get("launches", {}).items() if l and name != "1x1"]
  return sorted(found, key=lambda l: (V.rate_gbps(l["rate"]), l["hosts"]))


def failed(result: dict) -> list[str]:
  """The speed launches that ended without a result (their rows are missing from the tables)."""
  return sorted(name for name, l in result.get("speed", {}).get("launches", {}).items() if not l)


def baseline_step_s(result: dict) -> float | None:
  """S_1's step: one rank alone on the machine (the 1x1 launch's local step)."""
  base = result.get("speed", {}).get("launches", {}).get("1x1")
  return base["local_step_s"] if base else None


def speed_rows(result: dict) -> list[dict]:
  """Per launch and variant, the report's row: MB on the link per step (counted), its cut against
  none's, encode, exchange and step ms, e = S_N / S_1 (= step_1 / step_N at one batch per rank),
  the model's predicted exchange ms and measured / predicted; the prediction's link part and the
  encode's share of it, and the link part measured (exchange less encode) over the predicted one."""
  base = baseline_step_s(result)
  rows = []
  for launch in launches(result):
    by = {r["variant"]: r for r in launch["rows"]}
    none = by.get("none")
    for r in launch["rows"]:
      chose = r["summary"].get("chose") if r["variant"] == "auto" else None
      # The prediction's two parts (worker.measure): the link's (the buckets priced) and the encode's.
      link, encode = r.get("predicted_collectives_s"), r.get("predicted_encode_s")
      # The link part measured: the exchange less PowerSGD's own work, timed apart (all of it uncompressed).
      link_ms = (r["exchange_s"] - (r["encode_s"] or 0.0)) * 1e3
      rows.append({"rate": launch["rate"], "hosts": launch["hosts"], "variant": r["variant"], "chose": chose,
                   # auto's rows say "auto" whatever it chose: those that chose PowerSGD ran it
                   "compressed": r["compression"] == "powersgd" or chose == "powersgd",
                   "mb_per_step": r["step_link_bytes"] / MB, "payload_mb": r["payload_bytes"] / MB,
                   "cut": none["step_link_bytes"] / r["step_link_bytes"] if none and r["step_link_bytes"] else None,
                   "encode_ms": r["encode_s"] * 1e3 if r["encode_s"] is not None else None,
                   "exchange_ms": r["exchange_s"] * 1e3, "step_ms": r["step_s"] * 1e3,
                   "local_step_ms": launch["local_step_s"] * 1e3,
                   "efficiency": base / r["step_s"] if base else None,
                   "predicted_ms": r["predicted_exchange_s"] * 1e3,
                   "ratio": r["exchange_s"] / r["predicted_exchange_s"] if r["predicted_exchange_s"] else None,
                   "predicted_link_ms": link * 1e3 if link is not None else None,
                   "encode_share": encode / r["predicted_exchange_s"] if encode is not None and r["predicted_exchange_s"]
                   else None, "link_ms": link_ms, "link_ratio": link_ms / (link * 1e3) if link else None})
  return rows


def speed_table(rows: list[dict]) -> str:
  lines = ["| link | hosts | compression | MB/step on the link | payload MB | cut | encode ms | exchange ms | "
           "predicted ms | measured / predicted | step ms | e |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    name = f"auto ({r['chose']})" if r["chose"] else r["variant"]
    lines.append(f"| {r['rate']} | {r['hosts']} | {name} | {r['mb_per_step']:.2f} | {r['payload_mb']:.2f} | "
                 f"{fmt(r['cut'], '.1f')}x | "
                 f"{fmt(r['encode_ms'], '.0f')} | {r['exchange_ms']:.0f} | {r['predicted_ms']:.0f} | "
                 f"{fmt(r['ratio'], '.2f')} | {r['step_ms']:.0f} | {fmt(r['efficiency'], '.2f')} |")
  return "\n".join(lines)


NOT_SHOWN = """- **A real network.** The links are network namespaces on one 2-core machine: their TCP runs on the
  same cores as the ranks (bench-scaling measured ~556 Mbit/s at 1gbit), so at 2 and 10 Gbit/s the
  'link' is the CPU, and every emulated host shares those cores: the encode and the collectives
  compete for them, which a real cluster's hosts would not.
- **ResNet-50 as trained.** The speed rows train ResNet-50 on 64x64 noise at 16 images per rank: its
  weights, so its 97.5 MB a step, are those of ResNet-50 at 224, but its compute is ~1/12 of it, so
  the exchange's share of a step (and so what compression can win) is larger here than in real runs.
- **Accuracy of ResNet-50 under compression.** The accuracy rows are ResNet-8 on Fashion-MNIST;
  PowerSGD at rank 4 has lost 3.5 points on ImageNet at batch 8K (epfml/powersgd#1), which a small
  model on a small set cannot show. The seeds column says how many runs stand behind a row: two bound no
  difference smaller than their spread, one bounds none.
- **A speed-up in time to accuracy.** The accuracy runs are 2 ranks on this host over shared memory:
  no link limits them, so their times show PowerSGD's encode cost, not its savings.
- **That the trust ratios cause the accuracy gap.** The trust rows are what LARS computes at the runs'
  own weights and state; whether a ratio taken on the uncompressed gradient (or frozen at the start of
  compression) would close the gap needs runs that were not made.
- **The link model under compression.** A compressed row's prediction is mostly the encode timed at
  start-up, and its link part is smaller than what the exchange less the encode can resolve (the
  speed section's second table): the cost model's link part is tested by the uncompressed rows.
- **More hosts, other algorithms.** 2 and 4 hosts of one rank, flat's buckets only (hier, hybrid and
  Horovod's own fusion not timed with compression), --powersgd_wire=fp32 only, no overlap of the
  exchange with backprop beyond what TensorFlow's graph gives.
"""


def report(result: dict) -> str:
  """compression.md."""
  rows = speed_rows(result)
  acc = result.get("accuracy", {})
  stats = accuracy_stats(acc.get("runs", []))
  speed_setup, acc_setup = result.get("speed", {}).get("setup", {}), acc.get("setup", {})
  smoke = ("**A smoke run: a few steps, one rate, numbers meaningless.**\n\n"
           if speed_setup.get("smoke") or acc_setup.get("quick") else "")
  base = baseline_step_s(result)
  commands = "\n".join(f"# {r['name']}, seed {r['seed']}\n{r['command']}"
                       for r in acc.get("runs", []) if r["seed"] == min(x["seed"] for x in acc["runs"]))
  setting = acc_setup.get("setting", {})
  return f"""# Gradient compression: PowerSGD, fp16 and auto (`make bench-compression`)

{smoke}## Speed: ResNet-50 on emulated hosts

ResNet-50 (synthetic 64x64 images, {speed_setup.get('batch_per_rank', '-')} per rank; its gradients are ResNet-50's
97.5 MB at any image size) on 2 and 4 emulated hosts of one rank each (network namespaces, links
tc-limited each way; `scripts/cluster/cluster.sh`), train.py's own step (training/step.py) with
each compression as `--compression` sets it up, `--allreduce={V.ALLREDUCE}` ({V.THRESHOLD_MB:g} MB buckets),
every timed step compressing (`--compression_start=0`). Medians of {speed_setup.get('steps', '-')} timings, each
the slowest rank's. **MB/step**: bytes each host sent on its link during a step, counted by the kernel
(headers and Horovod's negotiation included), mean over hosts (MB = 2^20 bytes); **payload**: what one
rank hands the allreduces, from the exchange's plan (computed); **cut**: none's counted MB over the row's.
**encode**: PowerSGD's own work alone (allreduces left out); **exchange**: the exchange alone on one
step's gradients, encode included; **predicted**: the exchange's own buckets (both calls) priced by
the cost model the launch probed (`comm/probe.measure_flat`, what `--compression=auto` uses) plus
PowerSGD's encode as auto measures it. **e** = S_N / S_1 with S_1 one rank alone on the machine
({fmt(base and base * 1e3, '.0f')} ms a step). auto's choice in brackets.

{speed_table(rows) if rows else 'Not measured.'}
{f"{chr(10)}Launches that failed (no rows): {', '.join(failed(result))}.{chr(10)}" if failed(result) else ""}
### The prediction's two parts

A compressed row's prediction is PowerSGD's encode as auto times it at start-up (`predicted_encode_s`
in the JSON) plus the link part, the cost model pricing the exchange's buckets (`predicted_collectives_s`).
The link part measured is the row's exchange less its encode: two medians of {speed_setup.get('steps', '-')} timings each,
taken apart.

{model_parts(rows) if rows else 'Not measured.'}

## Accuracy: Fashion-MNIST, 2 ranks, batch 1,024 with LARS

{accuracy_text(setting, acc_setup, stats)}

![step time against the link rate; predicted against measured exchange; the compressed rows' link part alone; held-out top-1](compression.png)

## LARS's trust ratios under PowerSGD

{trust_text(result.get("trust", {}))}

## Targets (issue 25)

{targets_table(targets(rows, stats))}

## What this does not show

{NOT_SHOWN}
## Commands

```bash
make bench-compression                                       # both parts
python -m bench.compression --only=speed --rates=500mbit --hosts=2
python -m bench.compression --only=accuracy --seeds=0 --reuse
python -m bench.compression --only=trust --seeds=0,1                # after the accuracy part
python -m bench.compression.report                           # this report again from the JSON
{commands}
```
"""


def write(result: dict, out_dir: str) -> str:
  """OUT_DIR/compression.{json,md,png}; the markdown returned."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "compression.json"), "w") as fh:
    json.dump(result, fh, indent=1)
  text = report(result)
  with open(os.path.join(out_dir, "compression.md"), "w") as fh:
    fh.write(text)
  plot(result, speed_rows(result), MODEL_TOLERANCE, os.path.join(out_dir, "compression.png"))
  return text


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m bench.compression.report", description=__doc__)
  parser.add_argument("--out_dir", default=RESULTS, help="where compression.json is")
  args = parser.parse_args(argv)
  with open(os.path.join(args.out_dir, "compression.json")) as fh:
    print(write(json.load(fh), args.out_dir))


if __name__ == "__main__":
  main()
