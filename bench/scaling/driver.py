"""The driver of bench-scaling: the emulated cluster up, one mpirun launch per topology, the report,
the cluster down (even when a launch fails)."""
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.scaling import plots, report, simulate
from bench.scaling.settings import (CLUSTER, HOROVOD_FUSION_MB, HOSTS, IFACE, LAUNCH_TIMEOUT_S, MALLOC_ENV, MB,
                                    REPO, SUBNET, THRESHOLD_MB)


def cluster(*args, check=True, timeout=120, capture=True):
  """scripts/cluster/cluster.sh ARGS for this benchmark's cluster; a launch's output goes to ours."""
  env = dict(os.environ, CLUSTER=CLUSTER, CLUSTER_SUBNET=SUBNET)
  try:
    return subprocess.run(["bash", os.path.join(REPO, "scripts", "cluster", "cluster.sh"), *args],
                          cwd=REPO, env=env, check=check, timeout=timeout, capture_output=capture, text=True)
  except subprocess.TimeoutExpired:
    return subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout} s")


def launch_command(launch, settings, out: str, cost: str) -> list[str]:
  """cluster.sh's `run` arguments for one launch: mpirun over its hosts, each rank
  `python -m bench.scaling --worker`."""
  host_list = ",".join(f"{CLUSTER}-h{i + 1}:{launch.per_host}" for i in range(launch.hosts))
  # mpirun, not horovodrun: horovodrun's interface check fails inside a namespace when every
  # host is local. hier adds its process sets after hvd.init (comm.init makes them dynamic).
  # mpi_yield_when_idle: the emulated hosts' ranks share 2 cores, which Open MPI cannot see
  # from -H's slots, so it polls without yielding and each waiting rank holds a core: one
  # 1 MB grouped allreduce on 4 ranks took 36 ms so (and a flat exchange of the same 1 MB
  # 52 ms, the bias that left the model 20-30% low on 1x4), 4 ms yielding (both alike).
  # PYTHONPATH: each rank runs `python -m bench.scaling` wherever the cluster's shell starts it.
  cmd = ["run", "env", f"HOROVOD_FUSION_THRESHOLD={int(HOROVOD_FUSION_MB * MB)}", f"PYTHONPATH={REPO}",
         *(f"{k}={v}" for k, v in MALLOC_ENV.items()),
         "mpirun", "-np", str(launch.hosts * launch.per_host), "-H", host_list, "--bind-to", "none",
         "--map-by", "slot", "--mca", "mpi_yield_when_idle", "1",
         "--tag-output", "-x", "PATH", "-x", "PYTHONPATH", "-x", "TF_CPP_MIN_LOG_LEVEL",
         "-x", "HOROVOD_FUSION_THRESHOLD", *(x for k in MALLOC_ENV for x in ("-x", k)),
         sys.executable, "-m", "bench.scaling", "--worker", f"--launch={launch.name}", f"--out={out}",
         f"--iface={IFACE}", *settings.worker_args()]
  cmd += ["--comm"] if launch.comm else []
  cmd += ["--training"] if launch.training else []
  cmd += [f"--hybrid_cost={cost}"] if cost else []
  return cmd


def hybrid_cost(two_by_two) -> str:
  """--hybrid_cost for the training launches from the 2x2 calibration ('' without one).

  GBPS_INTER is per host link, as the calibration fits it."""
  if not two_by_two or "calibration" not in two_by_two:
    return ""
  cal = two_by_two["calibration"]
  numbers = (max(cal["intra"]["alpha_us"], 1), cal["intra"]["gbps"] or 1,
             max(cal["inter"]["alpha_us"], 1), cal["inter"]["gbps"] or 1)
  return ",".join([f"{x:.6g}" for x in numbers] + [cal.get("flat", "mpi")])


def run_launch(launch, settings, workdir: str, cost: str):
  """What rank 0 of the launch wrote, or None when the launch failed or timed out."""
  out = os.path.join(workdir, f"{launch.name}.json")
  start = time.time()
  print(f"launch {launch.name}: {launch.hosts} host(s) x {launch.per_host} rank(s)",
        file=sys.stderr, flush=True)
  # --full moves AlexNet's 244 MB over the shaped links too: its 2x2 and 4x1 launches
  # passed 540 s in the one --full run tried (before the launches yielded).
  proc = cluster(*launch_command(launch, settings, out, cost), check=False,
                 timeout=LAUNCH_TIMEOUT_S * (3 if settings.full else 1), capture=False)
  print(f"launch {launch.name}: exit {proc.returncode} in {time.time() - start:.0f} s",
        file=sys.stderr, flush=True)
  if proc.returncode or not os.path.exists(out):
    return None
  with open(out) as fh:
    return json.load(fh)


def run(settings) -> None:
  """Every launch of the settings on a fresh cluster, then settings.out_dir's JSON, scaling.md and plots."""
  os.makedirs(settings.out_dir, exist_ok=True)
  cluster("down")
  up = cluster("up", str(HOSTS), settings.rate, check=False)
  if up.returncode:
    sys.exit(f"bench-scaling: the emulated cluster did not come up (needs root and iproute2):\n{up.stderr}")
  launches = {}
  if settings.only and os.path.exists(settings.json_path):
    with open(settings.json_path) as fh:  # rerunning some launches (--only): keep the others
      launches = json.load(fh)["launches"]
  try:
    with tempfile.TemporaryDirectory() as workdir:
      for launch in settings.launches:
        cost = hybrid_cost(launches.get("2x2"))
        launches[launch.name] = run_launch(launch, settings, workdir, cost)
  finally:
    cluster("down", check=False)
  result = {"setup": {"rate": settings.rate, "hosts": HOSTS, "cores": os.cpu_count(),
                      "threshold_mb": THRESHOLD_MB, "horovod_fusion_mb": HOROVOD_FUSION_MB,
                      "repeats": settings.repeats, "train_steps": settings.train_steps, "full": settings.full,
                      "quick": settings.quick, "plan_repeats": settings.plan_repeats, "malloc_env": MALLOC_ENV,
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
            "launches": launches, "simulation": simulate.simulation()}
  with open(settings.json_path, "w") as fh:
    json.dump(result, fh, indent=1)
  report.write(result, settings.out_dir)
  plots.write(result, settings.out_dir)
