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


# How make test's workers (--dist loadfile: whole files) share the suite. xdist hands out the files
# with the most tests first, which left the files that launch ranks (a few tests of minutes each) for
# the end: in a suite of 39 minutes on a loaded machine, tests/multiprocess/test_elastic.py ran alone
# for its last 7. Two launches at once slow each other (af07344 measured it), so a worker takes a
# launch file only while no other runs one, longest first, and takes the in-process files, longest
# first, meanwhile; once those are gone every worker takes launches, and the last launch file to start
# ends the suite: longest first puts the short ones there. Seconds each file took in an idle make test
# at b8c2152 (13:21; its slowest tests summed, rounded): an order, not a bound. A file not listed counts 0
# and keeps xdist's order.
LAUNCH_S = {
    "tests/multiprocess/test_slurm.py": 400,
    "tests/multiprocess/test_checks.py": 360,
    "tests/multiprocess/test_elastic.py": 335,
    "tests/multiprocess/test_train.py": 230,
    "tests/multiprocess/test_faults.py": 210,
    "tests/scripts/test_cluster.py": 60,
}
IN_PROCESS_S = {
    "tests/input/test_train_on_sources.py": 250,
    "tests/input/test_sources.py": 250,
    "tests/input/test_fashion_mnist.py": 235,
    "tests/training/test_checkpoints.py": 200,
    "tests/training/test_shape.py": 150,
    "tests/input/test_elastic_plan.py": 120,
    "tests/input/test_tfds_imagenet.py": 110,
    "tests/training/test_export.py": 80,
    "tests/flags/test_train_flags.py": 60,
    "tests/comm/test_horovod_race.py": 35,
}


def pytest_xdist_make_scheduler(config, log):
  """make test's scheduler (--dist loadfile): files handed out as LAUNCH_S says."""
  if config.getvalue("dist") != "loadfile":
    return None
  from xdist.scheduler import LoadFileScheduling

  class OneLaunchAtATime(LoadFileScheduling):
    def _running_a_launch(self, node) -> bool:
      return any(scope in LAUNCH_S and not all(done.values())
                 for scope, done in self.assigned_work.get(node, {}).items())

    def _assign_work_unit(self, node):
      others = [n for n in self.assigned_work if n is not node]
      queue = list(self.workqueue)
      launches = [s for s in queue if s in LAUNCH_S]
      rest = [s for s in queue if s not in LAUNCH_S]
      if launches and not (rest and any(self._running_a_launch(n) for n in others)):
        chosen = max(launches, key=LAUNCH_S.get)
      else:
        chosen = max(rest, key=lambda s: (IN_PROCESS_S.get(s, 0), -queue.index(s)))
      self.workqueue.move_to_end(chosen, last=False)  # what the parent hands out next
      super()._assign_work_unit(node)

    def _reschedule(self, node):
      # The next file once this one is on its last test (a worker needs one test ahead), not two
      # ahead: a worker starting a launch file of 2 tests took a second file at once, and a launch
      # file queued there waited behind it while the other worker ran out of work.
      if node.shutting_down or not self.workqueue or self._pending_of(self.assigned_work[node]) <= 1:
        super()._reschedule(node)

  return OneLaunchAtATime(config, log)


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
