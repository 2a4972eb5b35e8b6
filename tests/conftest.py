"""Shared helpers: the repository on sys.path, and running commands under horovodrun."""
import os
import signal
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The launches' environment (this venv first on PATH, the repository importable, Open MPI as
# root): one definition, the one make faults and the Slurm jobs use.
from bench.harness.slurm_jobs import env as _env  # noqa: E402

# The network of the tests' train.py launches: what they check does not depend on it, and
# resnet8 starts its first step 12-17 s sooner than the default resnet20 (models/__init__.py).
MODEL = "resnet8"

# Once a rank exits non-zero, mpirun (Open MPI 4.1.4) stays about twice its SIGTERM-to-SIGKILL
# grace after every rank is gone: measured 19 s at the Makefile's 10 s, 3 s at 2 s. The grace
# lets a rank checkpoint when mpirun itself is signalled (test_slurm's scancel and preemption, make
# faults); where nothing signals mpirun the ranks leave together after rank 0 wrote everything
# (training/signals.leave), so those tests pass this and stop waiting for nothing (and show that
# no rank leans on the grace).
NO_GRACE = {"OMPI_MCA_odls_base_sigkill_timeout": "1"}


def horovodrun(np_, *args, gloo=False, timeout=600, check=False, extra_env=None):
  """Run `horovodrun -np N [--gloo] ARGS` from the repository; returns CompletedProcess.

  Python scripts get this interpreter, so the ranks run inside the same venv.
  Output goes through files, not pipes, and a run past its timeout is killed
  with its whole process group (mpirun and every rank), its output kept in
  the failure message. extra_env: variables over the launches' environment (NO_GRACE).
  """
  cmd = ["horovodrun", "-np", str(np_), "-H", f"localhost:{np_}"]
  if gloo:
    cmd.append("--gloo")
  cmd += [sys.executable if a == "python" else a for a in args]
  with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
    proc = subprocess.Popen(cmd, cwd=REPO, env=dict(_env(), **(extra_env or {})), stdin=subprocess.DEVNULL, stdout=out,
                            stderr=err, text=True, start_new_session=True)
    try:
      proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
    out.seek(0)
    err.seek(0)
    result = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())
  if result.returncode == -signal.SIGKILL:
    raise AssertionError(f"{' '.join(cmd)} ran past {timeout} s and was killed\n"
                         f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}")
  if check and result.returncode:
    raise AssertionError(f"{' '.join(cmd)} exited {result.returncode}\n"
                         f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}")
  return result


def python(*args, timeout=600):
  """Run this interpreter on ARGS from the repository; returns CompletedProcess."""
  return subprocess.run([sys.executable, *args], cwd=REPO, env=_env(), capture_output=True,
                        text=True, timeout=timeout)


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory):
  """The digits TFRecords, written once per test session."""
  from input import digits
  path = str(tmp_path_factory.mktemp("digits"))
  digits.write(path)
  return path
