"""Slurm for real: a one-machine Slurm (scripts/slurm/local-slurm.sh: Debian's
slurmctld, slurmd and munge) runs the project's sbatch script for 2 tasks,
which trains a few steps on the digits set through srun --mpi=pmix.

Installs the Debian packages when they are missing (root, apt-get). Skipped,
with the reason, where that or starting the daemons is impossible; the daemons
are stopped afterwards whatever happened.
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
DAEMON_PIDS = ("slurmd.pid", "slurmctld.pid", "munge/munged.pid")


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


@pytest.fixture(scope="module")
def slurm():
  """The environment (SLURM_CONF) of a running one-machine Slurm, and its directory."""
  if sys.platform != "linux" or os.geteuid() != 0:
    pytest.skip("needs root on Linux to install and start slurmctld, slurmd and munged")
  if not shutil.which("apt-get") and not shutil.which("slurmctld"):
    pytest.skip("Slurm is not installed and there is no apt-get to install Debian's slurm-wlm")
  install = subprocess.run(["bash", LOCAL_SLURM, "install"], capture_output=True, text=True, timeout=900)
  if install.returncode:
    pytest.skip(f"could not install Slurm: {install.stderr.strip()[-500:]}")
  # munged (as the munge user) must reach its key and socket: not under pytest's 0700 tmp.
  directory = tempfile.mkdtemp(prefix="local-slurm-", dir="/tmp")
  try:
    start = subprocess.run(["bash", LOCAL_SLURM, "start", directory], capture_output=True, text=True,
                           timeout=120)
    if start.returncode:
      pytest.skip(f"Slurm did not start: {start.stderr.strip()[-800:]}")
    yield dict(_env(), SLURM_CONF=os.path.join(directory, "slurm.conf")), directory
  finally:
    pids = [int(open(p).read()) for p in (os.path.join(directory, f) for f in DAEMON_PIDS)
            if os.path.exists(p)]
    subprocess.run(["bash", LOCAL_SLURM, "stop", directory], capture_output=True, timeout=60)
    shutil.rmtree(directory, ignore_errors=True)
  assert not [p for p in pids if _alive(p)], "a Slurm or munge daemon outlived stop"


def job_state(env, job_id):
  out = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
  state = re.search(r"JobState=(\S+)", out)
  code = re.search(r"\bExitCode=(\S+)", out)
  return (state.group(1) if state else "UNKNOWN"), (code.group(1) if code else "")


def test_sbatch_script_trains_two_ranks_under_srun(slurm):
  env, directory = slurm
  env["PYTHON"] = sys.executable
  out = os.path.join(directory, "job-%j.out")
  model_dir = os.path.join(directory, "model")
  submit = subprocess.run(
      ["sbatch", "--parsable", "--ntasks=2", "--ntasks-per-node=2", f"--output={out}",
       "scripts/slurm/cpu_node.sbatch", "--max_steps=4", "--log_every=1", f"--model_dir={model_dir}"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
  assert submit.returncode == 0, submit.stderr
  job_id = submit.stdout.strip().split(";")[0]

  # Poll: sbatch --wait backs off to 30 s between checks.
  deadline = time.time() + 420
  state, code = job_state(env, job_id)
  while state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") and time.time() < deadline:
    time.sleep(1)
    state, code = job_state(env, job_id)
  log = open(out.replace("%j", job_id)).read() if os.path.exists(out.replace("%j", job_id)) else ""
  if state in ("PENDING", "RUNNING"):
    subprocess.run(["scancel", job_id], env=env)
  assert (state, code) == ("COMPLETED", "0:0"), f"job {job_id}: {state} exit {code}\n{log[-4000:]}"

  assert re.search(r"job \d+: 1 node\(s\) \[\S+\], 2 ranks, .* launcher srun", log), log[:1000]
  assert "HOROVOD_FUSION_THRESHOLD=67108864" in log
  summary = json.loads(re.findall(r"^(\{.*\})$", log, re.M)[-1])
  assert summary["ranks"] == 2 and summary["steps"] == 4 and summary["replicas_identical"] is True, summary
  assert summary["dataset"] == "digits"
  assert json.load(open(os.path.join(model_dir, "summary.json"))) == summary
