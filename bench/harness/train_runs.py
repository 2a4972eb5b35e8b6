"""train.py runs of the experiments on this machine: `make time-to-accuracy` (bench/time_to_accuracy/)
and `make noise-scale` (bench/noise_scale/).

A Setting is one configuration of the large-batch recipe and its train.py flags; launch() runs
train.py from scratch under horovodrun on this host; record() and reused() keep a finished run
beside its model_dir, so a program started again with --reuse reads it back instead of training;
shown() is a launch's command as the results keep it, relative to the repository.
"""
import dataclasses
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from bench.harness import REPO
from bench.harness.slurm_jobs import env

RECORD = "run.json"  # a finished run as the program recorded it, beside train.py's summary.json


@dataclasses.dataclass(frozen=True)
class Setting:
  """One configuration: global batch = ranks x per-rank batch x accumulation steps (images per update)."""
  name: str
  global_batch: int
  ranks: int
  base_lr: float  # per 256 images; train.py applies the linear scaling rule
  warmup_epochs: float
  optimizer: str = "sgd"
  precision: str = "fp32"
  schedule: str = "cosine"
  accumulation_steps: int = 1

  @property
  def per_rank_batch(self) -> int:
    """Images per rank per micro-batch (the BatchNorm batch)."""
    return self.global_batch // (self.ranks * self.accumulation_steps)

  @property
  def peak_lr(self) -> float:
    return self.base_lr * self.global_batch / 256

  def flags(self) -> list[str]:
    """The recipe's train.py flags; the program adds the run's length, seed, model_dir and the rest."""
    out = [f"--global_batch_size={self.global_batch}", f"--base_lr={self.base_lr:g}",
           f"--warmup_epochs={self.warmup_epochs:g}", f"--optimizer={self.optimizer}",
           f"--precision={self.precision}", f"--lr_schedule={self.schedule}"]
    if self.accumulation_steps > 1:
      out.append(f"--accumulation_steps={self.accumulation_steps}")
    return out


def cpu_model() -> str:
  """The CPU's model name, for a study's setup line (the machines here change CPU from run to run)."""
  try:
    with open("/proc/cpuinfo") as fh:
      return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
  except (OSError, StopIteration):
    return "unknown"


def command(ranks: int, flags: list[str]) -> list[str]:
  """horovodrun with `ranks` ranks on this host, running train.py with flags in this interpreter."""
  return ["horovodrun", "-np", str(ranks), "-H", f"localhost:{ranks}", sys.executable, "train.py", *flags]


def shown(cmd: list[str]) -> str:
  """A launch's command as a user types it at the repository's root, as the results keep it: this
  interpreter as `python`, and paths inside the repository relative to it (no directory of the
  machine it ran on)."""
  root = REPO + os.sep
  return " ".join("python" if a == sys.executable or a.endswith(("/python", "/python3")) else a.replace(root, "")
                  for a in cmd)


def launch(ranks: int, flags: list[str], model_dir: str, timeout: float,
           accept=(0,), fresh: bool = True) -> tuple[dict, str, float]:
  """train.py from scratch in model_dir (its flags must name it): (its summary.json, the
  launch's stderr, wall seconds of the launch). The output is kept in model_dir/std{out,err}.log.
  fresh False: the run in model_dir resumes (a run in phases, e.g. another batch each), and the
  output is added to the logs.

  The launch runs in a session of its own; past `timeout` seconds, or when this program is
  interrupted, that whole session (horovodrun, mpirun, every rank) is ended, by its id.
  RuntimeError with the stderr's tail on an exit status not in `accept` (e.g. add 3,
  training/outcome.DIVERGED, where a diverged run is a result).
  """
  if fresh:
    shutil.rmtree(model_dir, ignore_errors=True)  # never resume an older run
  os.makedirs(model_dir, exist_ok=True)
  cmd = command(ranks, flags)
  start = time.time()
  mode = "w+" if fresh else "a+"
  with open(os.path.join(model_dir, "stdout.log"), mode) as out, \
       open(os.path.join(model_dir, "stderr.log"), mode) as err:
    done = err.tell()  # this launch's output begins here
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                            text=True, start_new_session=True)
    try:
      proc.wait(timeout=timeout)
    except BaseException:  # the timeout, or Ctrl-C of this program: leave no rank behind
      _end_session(proc)
      raise
    err.seek(done)
    stderr = err.read()
  if proc.returncode not in accept:
    raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{stderr[-3000:]}")
  # summary.json, not the stdout line: horovodrun's tagged output can split a long line.
  with open(os.path.join(model_dir, "summary.json")) as fh:
    summary = json.load(fh)
  return summary, stderr, round(time.time() - start, 1)


def _end_session(proc: subprocess.Popen) -> None:
  """SIGTERM to the launch's session (every rank checkpoints and leaves), SIGKILL 30 s later."""
  for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
    try:
      os.killpg(proc.pid, sig)
    except ProcessLookupError:
      return
    try:
      proc.wait(timeout=wait)
      return
    except subprocess.TimeoutExpired:
      continue


def prepare_fashion_mnist(program: str) -> None:
  """Fashion-MNIST's records written before a study's first run (train.py's default --data_dir), so
  no run's clock pays for it; the program's name and the reason, and exit, when they cannot be."""
  from flags.config import ConfigError
  from input import fashion_mnist
  try:
    fashion_mnist.write(os.path.join(REPO, "data", "fashion_mnist"))
  except ConfigError as e:
    sys.exit(f"{program}: {e}")


def eval_curve(points, start: float, steps_per_epoch_: int) -> list[dict]:
  """Held-out evaluations from TensorBoard points (wall time s, step, tag, value), in step order:
  [{seconds since start, step, epoch, top1, top5}]; the last point of a step and tag wins."""
  by_step = {}
  for wall, step, tag, value in points:
    if tag in ("eval/top1", "eval/top5"):
      entry = by_step.setdefault(step, {"seconds": None, "step": step,
                                        "epoch": round(step / steps_per_epoch_, 3)})
      entry[tag[5:]] = value
      if tag == "eval/top1":
        entry["seconds"] = round(wall - start, 1)
  return [by_step[k] for k in sorted(by_step) if "top1" in by_step[k]]


def read_events(model_dir: str) -> list[tuple]:
  """Rank 0's TensorBoard scalars of a run: [(wall time s, step, tag, value)]."""
  import tensorflow as tf  # only to read the events
  from tensorflow.core.util import event_pb2
  points = []
  for path in sorted(glob.glob(os.path.join(model_dir, "tb", "events.out.tfevents.*"))):
    for data in tf.data.TFRecordDataset(path):
      event = event_pb2.Event.FromString(data.numpy())
      for v in event.summary.value:
        value = float(tf.make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
        points.append((event.wall_time, event.step, v.tag, value))
  return points


def save_top1_figure(fig, ax, path: str, xlabel: str, title: str, title_size: float) -> None:
  """Label, title and write a held-out top-1 figure of these experiments, then close it."""
  import matplotlib.pyplot as plt  # the callers chose the Agg backend
  ax.set_xlabel(xlabel)
  ax.set_ylabel("held-out top-1 (%)")
  ax.grid(alpha=0.3)
  ax.set_title(title, fontsize=title_size)
  ax.legend(loc="lower right", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def record(model_dir: str, run: dict) -> None:
  """Keep a finished run beside its model_dir, for reused() (whole or not at all: tmp file + rename;
  progress.write_json_atomic would load TensorFlow into the launching program)."""
  path = os.path.join(model_dir, RECORD)
  with open(f"{path}.tmp", "w") as fh:
    json.dump(run, fh)
  os.replace(f"{path}.tmp", path)


def reused(model_dir: str, key: dict) -> dict | None:
  """The run record() kept in model_dir if train.py finished there (summary.json) and the run
  has every key: value of key (its setting, seed, length, ...); None otherwise."""
  path = os.path.join(model_dir, RECORD)
  if not (os.path.exists(path) and os.path.exists(os.path.join(model_dir, "summary.json"))):
    return None
  with open(path) as fh:
    run = json.load(fh)
  return run if all(run.get(k) == v for k, v in key.items()) else None
