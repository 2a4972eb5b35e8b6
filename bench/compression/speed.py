"""The speed part's driver: per link rate an emulated cluster of max(--hosts) hosts (its own
name and subnet), one mpirun launch of worker.py per host count, the cluster down again (also when
a launch fails); and once a launch of one rank on one host for S_1, the images/s per rank that
scaling efficiency divides by (Jia et al.: e = S_N / S_1, as bench-scaling's training rows)."""
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.compression import variants as V
from bench.scaling.settings import MALLOC_ENV, REPO
from bench.harness.slurm_jobs import env as launch_env

CLUSTER, SUBNET = "imcc", "198.18.31"  # bench-scaling's is imcb on 198.18.30: both can exist
IFACE = f"{CLUSTER}0"
LAUNCH_TIMEOUT_S = 3600  # 6 variants of ResNet-50, each traced, on 4 ranks sharing 2 cores
BASELINE = "1x1"


def cluster(*args, check=True, timeout=120, capture=True):
  """scripts/cluster/cluster.sh ARGS for this benchmark's cluster, in the launches' environment (this
  venv, Open MPI as root, as the Makefile sets it for `python -m bench.compression` run without make)."""
  env = dict(launch_env(), CLUSTER=CLUSTER, CLUSTER_SUBNET=SUBNET)
  try:
    return subprocess.run(["bash", os.path.join(REPO, "scripts", "cluster", "cluster.sh"), *args], cwd=REPO,
                          env=env, check=check, timeout=timeout, capture_output=capture, text=True)
  except subprocess.TimeoutExpired:
    return subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout} s")


def launch_command(name: str, hosts: int, variants: list[str], steps: int, out: str) -> list[str]:
  """cluster.sh's `run` arguments for one launch: mpirun over `hosts` hosts of one rank each, every
  rank `python -m bench.compression --worker`. As bench-scaling's launches (bench/scaling/driver.py):
  mpirun, not horovodrun (its interface check fails in a namespace); ranks yield when idle (the
  emulated hosts share 2 cores); every malloc block kept on the heap."""
  host_list = ",".join(f"{CLUSTER}-h{i + 1}:1" for i in range(hosts))
  return ["run", "env", f"PYTHONPATH={REPO}", *(f"{k}={v}" for k, v in MALLOC_ENV.items()),
          "mpirun", "-np", str(hosts), "-H", host_list, "--bind-to", "none", "--map-by", "slot",
          "--mca", "mpi_yield_when_idle", "1", "--tag-output", "-x", "PATH", "-x", "PYTHONPATH",
          "-x", "TF_CPP_MIN_LOG_LEVEL", *(x for k in MALLOC_ENV for x in ("-x", k)),
          sys.executable, "-m", "bench.compression", "--worker", f"--launch={name}", f"--out={out}",
          f"--iface={IFACE}", f"--variants={','.join(variants)}", f"--steps={steps}"]


def run_launch(name: str, hosts: int, variants: list[str], steps: int, workdir: str) -> dict | None:
  """What rank 0 of the launch wrote (with its wall seconds), or None when it failed or timed out."""
  out = os.path.join(workdir, f"{name}.json")
  start = time.time()
  print(f"launch {name}: {hosts} host(s) x 1 rank, {','.join(variants) or 'the local step only'}",
        file=sys.stderr, flush=True)
  proc = cluster(*launch_command(name, hosts, variants, steps, out), check=False, timeout=LAUNCH_TIMEOUT_S,
                 capture=False)
  wall = time.time() - start
  print(f"launch {name}: exit {proc.returncode} in {wall:.0f} s", file=sys.stderr, flush=True)
  if proc.returncode or not os.path.exists(out):
    return None
  with open(out) as fh:
    return dict(json.load(fh), wall_seconds=round(wall, 1))


def reusable(launch: dict | None, variants: list[str], steps: int) -> bool:
  """Whether a launch kept from an earlier run measured these variants at this many steps."""
  return bool(launch) and launch.get("steps") == steps and [r["variant"] for r in launch["rows"]] == variants


def run(rates: list[str], hosts: list[int], variants: list[str], steps: int, done: dict, reuse: bool,
        save) -> dict:
  """Every launch not already in `done` (with reuse), on a fresh cluster per rate; save(launches)
  after each, so an interrupted run keeps what it measured. Returns {launch name: result or None}."""
  launches = dict(done) if reuse else {}
  cluster("down", check=False)  # a cluster an interrupted run left behind
  try:
    with tempfile.TemporaryDirectory() as workdir:
      for rate in rates:
        todo = [h for h in hosts if not reusable(launches.get(V.launch_name(rate, h)), variants, steps)]
        if not todo and reusable(launches.get(BASELINE), [], steps):
          continue
        up = cluster("up", str(max(todo, default=1)), rate, check=False)
        if up.returncode:
          sys.exit(f"bench-compression: the emulated cluster did not come up at {rate} (needs root and "
                   f"iproute2):\n{up.stderr}")
        if not reusable(launches.get(BASELINE), [], steps):  # one rank on host 1: no link, the rate is moot
          launches[BASELINE] = run_launch(BASELINE, 1, [], steps, workdir)
          save(launches)
        for h in todo:
          result = run_launch(V.launch_name(rate, h), h, variants, steps, workdir)
          launches[V.launch_name(rate, h)] = dict(result, rate=rate, hosts=h) if result else None
          save(launches)
        cluster("down", check=False)
  finally:
    cluster("down", check=False)
  return launches
