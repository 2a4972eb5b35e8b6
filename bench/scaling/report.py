"""results/scaling.md from a run's JSON: the tables, and the findings of report_template.md with
their figures filled from the same JSON (a finding whose figures the run lacks is left out)."""
import json
import os

from bench.scaling.settings import KB, MB, PLAN_REPEATS, TRAIN_BATCH

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report_template.md")
COMM_TOPOLOGIES = ("1x4", "2x2", "4x1")
TRAIN_TOPOLOGIES = (("1x1", 1), ("2x1", 2), ("2x2", 4))
LEVEL_LABELS = {"pair": "intra: hier's reduce-scatter + allgather", "copy": "hier's local pass over a bucket",
                "flat_call": "flat's call over every rank"}


def fill(template: str, values: dict) -> str:
  """The template with its {name} placeholders from values; a line naming a value not there is left
  out, and so is a blank line that would double another."""
  out = []
  for line in template.splitlines():
    try:
      text = line.format_map(values)
    except KeyError:
      continue
    if text or (out and out[-1]):
      out.append(text)
  return "\n".join(out).strip() + "\n"


def scaling(n: int, s_1: float, s_n: float) -> tuple[float, float]:
  """(e, T) of Jia et al.: e = S_N / S_1 (images/sec per rank), T = N * S_1 * e, the job's images/sec."""
  e = s_n / s_1
  return e, n * s_1 * e


def comm_rows(report):
  for name in COMM_TOPOLOGIES:
    for row in (report["launches"].get(name) or {}).get("comm", []):
      yield name, row


def hybrid_gaps(report) -> list[tuple[str, str, float]]:
  """(topology, case, hybrid / min(flat, hier)) for every measured case."""
  by = {}
  for topo, row in comm_rows(report):
    by.setdefault((topo, row["case"]), {})[row["algorithm"]] = row["measured_s"]
  return [(t, c, a["hybrid"] / min(a["flat"], a["hier"])) for (t, c), a in by.items()
          if {"hybrid", "flat", "hier"} <= a.keys()]


def training_table(report):
  """Rows (model, N, variant, step_s, S, e, T, comm share): e = S_N / S_1, S_1 the same model's at N=1."""
  base = {r["model"]: r["images_per_sec_per_rank"]
          for r in (report["launches"].get("1x1") or {}).get("training", [])}
  rows = []
  for name, n in TRAIN_TOPOLOGIES:
    launch = report["launches"].get(name) or {}
    none = {r["model"]: r["step_s"] for r in launch.get("training", []) if r["variant"] == "none"}
    for r in launch.get("training", []):
      if n > 1 and r["variant"] == "none":
        continue
      s = r["images_per_sec_per_rank"]
      e, t = scaling(n, base[r["model"]], s) if r["model"] in base else (float("nan"), float("nan"))
      rows.append((r["model"], n, r["variant"] if n > 1 else "-", r["step_s"], s, e, t,
                   1 - none.get(r["model"], r["step_s"]) / r["step_s"]))
  return rows


def calibration_range(report) -> str:
  """'64 KB-16 MB': the smallest and largest calibration size of the run."""
  sizes = [p[0] for launch in report["launches"].values() if launch and "calibration" in launch
           for level in ("intra", "inter") for p in launch["calibration"][level]["points"]]
  if not sizes:
    return "no sizes"
  fmt = lambda n: f"{n / MB:g} MB" if n >= MB else f"{n / KB:g} KB"
  return f"{fmt(min(sizes))}-{fmt(max(sizes))}"


def calibration_table(report) -> str:
  lines = ["| topology | level | group | alpha (us per call) | bandwidth (GB/s) | per |",
           "|---|---|---|---|---|---|"]
  for name in COMM_TOPOLOGIES:
    launch = report["launches"].get(name)
    for level in ("intra", "pair", "copy", "inter", "flat_call") if launch else ():
      c = launch["calibration"].get(level)
      if c and c["points"]:
        group = {"inter": launch["nodes"], "flat_call": launch["ranks"]}.get(level, launch["local_size"])
        alpha = f"{c['alpha_us']:.0f}" if c.get("alpha_us") is not None else "-"
        lines.append(f"| {name} | {LEVEL_LABELS.get(level, level)} | {group} ranks | {alpha} | "
                     f"{c['gbps'] or float('inf'):.3f} | {c.get('per', 'rank')} |")
  return "\n".join(lines)


def comm_table(report) -> str:
  lines = ["| topology | case | MB | algorithm | measured ms | predicted ms | pred/meas | link MB sent per host | "
           "model's link MB per host | hybrid's plan |", "|---|---|---|---|---|---|---|---|---|---|"]
  for topo, r in comm_rows(report):
    plan = " ".join(r["plan"]) if r["algorithm"] == "hybrid" else ""
    model_mb = r.get("model_link_mb_per_host", float("nan"))
    lines.append(f"| {topo} | {r['case']} | {r['bytes'] / MB:.1f} | {r['algorithm']} | "
                 f"{r['measured_s'] * 1e3:.0f} | {r['predicted_s'] * 1e3:.0f} | "
                 f"{r['predicted_s'] / r['measured_s']:.2f} | {r['link_mb_per_host']:.1f} | {model_mb:.1f} | "
                 f"{plan} |")
  return "\n".join(lines)


def training_text(report) -> str:
  lines = ["| model | N | algorithm | step s | S img/s/rank | e | T img/s | comm share |",
           "|---|---|---|---|---|---|---|---|"]
  lines += [f"| {model} | {n} | {variant} | {step:.3f} | {s:.1f} | {e:.2f} | {t:.1f} | {share:.2f} |"
            for model, n, variant, step, s, e, t, share in training_table(report)]
  return "\n".join(lines)


def simulation_tables(report) -> str:
  blocks = []
  for key, sim in report["simulation"].items():
    lines = [f"Parameters ({key}): {json.dumps(sim['params'])}", "",
             "| model | ranks | ring per tensor ms | ring ms | hier ms | hybrid ms | ring / hybrid | "
             "ring per tensor / hybrid |", "|---|---|---|---|---|---|---|---|"]
    for model, per in sim["models"].items():
      lines += [f"| {model} | {p} | {t['ring_per_tensor'] * 1e3:.0f} | {t['ring'] * 1e3:.1f} | "
                f"{t['hier'] * 1e3:.1f} | {t['hybrid'] * 1e3:.1f} | {t['ring'] / t['hybrid']:.1f} | "
                f"{t['ring_per_tensor'] / t['hybrid']:.1f} |" for p, t in per.items()]
    blocks.append("\n".join(lines))
  return "\n\n".join(blocks)


def setup_values(report) -> dict:
  """The template's figures of the setup, the calibration and the rows."""
  setup, launches = report["setup"], report["launches"]
  values = {k: setup[k] for k in ("date", "cores", "rate", "threshold_mb", "horovod_fusion_mb", "repeats",
                                  "train_steps")}
  if setup.get("malloc_env"):
    values["malloc_env"] = " ".join(f"{k}={v}" for k, v in setup["malloc_env"].items())
  training = [l for l in launches.values() if l and l.get("training")]
  if setup.get("quick"):
    models = sorted({r["model"] for l in training for r in l["training"]})
    values.update(quick="", train_models=", ".join(models))
  if any(l and "plan_calibration" in l for l in launches.values()):
    values["plan_repeats"] = setup.get("plan_repeats", PLAN_REPEATS)  # runs before it was recorded: the default
  ratios = [r["predicted_s"] / r["measured_s"] for _, r in comm_rows(report)]
  values.update(calibration_range=calibration_range(report), calibration_table=calibration_table(report),
                comm_table=comm_table(report), rows=len(ratios), within=sum(abs(x - 1) <= 0.25 for x in ratios))
  gaps = hybrid_gaps(report)
  if gaps:
    topology, case, gap = max(gaps, key=lambda g: g[2])
    values.update(worst_gap=gap, worst_topology=topology, worst_case=case, gaps=len(gaps),
                  gaps_within=sum(g[2] <= 1.10 for g in gaps))
  else:
    values["no_gaps"] = ""
  values.update(train_batch=next((r["batch_per_rank"] for l in training for r in l["training"]), TRAIN_BATCH),
                training_table=training_text(report), simulation_tables=simulation_tables(report))
  # Which step the training rows timed: train.py's (the worker records it) or, in older runs, the bench's own.
  if training:
    values["train_step" if all("train_step" in l for l in training) else "own_step"] = ""
  return values


def finding_values(report) -> dict:
  """The template's figures of the findings: the 2x2 calibration and ResNet-50 rows, the simulation at 1,024."""
  values = {}
  two = report["launches"].get("2x2") or {}
  cal = two.get("calibration") or {}
  if (cal.get("inter") or {}).get("gbps"):
    values.update(inter_mb_s=cal["inter"]["gbps"] * 1e3, inter_mbit_s=cal["inter"]["gbps"] * 8e3)
  if (cal.get("intra") or {}).get("alpha_us"):
    values["intra_alpha_ms"] = cal["intra"]["alpha_us"] / 1e3
  link = {r["algorithm"]: r for r in two.get("comm", []) if r["case"] == "resnet50"}
  if {"flat", "hier"} <= link.keys():
    values.update(flat_link_mb=link["flat"]["link_mb_per_host"], hier_link_mb=link["hier"]["link_mb_per_host"],
                  resnet50_mb=link["flat"]["bytes"] / MB)
    if "model_link_mb_per_host" in link["flat"]:
      values.update(flat_model_link_mb=link["flat"]["model_link_mb_per_host"],
                    hier_model_link_mb=link["hier"]["model_link_mb_per_host"])
  sim = report["simulation"]["p40"]
  for model, per in sim["models"].items():
    at = per.get(1024, per.get("1024"))  # int keys as computed, str keys as read back from JSON
    values[f"{model}_ring_1024"] = at["ring"] / at["hybrid"]
    values[f"{model}_per_tensor_1024"] = at["ring_per_tensor"] / at["hybrid"]
  for model, count in sim.get("tensors", {}).items():
    values[f"{model}_tensors"] = count
  return values


def write(report, out_dir: str) -> str:
  """scaling.md in out_dir from the report dict; returns (and prints) the markdown. The two PNGs
  are bench.scaling.plots.write's (which reads this module's tables)."""
  with open(TEMPLATE) as fh:
    text = fill(fh.read(), {**setup_values(report), **finding_values(report)})
  with open(os.path.join(out_dir, "scaling.md"), "w") as fh:
    fh.write(text)
  print(text)
  return text
