"""Slurm for real (scripts/slurm/local-slurm.sh: Debian's slurmctld, slurmd and
munge), running the project's sbatch scripts as a user would submit them:

- on one machine: cpu_node.sbatch trains 2 ranks through srun --mpi=pmix;
- on 2 emulated hosts (start-cluster: a slurmd in each host's network
  namespace, slurmctld on the first): cpu_nodes.sbatch puts one rank on each
  host, through srun --mpi=pmix and through mpirun; a preemption notice
  (`scancel -b -s USR1`, what `#SBATCH --signal=B:USR1@N` sends) stops the job
  with a checkpoint and requeues it, and the second run resumes from it; a
  scancel stops it with a checkpoint and leaves no process of the job behind.

Installs the Debian packages when they are missing (root, apt-get). Skipped,
with the reason, where that or starting the daemons is impossible; daemons and
the emulated cluster are stopped afterwards whatever happened.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import REPO, _env

pytestmark = pytest.mark.multiprocess

LOCAL_SLURM = os.path.join(REPO, "scripts", "slurm", "local-slurm.sh")
CLUSTER_SH = os.path.join(REPO, "scripts", "cluster", "cluster.sh")
# A cluster of the tests' own, so one a user has up (imc, 198.18.0.0/24) is never touched.
CLUSTER, SUBNET = "imcslurmt", "198.18.11"
HOSTS = (f"{CLUSTER}-h1", f"{CLUSTER}-h2")
JOB_TIMEOUT = 420  # seconds; a run is ~1 minute on an idle machine, several on one shared by many


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


def _started(pid):
  """PID's start time (clock ticks since boot), or None once it has ended: gone, or a zombie
  that its parent (here often the machine's init, for daemons' orphans) has yet to reap."""
  try:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
  except (FileNotFoundError, ProcessLookupError):
    return None
  return None if fields[0] in "ZX" else int(fields[19])


def _running(started):
  """Which of {pid: start time} still run; the start time tells a reused pid from the one seen."""
  return sorted(p for p, t in started.items() if _started(p) == t)


def _daemon_pids(directory):
  """The pids in DIRECTORY's pid files (munged, slurmctld, every slurmd)."""
  files = [os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".pid")]
  files.append(os.path.join(directory, "munge", "munged.pid"))
  return [int(open(f).read()) for f in files if os.path.exists(f)]


def _install_or_skip():
  if sys.platform != "linux" or os.geteuid() != 0:
    pytest.skip("needs root on Linux to install and start slurmctld, slurmd and munged")
  if not shutil.which("apt-get") and not shutil.which("slurmctld"):
    pytest.skip("Slurm is not installed and there is no apt-get to install Debian's slurm-wlm")
  install = subprocess.run(["bash", LOCAL_SLURM, "install"], capture_output=True, text=True, timeout=900)
  if install.returncode:
    pytest.skip(f"could not install Slurm: {install.stderr.strip()[-500:]}")


def _stop(directory, env):
  pids = _daemon_pids(directory)
  subprocess.run(["bash", LOCAL_SLURM, "stop", directory], env=env, capture_output=True, timeout=120)
  shutil.rmtree(directory, ignore_errors=True)
  return [p for p in pids if _alive(p)]


@pytest.fixture(scope="module")
def slurm():
  """The environment (SLURM_CONF) of a running one-machine Slurm, and its directory."""
  _install_or_skip()
  # munged (as the munge user) must reach its key and socket: not under pytest's 0700 tmp.
  directory = tempfile.mkdtemp(prefix="local-slurm-", dir="/tmp")
  try:
    start = subprocess.run(["bash", LOCAL_SLURM, "start", directory], capture_output=True, text=True,
                           timeout=120)
    if start.returncode:
      pytest.skip(f"Slurm did not start: {start.stderr.strip()[-800:]}")
    yield dict(_env(), SLURM_CONF=os.path.join(directory, "slurm.conf")), directory
  finally:
    outlived = _stop(directory, _env())
  assert not outlived, f"Slurm or munge daemons {outlived} outlived stop"


def namespace_pids():
  """Every pid in the test cluster's host namespaces."""
  pids = set()
  for host in HOSTS:
    out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout
    pids.update(int(p) for p in out.split())
  return pids


@pytest.fixture(scope="module")
def slurm_cluster():
  """A Slurm of 2 emulated hosts: its environment (SLURM_CONF, the cluster's name), its directory,
  and the pids in the hosts' namespaces with no job running (the daemons)."""
  _install_or_skip()
  env = dict(_env(), CLUSTER=CLUSTER, CLUSTER_SUBNET=SUBNET)
  probe = subprocess.run(["ip", "netns", "add", f"{CLUSTER}-probe"], capture_output=True, text=True)
  if probe.returncode:
    pytest.skip(f"the kernel refuses network namespaces: {probe.stderr.strip()}")
  subprocess.run(["ip", "netns", "del", f"{CLUSTER}-probe"], capture_output=True)
  subprocess.run(["bash", CLUSTER_SH, "down"], env=env, capture_output=True, timeout=120)
  directory = tempfile.mkdtemp(prefix="local-slurm-cluster-", dir="/tmp")
  try:
    start = subprocess.run(["bash", LOCAL_SLURM, "start-cluster", directory, "2"], env=env,
                           capture_output=True, text=True, timeout=180)
    if start.returncode:
      pytest.skip(f"Slurm did not start on the emulated cluster: {start.stderr.strip()[-800:]}")
    env["SLURM_CONF"] = os.path.join(directory, "slurm.conf")
    yield env, directory, namespace_pids()
  finally:
    outlived = _stop(directory, env)
    # stop brings down the cluster start-cluster brought up; this makes sure, after any failure.
    subprocess.run(["bash", CLUSTER_SH, "down"], env=env, capture_output=True, timeout=120)
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
  assert not outlived, f"Slurm or munge daemons {outlived} outlived stop"
  assert f"{CLUSTER}-" not in spaces, f"namespaces left behind:\n{spaces}"


def on_head(env, *cmd, timeout=60):
  """CMD on the cluster's first host (where clients reach slurmctld), as a user would run it."""
  return subprocess.run(["bash", CLUSTER_SH, "run", *cmd], cwd=REPO, env=env, capture_output=True,
                        text=True, timeout=timeout)


def job_state(env, job_id, run=None):
  """(JobState, ExitCode, Restarts) of JOB_ID; RUN runs scontrol (default: on the head host)."""
  cmd = ["scontrol", "show", "job", job_id]
  out = (run(*cmd) if run else on_head(env, *cmd)).stdout
  fields = [re.search(rf"\b{k}=(\S+)", out) for k in ("JobState", "ExitCode", "Restarts")]
  return tuple(m.group(1) if m else "UNKNOWN" for m in fields)


def wait_job(env, job_id, until, timeout=JOB_TIMEOUT, run=None):
  """Poll until UNTIL(state) is true (sbatch --wait backs off to 30 s between checks); the last state."""
  deadline = time.time() + timeout
  state = job_state(env, job_id, run)
  while not until(state) and time.time() < deadline:
    time.sleep(1)
    state = job_state(env, job_id, run)
  return state


def ended(state):
  return state[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def read(path):
  return open(path).read() if os.path.exists(path) else ""


def wait_for_line(path, pattern, env, job_id, timeout=JOB_TIMEOUT):
  """The first match of PATTERN in the job's log, waiting while the job runs."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    match = re.search(pattern, read(path), re.M)
    if match:
      return match
    if ended(job_state(env, job_id)):
      break
    time.sleep(0.5)
  raise AssertionError(f"job {job_id} never printed /{pattern}/\n{read(path)[-4000:]}")


class Job:
  """A job cpu_nodes.sbatch runs on the 2 hosts, 1 rank each; cancelled on exit if still there."""

  def __init__(self, cluster, tmp_path, digits_dir, *train_flags, sbatch=(), **env):
    self.env = cluster[0]
    self.model_dir = str(tmp_path / "model")
    self.env = dict(self.env, PYTHON=sys.executable, MODEL_DIR=self.model_dir, **env)
    self.out_pattern = str(tmp_path / "job-%j.out")
    submit = on_head(self.env, "sbatch", "--parsable", "-N", "2", "--ntasks-per-node=1",
                     "--cpus-per-task=1", f"--output={self.out_pattern}", *sbatch,
                     "scripts/slurm/cpu_nodes.sbatch", f"--data_dir={digits_dir}", *train_flags)
    assert submit.returncode == 0, submit.stderr
    self.id = submit.stdout.strip().split(";")[0]
    self.out = self.out_pattern.replace("%j", self.id)

  def __enter__(self):
    return self

  def __exit__(self, *_):
    on_head(self.env, "scancel", "--signal=KILL", "--full", self.id)

  def log(self):
    return read(self.out)

  def wait(self, until=ended, timeout=JOB_TIMEOUT):
    return wait_job(self.env, self.id, until, timeout)


def checkpoints(model_dir):
  """Steps of the checkpoints in MODEL_DIR (files ckpt-N.index)."""
  names = os.listdir(model_dir) if os.path.isdir(model_dir) else []
  return sorted(int(m.group(1)) for m in (re.fullmatch(r"ckpt-(\d+)\.index", n) for n in names) if m)


def assert_ranks_on_both_hosts(log, launcher):
  header = rf"job \d+: 2 node\(s\) \[{CLUSTER}-h\[1-2\]\], 2 ranks, .* launcher {launcher}"
  assert re.search(header, log), log[:2000]
  # Slurm's placement of the job's tasks (common.sh), then train.py's view of the ranks.
  assert f"tasks: 0 {HOSTS[0]}, 1 {HOSTS[1]}" in log, log[:2000]
  assert "ranks 2 (1 per node, 2 nodes)" in log, log[:3000]


def test_sbatch_script_trains_two_ranks_under_srun(slurm, digits_dir):
  env, directory = slurm
  env = dict(env, PYTHON=sys.executable)
  out = os.path.join(directory, "job-%j.out")
  model_dir = os.path.join(directory, "model")
  submit = subprocess.run(
      ["sbatch", "--parsable", "--ntasks=2", "--ntasks-per-node=2", f"--output={out}",
       "scripts/slurm/cpu_node.sbatch", "--max_steps=4", "--log_every=1", f"--model_dir={model_dir}",
       f"--data_dir={digits_dir}"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
  assert submit.returncode == 0, submit.stderr
  job_id = submit.stdout.strip().split(";")[0]

  def local(*cmd):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
  try:
    state = wait_job(env, job_id, ended, run=local)
  finally:
    local("scancel", "--signal=KILL", "--full", job_id)
  log = read(out.replace("%j", job_id))
  assert state[:2] == ("COMPLETED", "0:0"), f"job {job_id}: {state}\n{log[-4000:]}"

  assert re.search(r"job \d+: 1 node\(s\) \[\S+\], 2 ranks, .* launcher srun", log), log[:1000]
  assert "HOROVOD_FUSION_THRESHOLD=67108864" in log
  summary = json.loads(re.findall(r"^(\{.*\})$", log, re.M)[-1])
  assert summary["ranks"] == 2 and summary["steps"] == 4 and summary["replicas_identical"] is True, summary
  assert summary["dataset"] == "digits"
  assert json.load(open(os.path.join(model_dir, "summary.json"))) == summary


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_two_hosts_one_rank_each(slurm_cluster, tmp_path, digits_dir, launcher):
  # BIND_TO=none: both emulated hosts are this machine, so binding each rank to "its" core 0 would
  # put the two on one core.
  with Job(slurm_cluster, tmp_path, digits_dir, "--max_steps=10", "--log_every=5",
           LAUNCHER=launcher, BIND_TO="none") as job:
    state = job.wait()
  log = job.log()
  assert state[:2] == ("COMPLETED", "0:0"), f"job {job.id}: {state}\n{log[-4000:]}"
  assert_ranks_on_both_hosts(log, launcher)
  if launcher == "mpirun":  # Open MPI's own word on where it started each rank
    for rank, host in enumerate(HOSTS):
      assert re.search(rf"\[{host}:\d+\] MCW rank {rank} ", log), log[:3000]
  summary = json.loads(re.findall(r"^(\{.*\})$", log, re.M)[-1])
  assert summary["ranks"] == 2 and summary["steps"] == 10 and summary["replicas_identical"] is True, summary


def test_preemption_notice_checkpoints_requeues_and_resumes(slurm_cluster, tmp_path, digits_dir):
  # Needs train.py's stop contract (SIGUSR1 -> checkpoint at the step, "stopped:", exit 75).
  steps = 30
  with Job(slurm_cluster, tmp_path, digits_dir, f"--max_steps={steps}", "--log_every=1",
           "--keep_checkpoints=10", sbatch=["--requeue"]) as job:
    seen = int(wait_for_line(job.out, r"step\s+(\d+)/", job.env, job.id).group(1))
    # What `#SBATCH --signal=B:USR1@N` sends N seconds before the time limit: USR1 to the batch shell.
    notice = on_head(job.env, "scancel", "--batch", "--signal=USR1", job.id)
    assert notice.returncode == 0, notice.stderr
    # Requeueing ends the first run as CANCELLED for a moment; the restart count says which run it was.
    state = job.wait(lambda s: ended(s) and (s[0] != "CANCELLED" or s[2] == "0"))
  log = job.log()
  assert state == ("COMPLETED", "0:0", "1"), f"job {job.id}: {state} (state, exit, restarts)\n{log[-5000:]}"
  first, _, second = log.partition("run 1 (requeues so far)")
  assert second, f"the job never ran a second time\n{log[-5000:]}"
  stopped = re.search(r"^stopped: .*\bSIGUSR1\b.*?\bstep (\d+)", first, re.M)
  assert stopped, f"the first run did not end with a 'stopped:' line\n{first[-4000:]}"
  stop_step = int(stopped.group(1))
  # No more lost than the steps since the signal: it stopped at or after the step last seen before it.
  assert seen <= stop_step < steps, (seen, stop_step)
  assert f"requeued; the next run resumes from {job.model_dir}" in first
  assert re.search(rf"resumed from \S*ckpt-{stop_step} at step {stop_step}\b", second), second[-4000:]
  assert stop_step in checkpoints(job.model_dir)
  summary = json.loads(re.findall(r"^(\{.*\})$", second, re.M)[-1])
  assert summary["steps"] == steps and summary["ranks"] == 2, summary


def test_scancel_checkpoints_and_leaves_no_process(slurm_cluster, tmp_path, digits_dir):
  # Needs train.py's stop contract (SIGTERM -> checkpoint at the step, "stopped:", exit 75).
  _, _, daemons = slurm_cluster
  with Job(slurm_cluster, tmp_path, digits_dir, "--max_steps=400", "--log_every=1") as job:
    wait_for_line(job.out, r"step\s+\d+/", job.env, job.id)
    before = checkpoints(job.model_dir)
    # Every process of the job runs in the hosts' namespaces: what is there now beyond the daemons.
    job_pids = {p: _started(p) for p in namespace_pids() - daemons}
    assert job_pids, "no process of the job found in the hosts' namespaces"
    cancel = on_head(job.env, "scancel", job.id)
    assert cancel.returncode == 0, cancel.stderr
    state = job.wait()
    deadline = time.time() + 60  # the job's state is final before its last processes are reaped
    while (_running(job_pids) or namespace_pids() - daemons) and time.time() < deadline:
      time.sleep(0.5)
  log = job.log()
  assert state[0] == "CANCELLED", f"job {job.id}: {state}\n{log[-4000:]}"
  stopped = re.search(r"^stopped: .*?\bstep (\d+)", log, re.M)
  assert stopped, f"the job did not stop with a 'stopped:' line\n{log[-4000:]}"
  after = checkpoints(job.model_dir)
  assert int(stopped.group(1)) in after and max(after) > max(before, default=0), (before, after)
  assert "requeued" not in log  # a cancel is not a preemption
  left = _running(job_pids)
  assert not left, f"processes of job {job.id} outlived it: {left}"
  # Nor any the job started after the pids were taken: the hosts hold the daemons alone again.
  assert namespace_pids() - daemons == set(), f"processes left in the hosts: {namespace_pids() - daemons}"
