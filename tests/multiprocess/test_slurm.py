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
the emulated cluster are stopped afterwards whatever happened. The machinery (starting Slurm,
submitting, waiting, the processes in the hosts) is bench/slurm_jobs.py's, which `make faults`
reports times with (bench/faults_slurm.py).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

from bench.harness import slurm_jobs
from bench.harness.slurm_jobs import checkpoints, ended, read, running, wait_job
from conftest import MODEL, REPO, _env

pytestmark = pytest.mark.multiprocess

# A cluster of the tests' own, so one a user has up (imc, 198.18.0.0/24) is never touched.
CLUSTER, SUBNET = "imcslurmt", "198.18.11"
HOSTS = (f"{CLUSTER}-h1", f"{CLUSTER}-h2")


def _install_or_skip():
  why = slurm_jobs.unavailable()
  if why:
    pytest.skip(why)


@pytest.fixture(scope="module")
def slurm():
  """The environment (SLURM_CONF) of a running one-machine Slurm, and its directory."""
  _install_or_skip()
  # munged (as the munge user) must reach its key and socket: not under pytest's 0700 tmp.
  directory = tempfile.mkdtemp(prefix="local-slurm-", dir="/tmp")
  try:
    why = slurm_jobs.start(directory, _env())
    if why:
      pytest.skip(why)
    yield dict(_env(), SLURM_CONF=os.path.join(directory, "slurm.conf")), directory
  finally:
    outlived = slurm_jobs.stop(directory, _env())
  assert not outlived, f"Slurm or munge daemons {outlived} outlived stop"


@pytest.fixture(scope="module")
def slurm_cluster():
  """A Slurm of 2 emulated hosts (bench.harness.slurm_jobs.Cluster), its daemons' pids in `daemons`."""
  _install_or_skip()
  cluster = slurm_jobs.Cluster(CLUSTER, SUBNET)
  try:
    why = cluster.start()
    if why:
      pytest.skip(f"on the emulated cluster: {why}")
    yield cluster
  finally:
    left = cluster.stop()
  assert not left, left


def Job(cluster, tmp_path, digits_dir, *train_flags, sbatch=(), **env):
  """A job cpu_nodes.sbatch runs on the 2 hosts, 1 rank each; cancelled on exit if still there."""
  return slurm_jobs.SbatchJob(cluster, str(tmp_path), f"--data_dir={digits_dir}", f"--model={MODEL}", "--export=false",
                              *train_flags, sbatch=sbatch, **env)


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
       "scripts/slurm/cpu_node.sbatch", "--max_steps=4", "--log_every=1", "--export=false", f"--model_dir={model_dir}",
       f"--data_dir={digits_dir}"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
  assert submit.returncode == 0, submit.stderr
  job_id = submit.stdout.strip().split(";")[0]

  def local(*cmd):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
  try:
    state = wait_job(local, job_id, ended)
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
  # --model_dir among the script's arguments is its MODEL_DIR: nothing made under the clone's runs/
  assert not os.path.exists(os.path.join(REPO, "runs", f"slurm-{job_id}")), "common.sh made runs/slurm-<jobid>"


# Through srun (the script's default launcher) the same placement, a completed job and its summary
# are the preemption test's, whose second run completes: a job of its own cost make test a launch.
def test_two_hosts_one_rank_each_through_mpirun(slurm_cluster, tmp_path, digits_dir):
  # BIND_TO=none: both emulated hosts are this machine, so binding each rank to "its" core 0 would
  # put the two on one core.
  with Job(slurm_cluster, tmp_path, digits_dir, "--max_steps=10", "--log_every=5",
           LAUNCHER="mpirun", BIND_TO="none") as job:
    state = job.wait()
  log = job.log()
  assert state[:2] == ("COMPLETED", "0:0"), f"job {job.id}: {state}\n{log[-4000:]}"
  assert_ranks_on_both_hosts(log, "mpirun")
  for rank, host in enumerate(HOSTS):  # Open MPI's own word on where it started each rank
    assert re.search(rf"\[{host}:\d+\] MCW rank {rank} ", log), log[:3000]
  summary = json.loads(re.findall(r"^(\{.*\})$", log, re.M)[-1])
  assert summary["ranks"] == 2 and summary["steps"] == 10 and summary["replicas_identical"] is True, summary


def test_preemption_notice_checkpoints_requeues_and_resumes(slurm_cluster, tmp_path, digits_dir):
  # Needs train.py's stop contract (SIGUSR1 -> checkpoint at the step, "stopped:", exit 75).
  steps = 30
  with Job(slurm_cluster, tmp_path, digits_dir, f"--max_steps={steps}", "--log_every=1",
           "--keep_checkpoints=10", sbatch=["--requeue"]) as job:
    seen = int(job.wait_for_line(r"step\s+(\d+)/").group(1))
    # What `#SBATCH --signal=B:USR1@N` sends N seconds before the time limit: USR1 to the batch shell.
    job.signal("--batch", "--signal=USR1")
    # Requeueing ends the first run as CANCELLED for a moment; the restart count says which run it was.
    state = job.wait(lambda s: ended(s) and (s[0] != "CANCELLED" or s[2] == "0"))
  log = job.log()
  assert state == ("COMPLETED", "0:0", "1"), f"job {job.id}: {state} (state, exit, restarts)\n{log[-5000:]}"
  first, _, second = log.partition("run 1 (requeues so far)")
  assert second, f"the job never ran a second time\n{log[-5000:]}"
  assert_ranks_on_both_hosts(first, "srun")  # the first run's header, placement and ranks
  assert "ranks 2 (1 per node, 2 nodes)" in second, second[:3000]
  stopped = re.search(r"^stopped: .*\bSIGUSR1\b.*?\bstep (\d+)", first, re.M)
  assert stopped, f"the first run did not end with a 'stopped:' line\n{first[-4000:]}"
  stop_step = int(stopped.group(1))
  # No more lost than the steps since the signal: it stopped at or after the step last seen before it.
  assert seen <= stop_step < steps, (seen, stop_step)
  assert f"requeued; the next run resumes from {job.model_dir}" in first
  assert re.search(rf"resumed from \S*ckpt-{stop_step} at step {stop_step}\b", second), second[-4000:]
  assert stop_step in checkpoints(job.model_dir)
  summary = json.loads(re.findall(r"^(\{.*\})$", second, re.M)[-1])
  assert summary["steps"] == steps and summary["ranks"] == 2 and summary["replicas_identical"] is True, summary


def test_scancel_checkpoints_and_leaves_no_process(slurm_cluster, tmp_path, digits_dir):
  # Needs train.py's stop contract (SIGTERM -> checkpoint at the step, "stopped:", exit 75).
  with Job(slurm_cluster, tmp_path, digits_dir, "--max_steps=400", "--log_every=1") as job:
    job.wait_for_line(r"step\s+\d+/")
    before = checkpoints(job.model_dir)
    # Every process of the job runs in the hosts' namespaces: what is there now beyond the daemons.
    job_pids = slurm_cluster.job_pids()
    assert job_pids, "no process of the job found in the hosts' namespaces"
    job.signal()
    state = job.wait()
    slurm_cluster.wait_quiet(60, job_pids)  # the job's state is final before its last processes are reaped
  log = job.log()
  assert state[0] == "CANCELLED", f"job {job.id}: {state}\n{log[-4000:]}"
  stopped = re.search(r"^stopped: .*?\bstep (\d+)", log, re.M)
  assert stopped, f"the job did not stop with a 'stopped:' line\n{log[-4000:]}"
  after = checkpoints(job.model_dir)
  assert int(stopped.group(1)) in after and max(after) > max(before, default=0), (before, after)
  assert "requeued" not in log  # a cancel is not a preemption
  left = running(job_pids)
  assert not left, f"processes of job {job.id} outlived it: {left}"
  # Nor any the job started after the pids were taken: the hosts hold the daemons alone again.
  assert not slurm_cluster.job_pids(), f"processes left in the hosts: {slurm_cluster.job_pids()}"
