"""Communication benchmark in the style of nccl-tests: `make bench-comm`.

  python -m bench.allreduce            # the driver: every launch below, then the JSON and the plot
  horovodrun -np 4 python -m bench.allreduce --worker --ranks_per_node=2 --out=F   # one launch

Per launch (ranks, ranks per node, controller MPI or Gloo), rank 0 records
(in this order, so that a launch stopped at its time share keeps the gradients):
  gradients  one full exchange of the ResNet-50 (161 tensors, 25.6 M) and
             AlexNet (16, 61 M) gradient shapes per algorithm: horovod, flat,
             hier, hybrid, flat with fp16 compression, and the mpi4py floor
             (one Allreduce of all gradients in one buffer);
  sweep      one buffer of 4 KB ... 256 MB, per algorithm: horovod (hvd.allreduce),
             hier (comm/hierarchical.py), and the engine's floor: mpi4py's
             Allreduce of the same numpy buffer (MPI launches only);
  overlap    (-np 2 MPI only) how much exchange time train.py's own training
             step (training/step.py) hides.
Times are medians over repeats after a warm-up; algorithms take turns within
each repeat so that load from other processes hits them alike. algbw =
bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests' allreduce convention).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
from statistics import median

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.harness.train_step import NOTE  # noqa: E402
from progress import emit  # noqa: E402

KB, MB = 1 << 10, 1 << 20


def say(line: str) -> None:
  """A worker's line on stdout in one write (mpirun tags each write; print splits the newline)."""
  emit(line, sys.stdout)
SIZES = [4 * KB, 64 * KB, 1 * MB, 16 * MB, 256 * MB]
# (np, ranks per node, gloo): ranks 2 and 4 (4 as 2 nodes of 2), MPI and Gloo.
# The 4-rank MPI launch first: it carries the performance target.
LAUNCHES = [(4, 2, False), (2, 0, True), (2, 0, False), (4, 2, True)]
BUDGET_S = 600  # the whole benchmark; a launch past its share is stopped, keeping what it wrote
SHARE = {(4, 2, False): 0.35, (2, 0, True): 0.2, (2, 0, False): 0.25, (4, 2, True): 0.2}
THRESHOLD_MB = 32.0


def timed_rounds(fns: dict, repeats: int, hvd) -> dict:
  """Median seconds per name: one warm-up each, then `repeats` rounds taking turns.

  A barrier-like small allreduce before each timing starts every rank together.
  """
  import tensorflow as tf
  sync = tf.zeros([1])
  for fn in fns.values():
    fn()
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      hvd.allreduce(sync, name="bench_sync").numpy()
      start = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - start)
  return {name: median(t) for name, t in times.items()}


def record(out, kind, algorithm, args, world, nbytes, seconds, **extra):
  algbw = nbytes / seconds / 1e9
  row = {"kind": kind, "algorithm": algorithm, "controller": "gloo" if args.gloo else "mpi",
         "ranks": world.size, "ranks_per_node": world.local_size, "bytes": int(nbytes),
         "seconds": seconds, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (world.size - 1) / world.size, **extra}
  out.append(row)
  if world.is_chief:
    with open(args.out, "w") as fh:  # after every figure: a stopped launch keeps what it measured
      json.dump(out, fh)
    label = extra.get("gradient_set") or f"{nbytes / MB:9.3f} MB"
    say(f"{row['controller']} np{world.size} rpn{world.local_size} {kind:9s} {label:>12s} {algorithm:14s} "
        f"{seconds * 1e3:9.2f} ms  algbw {algbw:7.3f}  busbw {row['busbw_GBps']:7.3f} GB/s")


def worker(args):
  import horovod.tensorflow as hvd
  import numpy as np
  import tensorflow as tf

  import comm
  from models import gradient_sets
  from comm.exchange import make_gradient_exchange
  from flags.config import CommConfig

  world = comm.init(hvd, args.ranks_per_node)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  mpi = None
  if not args.gloo:
    from mpi4py import MPI
    mpi = MPI.COMM_WORLD
  out = []
  exchanges = {name: make_gradient_exchange(hvd, config, world) for name, config in {
      "horovod": CommConfig("horovod"),
      "flat": CommConfig("flat", THRESHOLD_MB),
      "hier": CommConfig("hier", THRESHOLD_MB),
      "hybrid": CommConfig("hybrid", THRESHOLD_MB),
      "flat+fp16": CommConfig("flat", THRESHOLD_MB, compression="fp16"),
      # One bucket per gradient set: one grouped allreduce of every gradient.
      "flat 128MB": CommConfig("flat", 128.0),
  }.items()}
  if world.is_chief:
    m = exchanges["hybrid"].model
    say(f"hybrid cost model (probe): in node {m.intra.alpha * 1e6:.0f} us + {m.intra.gbps:.2f} GB/s, "
        f"across nodes {m.inter.alpha * 1e6:.0f} us + {m.inter.gbps:.2f} GB/s")

  def floor(buffers):
    results = [np.empty_like(b) for b in buffers]
    return lambda: [mpi.Allreduce(b, r) for b, r in zip(buffers, results)]

  if "gradients" in args.modes:
    for model in ("resnet50", "alexnet"):
      shapes = hvd.broadcast_object(gradient_sets.shapes(model) if world.is_chief else None)
      grads = [tf.ones(s, tf.float32) for s in shapes]
      nbytes = 4 * sum(int(np.prod(s)) for s in shapes)
      fns = {name: (lambda f=tf.function(e): [g.numpy() for g in f(grads)]) for name, e in exchanges.items()}
      if mpi:
        fns["mpi4py"] = floor([np.ones(nbytes // 4, np.float32)])
      results = timed_rounds(fns, 5, hvd)
      for name, seconds in results.items():
        plan = exchanges[name].plan if name in exchanges else []
        record(out, "gradients", name, args, world, nbytes, seconds, gradient_set=model,
               buckets=len(plan), plan=[p["algorithm"] for p in plan])
      best = min(("flat", "hier", "hybrid", "flat 128MB"), key=results.get)
      if world.is_chief:
        say(f"RATIO {model} np{world.size} rpn{world.local_size} {'gloo' if args.gloo else 'mpi'}: "
            f"horovod / {best} = {results['horovod'] / results[best]:.3f} "
            f"(fp32; flat+fp16: {results['horovod'] / results['flat+fp16']:.3f})")
      del grads

  if "sweep" in args.modes:
    for nbytes in SIZES:
      x = tf.ones([nbytes // 4], tf.float32)
      fns = {name: (lambda f=tf.function(exchanges[name]): f([x])[0].numpy()) for name in ("horovod", "hier")}
      if mpi:
        fns["mpi4py"] = floor([np.ones(nbytes // 4, np.float32)])
      repeats = 5 if nbytes <= 16 * MB else 1
      for name, seconds in timed_rounds(fns, repeats, hvd).items():
        record(out, "sweep", name, args, world, nbytes, seconds)

  if "overlap" in args.modes:
    overlap(args, world, hvd, exchanges)


def held(grads):
  """The gradients, each released only once all of them exist: an exchange of these starts after backward."""
  import tensorflow as tf
  with tf.control_dependencies(grads):
    return [tf.identity(g) for g in grads]


def overlap(args, world, hvd, exchanges):
  """How much of the exchange a training step hides (Goyal et al.: allreduce as gradients appear).

  ResNet-50 at 64x64, batch 4 per rank (so compute is short enough to time
  on a busy CPU; the gradients are the full 25.6 M). The step is train.py's own
  (training/step.py, with train.py's default optimizer), so every time includes
  the update. Times: compute (the step with an identity exchange), exchange
  alone, the step with the exchange free to start per bucket ("as ready"), and
  the step with every collective held until all gradients exist ("after
  backward": the same step, its exchange given held(grads)).
  hidden = (compute + exchange - step) / exchange.
  """
  import keras
  import tensorflow as tf

  from bench.harness.train_step import default_optimizer
  from comm.exchange import make_gradient_exchange
  from flags.config import CommConfig
  from models import build_model
  from optimizers import precision
  from training.step import make_train_step

  keras.utils.set_random_seed(0)
  net = build_model("resnet50", 1000, (64, 64, 3))
  optimizer = default_optimizer(net)
  loss_scale = precision.for_precision("fp32")
  images = tf.random.uniform([4, 64, 64, 3])
  labels = tf.zeros([4], tf.int32)
  lr = tf.constant(0.001)  # noise images: a small LR keeps the timed steps finite
  if world.is_chief:
    say(f"OVERLAP step: {NOTE}")

  def step_fn(exchange):
    step = make_train_step(net, optimizer, exchange, loss_scale, num_classes=1000)
    return lambda: step(images, labels, lr)[0].numpy()  # the update runs before the step returns

  rows = []
  grads = [tf.ones(v.shape) for v in net.trainable_variables]
  for name, config in [("horovod", CommConfig("horovod")), ("flat 4MB", CommConfig("flat", 4.0)),
                       ("flat 32MB", CommConfig("flat", 32.0))]:
    exchange = make_gradient_exchange(hvd, config, world)
    alone = tf.function(exchange)
    t = timed_rounds({"compute": step_fn(lambda g: g), "exchange": lambda: [g.numpy() for g in alone(grads)],
                      "as ready": step_fn(exchange), "after backward": step_fn(lambda g, e=exchange: e(held(g)))},
                     3, hvd)
    for variant in ("as ready", "after backward"):
      hidden = (t["compute"] + t["exchange"] - t[variant]) / t["exchange"]
      row = {"kind": "overlap", "algorithm": name, "variant": variant, "controller": "gloo" if args.gloo else "mpi",
             "ranks": world.size, "ranks_per_node": world.local_size, "compute_s": t["compute"],
             "exchange_s": t["exchange"], "step_s": t[variant], "hidden_fraction": hidden,
             "train_step": "training/step.py"}
      rows.append(row)
      if world.is_chief:
        with open(args.out + ".overlap", "w") as fh:
          json.dump(rows, fh)
        say(f"OVERLAP np{world.size} {name:9s} {variant:14s}: compute {t['compute'] * 1e3:.0f} ms, exchange "
            f"{t['exchange'] * 1e3:.0f} ms, step {t[variant] * 1e3:.0f} ms, hidden {hidden:.0%}")
  return rows


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


def main():
  parser = argparse.ArgumentParser(prog="python -m bench.allreduce", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--worker", action="store_true", help="run as one rank of a launch")
  parser.add_argument("--ranks_per_node", type=int, default=0)
  parser.add_argument("--gloo", action="store_true", help="(worker) this launch runs on Gloo: no mpi4py floor")
  parser.add_argument("--modes", default="sweep,gradients", help="(worker, or driver with --only) sweep,gradients,overlap")
  parser.add_argument("--only", default="", help="(driver) rerun one launch NP,RANKS_PER_NODE,GLOO "
                      "(e.g. 4,2,0) for --modes and replace those records in results/bench_comm.json")
  parser.add_argument("--budget_s", type=float, default=0, help="(driver, with --only) its time limit")
  parser.add_argument("--out", default="", help="(worker) the file rank 0 writes its records to")
  parser.add_argument("--out_dir", default=os.path.join(REPO, "results"),
                      help="(driver) where bench_comm.json and bench_comm.png go; with --only, the records "
                      "kept are read from there")
  args = parser.parse_args()
  worker(args) if args.worker else driver(args)


if __name__ == "__main__":
  main()
