"""make bench-comm's driver: each launch under horovodrun in a session of its own, stopped at its share
of the time budget (keeping what it wrote), its records gathered into results/bench_comm.json and
drawn in results/bench_comm.png."""
import json
import os
import signal
import subprocess
import sys
import time

from bench.allreduce.worker import THRESHOLD_MB
from bench.harness import REPO
from bench.harness.train_step import NOTE

# (np, ranks per node, gloo): ranks 2 and 4 (4 as 2 nodes of 2), MPI and Gloo.
# The 4-rank MPI launch first: it carries the performance target.
LAUNCHES = [(4, 2, False), (2, 0, True), (2, 0, False), (4, 2, True)]
BUDGET_S = 600  # the whole benchmark; a launch past its share is stopped, keeping what it wrote
SHARE = {(4, 2, False): 0.35, (2, 0, True): 0.2, (2, 0, False): 0.25, (4, 2, True): 0.2}


def plot(rows, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
  for (ctrl, np_, rpn, alg) in sorted({(r["controller"], r["ranks"], r["ranks_per_node"], r["algorithm"])
                                       for r in rows if r["kind"] == "sweep"}):
    pts = sorted((r["bytes"], r["busbw_GBps"]) for r in rows if r["kind"] == "sweep" and
                 (r["controller"], r["ranks"], r["ranks_per_node"], r["algorithm"]) == (ctrl, np_, rpn, alg))
    left.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linestyle="-" if ctrl == "mpi" else "--",
              label=f"{ctrl} np{np_} rpn{rpn} {alg}")
  left.set_xscale("log", base=2)
  left.set_xlabel("buffer bytes (fp32)")
  left.set_ylabel("busbw GB/s (median)")
  left.set_title("one allreduce: busbw = algbw * 2(n-1)/n")
  left.legend(fontsize=6)
  grads = [r for r in rows if r["kind"] == "gradients"]
  labels = sorted({(r["gradient_set"], r["controller"], r["ranks"]) for r in grads})
  algorithms = ["horovod", "flat", "hier", "hybrid", "flat+fp16", "flat 128MB", "mpi4py"]
  width = 0.8 / len(algorithms)
  for j, alg in enumerate(algorithms):
    ys = [next((r["seconds"] for r in grads if (r["gradient_set"], r["controller"], r["ranks"]) == lab
                and r["algorithm"] == alg), 0) for lab in labels]
    right.bar([i + j * width for i in range(len(labels))], ys, width, label=alg)
  right.set_xticks([i + 0.4 for i in range(len(labels))])
  right.set_xticklabels([f"{m}\n{c} np{n}" for m, c, n in labels], fontsize=7)
  right.set_ylabel("seconds per full exchange (median)")
  right.set_title("gradient sets, 32 MB buckets")
  right.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def saved_records(path: str) -> list[dict]:
  """The records of an earlier run written to path ([] when there is none)."""
  if not os.path.exists(path):
    return []
  with open(path) as fh:
    return json.load(fh)["records"]


def driver(args):
  os.makedirs(args.out_dir, exist_ok=True)
  json_path = os.path.join(args.out_dir, "bench_comm.json")
  env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
  rows, started = [], time.time()
  launches = LAUNCHES
  if args.only:
    launches = [tuple(int(x) for x in args.only.split(","))]
    # Replace that launch's records of those modes, keep the rest of the earlier run.
    rows = [r for r in saved_records(json_path) if r["kind"] not in args.modes or
            (r["ranks"], r["ranks_per_node"] if r["ranks_per_node"] != r["ranks"] else 0,
             int(r["controller"] == "gloo")) != launches[0]]
  for np_, rpn, gloo in launches:
    gloo = bool(gloo)
    part = os.path.join(args.out_dir, f".bench_comm-{np_}-{rpn}-{int(gloo)}.json")
    modes = args.modes if args.only else "sweep,gradients" + (",overlap" if (np_, gloo) == (2, False) else "")
    cmd = ["horovodrun", "-np", str(np_), "-H", f"localhost:{np_}", *(["--gloo"] if gloo else []),
           sys.executable, "-m", "bench.allreduce", "--worker", f"--ranks_per_node={rpn}",
           f"--modes={modes}", f"--out={part}"] + (["--gloo"] if gloo else [])
    print(f"== {' '.join(cmd[:6])} ... --ranks_per_node={rpn} --modes={modes}", flush=True)
    timeout = args.budget_s or BUDGET_S * SHARE[(np_, rpn, gloo)]
    with open(part + ".log", "w+") as log:
      proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
      try:
        proc.wait(timeout=timeout)
      except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # horovodrun, mpirun and every rank
        proc.wait()
        print(f"   launch passed its {timeout:.0f} s and was stopped; what it measured is kept", flush=True)
      log.seek(0)
      for line in log:
        text = line.split(">:", 1)[-1].rstrip()
        if "<stdout>" in line and text:
          print(text, flush=True)
    os.remove(part + ".log") if os.path.exists(part + ".log") else None
    for path in (part, part + ".overlap"):
      if os.path.exists(path):
        with open(path) as fh:
          rows += json.load(fh)
        os.remove(path)
  overlap = [r for r in rows if r["kind"] == "overlap"]
  with open(json_path, "w") as fh:
    json.dump({"machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end",
               "threshold_mb": THRESHOLD_MB, "wall_seconds": round(time.time() - started),
               # Only when every overlap record timed train.py's step (--only keeps older runs' records).
               **({"train_step": f"overlap: {NOTE}"} if overlap and all("train_step" in r for r in overlap)
                  else {}),
               "records": rows}, fh, indent=1)
  plot(rows, os.path.join(args.out_dir, "bench_comm.png"))
  print(f"wrote {json_path} ({len(rows)} records) and bench_comm.png beside it "
        f"in {time.time() - started:.0f} s", flush=True)
