"""Slurm for real, for `make faults` (bench/faults/slurm.py) and tests/multiprocess/test_slurm.py:
Debian's slurmctld, slurmd and munge started by scripts/slurm/local-slurm.sh, on this machine
or over hosts of the emulated cluster (scripts/cluster/cluster.sh), and the project's sbatch
scripts submitted as a user would.

  cluster = Cluster("imcsfault", "198.18.12")   # a cluster of the caller's own
  why = unavailable() or cluster.start()        # None: up; else one sentence why not
  with SbatchJob(cluster, "/tmp/x", "--max_steps=10") as job:
    job.wait()                                   # (JobState, ExitCode, Restarts)
  cluster.stop()                                 # daemons, processes and namespaces gone

Every process of a job runs in the hosts' network namespaces (slurmd's children), so the
job's processes are the namespaces' pids beyond the daemons'; a pid is told from a reused one
by its start time.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench.harness import REPO, stop_on_sigterm

LOCAL_SLURM = os.path.join(REPO, "scripts", "slurm", "local-slurm.sh")
CLUSTER_SH = os.path.join(REPO, "scripts", "cluster", "cluster.sh")
JOB_TIMEOUT = 420  # seconds; a run is ~1 minute on an idle machine, several on one shared by many
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def env() -> dict:
  """This interpreter's environment for the scripts: its venv first on PATH, the repository importable."""
  e = dict(os.environ)
  e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
  e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
  e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
  e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
  # As the Makefile: mpirun's default SIGKILLs the ranks 1 s after its SIGTERM, before a stopping
  # rank checkpoints (docs/faults.md); `python -m bench.faults` or pytest run without make saw
  # Ctrl-C end the job in 2 s with no stop line and no checkpoint at the stop.
  e.setdefault("OMPI_MCA_odls_base_sigkill_timeout", "10")
  # Every launch from here shares this machine's cores with others (the suite runs two tests at a
  # time; -H localhost:N declares N slots, so Open MPI believes each rank has a core and polls
  # without yielding). Yielding took the 4-rank comm check from 51 s to 25 s alone, its system time
  # from 38 s to 8 s (docs/launching.md: more ranks than cores).
  e.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
  e["TF_CPP_MIN_LOG_LEVEL"] = "2"
  return e


# ------------------------------------------------------------- processes --
def alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


def started(pid: int) -> int | None:
  """PID's start time (clock ticks since boot), or None once it has ended: gone, or a zombie
  that its parent (here often the machine's init, for daemons' orphans) has yet to reap."""
  try:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
  except (FileNotFoundError, ProcessLookupError):
    return None
  return None if fields[0] in "ZX" else int(fields[19])


def running(pids: dict[int, int]) -> list[int]:
  """Which of {pid: start time} still run; the start time tells a reused pid from the one seen."""
  return sorted(p for p, t in pids.items() if started(p) == t)


def daemon_pids(directory: str) -> list[int]:
  """The pids in DIRECTORY's pid files (munged, slurmctld, every slurmd)."""
  files = [os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".pid")]
  files.append(os.path.join(directory, "munge", "munged.pid"))
  return [int(open(f).read()) for f in files if os.path.exists(f)]


# ---------------------------------------------------------------- daemons --
def unavailable() -> str | None:
  """Why Slurm cannot run here (one sentence), or None once it is installed (apt-get, as root)."""
  if sys.platform != "linux" or os.geteuid() != 0:
    return "needs root on Linux to install and start slurmctld, slurmd and munged"
  if not shutil.which("apt-get") and not shutil.which("slurmctld"):
    return "Slurm is not installed and there is no apt-get to install Debian's slurm-wlm"
  install = subprocess.run(["bash", LOCAL_SLURM, "install"], capture_output=True, text=True, timeout=900)
  if install.returncode:
    return f"could not install Slurm: {install.stderr.strip()[-500:]}"
  return None


def start(directory: str, environ: dict, hosts: int | None = None) -> str | None:
  """Slurm with its files under DIRECTORY: on this machine (hosts None) or over HOSTS hosts of the
  emulated cluster environ names. None once its nodes are idle, else why it did not start. A SIGTERM
  from here on ends the program through the caller's stop()."""
  stop_on_sigterm()
  cmd = ["start", directory] if hosts is None else ["start-cluster", directory, str(hosts)]
  done = subprocess.run(["bash", LOCAL_SLURM, *cmd], env=environ, capture_output=True, text=True, timeout=180)
  return f"Slurm did not start: {done.stderr.strip()[-800:]}" if done.returncode else None


def stop(directory: str, environ: dict) -> list[int]:
  """Stop the daemons under DIRECTORY (and the cluster start brought up), remove it; the daemons' pids
  that outlived the stop."""
  pids = daemon_pids(directory) if os.path.isdir(directory) else []
  subprocess.run(["bash", LOCAL_SLURM, "stop", directory], env=environ, capture_output=True, timeout=120)
  shutil.rmtree(directory, ignore_errors=True)
  return [p for p in pids if alive(p)]


def job_state(run, job_id: str) -> tuple[str, str, str]:
  """(JobState, ExitCode, Restarts) of JOB_ID; RUN(*cmd) runs scontrol where it reaches slurmctld."""
  out = run("scontrol", "show", "job", job_id).stdout
  fields = [re.search(rf"\b{k}=(\S+)", out) for k in ("JobState", "ExitCode", "Restarts")]
  return tuple(m.group(1) if m else "UNKNOWN" for m in fields)


def wait_job(run, job_id: str, until, timeout: float = JOB_TIMEOUT) -> tuple[str, str, str]:
  """Poll until UNTIL(state) is true (sbatch --wait backs off to 30 s between checks); the last state."""
  deadline = time.time() + timeout
  state = job_state(run, job_id)
  while not until(state) and time.time() < deadline:
    time.sleep(1)
    state = job_state(run, job_id)
  return state


def ended(state: tuple[str, str, str]) -> bool:
  return state[0] in ENDED


def read(path: str) -> str:
  return open(path).read() if os.path.exists(path) else ""


def checkpoints(model_dir: str) -> list[int]:
  """Steps of the checkpoints in MODEL_DIR (files ckpt-N.index), oldest first."""
  names = os.listdir(model_dir) if os.path.isdir(model_dir) else []
  return sorted(int(m.group(1)) for m in (re.fullmatch(r"ckpt-(\d+)\.index", n) for n in names) if m)


# ---------------------------------------------------------------- cluster --
class Cluster:
  """A Slurm over HOSTS emulated hosts: slurmctld in the first host's namespace, a slurmd in each.

  A cluster of the caller's own name and subnet, so one a user has up (imc, 198.18.0.0/24) is never
  touched. `daemons` holds the pids in the hosts' namespaces with no job running.
  """

  def __init__(self, name: str, subnet: str, hosts: int = 2):
    self.name, self.hosts = name, tuple(f"{name}-h{i + 1}" for i in range(hosts))
    self.env = dict(env(), CLUSTER=name, CLUSTER_SUBNET=subnet)
    self.directory = None
    self.daemons: set[int] = set()

  def start(self) -> str | None:
    """Bring the cluster and its Slurm up; None once every node is idle, else why not (then all is down).
    A SIGTERM from here on ends the program through the caller's stop()."""
    stop_on_sigterm()
    probe = subprocess.run(["ip", "netns", "add", f"{self.name}-probe"], capture_output=True, text=True)
    if probe.returncode:
      return f"the kernel refuses network namespaces: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"{self.name}-probe"], capture_output=True)
    subprocess.run(["bash", CLUSTER_SH, "down"], env=self.env, capture_output=True, timeout=120)
    # munged (as the munge user) must reach its key and socket: not under a 0700 tmp directory.
    self.directory = tempfile.mkdtemp(prefix=f"local-slurm-{self.name}-", dir="/tmp")
    why = start(self.directory, self.env, len(self.hosts))
    if why:
      self.stop()
      return why
    self.env["SLURM_CONF"] = os.path.join(self.directory, "slurm.conf")
    self.daemons = self.namespace_pids()
    return None

  def stop(self) -> list[str]:
    """Daemons, job processes and namespaces down; what outlived that (empty when all is gone)."""
    outlived = stop(self.directory, self.env) if self.directory else []
    # stop brings down the cluster start-cluster brought up; this makes sure, after any failure.
    subprocess.run(["bash", CLUSTER_SH, "down"], env=self.env, capture_output=True, timeout=120)
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return ([f"Slurm or munge daemons {outlived} outlived stop"] if outlived else []) + \
        [f"namespace {s} left behind" for s in spaces if s.startswith(f"{self.name}-")]

  def namespace_pids(self) -> set[int]:
    """Every pid in the cluster's host namespaces."""
    pids = set()
    for host in self.hosts:
      out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout
      pids.update(int(p) for p in out.split())
    return pids

  def job_pids(self) -> dict[int, int]:
    """{pid: start time} of the processes in the hosts beyond the daemons: the jobs'."""
    return {p: t for p in self.namespace_pids() - self.daemons if (t := started(p)) is not None}

  def wait_quiet(self, timeout: float, pids: dict[int, int] | None = None) -> tuple[float, list[int]]:
    """(seconds until no job process runs in the hosts, nor any of PIDS; those still running at the
    timeout). A job's state is final before its last processes are reaped."""
    seen, t0 = dict(pids or {}), time.time()
    while time.time() - t0 < timeout:
      seen.update(self.job_pids())
      if not running(seen):
        break
      time.sleep(0.2)
    return time.time() - t0, running(seen)

  def on_head(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """CMD on the cluster's first host (where clients reach slurmctld), as a user would run it."""
    return subprocess.run(["bash", CLUSTER_SH, "run", *cmd], cwd=REPO, env=self.env, capture_output=True,
                          text=True, timeout=timeout)


class SbatchJob:
  """A job cpu_nodes.sbatch runs on the cluster's hosts, 1 rank each; cancelled on exit if still there.

  Its log is OUT_DIR/job-<id>.out; MODEL_DIR (default OUT_DIR/model) is where train.py checkpoints.
  ENVIRON reaches the script (LAUNCHER=mpirun, BIND_TO=none).
  """

  def __init__(self, cluster: Cluster, out_dir: str, *train_flags: str, sbatch=(), model_dir: str | None = None,
               **environ: str):
    self.cluster = cluster
    self.model_dir = model_dir or os.path.join(out_dir, "model")
    self.env = dict(cluster.env, PYTHON=sys.executable, MODEL_DIR=self.model_dir, **environ)
    os.makedirs(out_dir, exist_ok=True)
    out_pattern = os.path.join(out_dir, "job-%j.out")
    submit = subprocess.run(
        ["bash", CLUSTER_SH, "run", "sbatch", "--parsable", "-N", str(len(cluster.hosts)),
         "--ntasks-per-node=1", "--cpus-per-task=1", f"--output={out_pattern}", *sbatch,
         "scripts/slurm/cpu_nodes.sbatch", *train_flags],
        cwd=REPO, env=self.env, capture_output=True, text=True, timeout=60)
    if submit.returncode:
      raise AssertionError(f"sbatch failed: {submit.stderr}")
    self.id = submit.stdout.strip().split(";")[0]
    self.out = out_pattern.replace("%j", self.id)

  def __enter__(self):
    return self

  def __exit__(self, *_):
    self.cluster.on_head("scancel", "--signal=KILL", "--full", self.id)

  def log(self) -> str:
    return read(self.out)

  def state(self) -> tuple[str, str, str]:
    return job_state(self.cluster.on_head, self.id)

  def wait(self, until=ended, timeout: float = JOB_TIMEOUT) -> tuple[str, str, str]:
    return wait_job(self.cluster.on_head, self.id, until, timeout)

  def wait_for_line(self, pattern: str, timeout: float = JOB_TIMEOUT) -> re.Match:
    """The first match of PATTERN in the job's log, waiting while the job runs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
      match = re.search(pattern, self.log(), re.M)
      if match:
        return match
      if ended(self.state()):
        break
      time.sleep(0.5)
    raise AssertionError(f"job {self.id} never printed /{pattern}/\n{self.log()[-4000:]}")

  def signal(self, *scancel_args: str) -> None:
    """scancel ARGS... this job (e.g. --batch --signal=USR1: a preemption notice)."""
    done = self.cluster.on_head("scancel", *scancel_args, self.id)
    if done.returncode:
      raise AssertionError(f"scancel {' '.join(scancel_args)} {self.id} failed: {done.stderr}")
