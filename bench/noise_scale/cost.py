"""--cost: what --noise_scale costs a step, from alternating runs with it on and off (the same
flags otherwise), medians of each; results/noise_scale_cost.json and a paragraph for the report."""
import json
import os
import statistics

from bench.noise_scale import study
from bench.harness.train_runs import REPO, launch

STEPS = 300
ROUNDS = 3


def flags(model_dir: str, on: bool, batch: int) -> list[str]:
  return [f"--model_dir={model_dir}", "--dataset=fashion_mnist", f"--model={study.MODEL}",
          f"--global_batch_size={batch}", f"--accumulation_steps={batch // (study.RANKS * study.BN_BATCH)}",
          f"--max_steps={STEPS}", "--log_every=50", "--export=false", f"--noise_scale={str(on).lower()}"]


def measure(runs_dir: str, batch: int = 64, rounds: int = ROUNDS) -> dict:
  """ms per step with and without the measurement, alternating (on, off), (off, on), ...: the
  machine's drift falls on both alike. images_per_sec (train.py) leaves the first step out."""
  ms = {True: [], False: []}
  for i in range(rounds):
    for on in ((True, False) if i % 2 == 0 else (False, True)):
      model_dir = os.path.join(runs_dir, f"cost-{'on' if on else 'off'}-{i}")
      summary, _, _ = launch(study.RANKS, flags(os.path.relpath(model_dir, REPO), on, batch), model_dir, timeout=1800)
      ms[on].append(1000 * batch / summary["images_per_sec"])
      print(f"  noise scale {'on ' if on else 'off'}: {ms[on][-1]:.1f} ms a step", flush=True)
  on, off = statistics.median(ms[True]), statistics.median(ms[False])
  return {"batch": batch, "ranks": study.RANKS, "steps": STEPS, "rounds": rounds, "ms_on": ms[True], "ms_off": ms[False],
          "median_on": on, "median_off": off, "ratio": on / off, "text": text(batch, rounds, on, off)}


def text(batch: int, rounds: int, on: float, off: float) -> str:
  return (f"{rounds} runs each way, alternating, {STEPS} steps of ResNet-8 at global batch {batch} on {study.RANKS} "
          f"ranks (the study's smallest batch: the most steps, so the largest share): median {on:.1f} ms a step "
          f"with --noise_scale, {off:.1f} ms without ({100 * (on / off - 1):+.1f}%). The measurement is two squared "
          "norms of the gradients (a few flops a weight) and one 4-byte allreduce Horovod negotiates with the "
          "step's gradients; on a network with more weights a step's compute grows as fast as the norms do.")


def write(result: dict, out_dir: str) -> None:
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "noise_scale_cost.json"), "w") as fh:
    json.dump(result, fh, indent=1)


def read(out_dir: str) -> dict | None:
  path = os.path.join(out_dir, "noise_scale_cost.json")
  if not os.path.exists(path):
    return None
  with open(path) as fh:
    return json.load(fh)
