"""bench/harness/launches.py's and hosts.py's reading of a launch's log (the launches themselves:
tests/multiprocess), and train_runs.shown's command as the results keep it."""
import os
import signal
import subprocess
import sys
import time

import pytest

from bench.harness import REPO
from bench.harness.hosts import regrown, stalled_after_horovod_died
from bench.harness.launches import Job, last_step
from bench.harness.slurm_jobs import started
from bench.harness.train_runs import shown

LINEAR = "[1,0]<stderr>:epoch   0.35  step      8/276  loss 2.2830  top1 0.281  lr 0.03043     1712.3 img/s  eta 0:00:10\n"
ADASCALE = ("[0]<stderr>:epoch   3.72  update    102  loss 0.2289  top1 0.938  lr 0.01067  B_simple     222  "
            "r  1.78  data epoch   4.36     557.4 img/s  eta 0:00:00\n")


@pytest.mark.parametrize("text, want", [
    ("", 0),
    (LINEAR, 8),
    (LINEAR + LINEAR.replace("8/276", "9/276"), 9),
    (ADASCALE, 102),  # --lr_scaling=adascale counts updates
    ("[0]<stderr>:15:04:24 training steps 0..69 (23 per epoch, 3.0 epochs)\n", 0),
])
def test_last_step_reads_the_newest_progress_line(text, want):
  assert last_step(text) == want


def worlds(*sizes: int) -> str:
  return "".join(f"[0]<stderr>:16:36:{i:02d} world: {n} ranks on {n} hosts at step {5 * i} (epoch 0, 0 of its "
                 f"examples trained); batch 32 per rank, global {32 * n}\n" for i, n in enumerate(sizes))


@pytest.mark.parametrize("sizes, want", [
    ((), None),
    ((2,), None),
    ((2, 1), None),
    ((2, 1, 2), 2),
    ((2, 1, 1, 2), 3),  # the host's removal reached the survivor after its reset: one world of one more (CI)
    ((2, 2, 1, 2), 3),  # a world re-formed at full size first is not a return
    ((4, 2, 3, 4), 3),
])
def test_regrown_finds_the_full_world_after_the_first_smaller_one(sizes, want):
  assert regrown(worlds(*sizes), sizes[0] if sizes else 2) == want


DIED = ("[1]<stderr>:[2026-12-05 08:41:07.512: E horovod/common/operations.cc:697] [0]: Horovod background loop "
        "uncaught exception: [gloo/transport/tcp/pair.cc:589] Connection closed by peer [198.18.15.3]:34071\n")
STALL = ("[1]<stderr>:stalled: rank 0 on imcelt-1 saw no progress for 310 s (limit 300 s) after step 17 (step); "
         "--elastic: the other ranks are not compared (a world change renumbers them); ending the job (exit 4); "
         "resume with the same command (newest checkpoint runs/x/ckpt-15)\n")


@pytest.mark.parametrize("text, want", [
    ("", False),
    (DIED, False),                    # the loop died and the reset went on: the usual lost host
    (STALL, False),                   # a stall with no dead loop is this project's to explain
    (DIED + STALL, True),
    (STALL + DIED, False),            # the stall came first: not the race
    (DIED + STALL.replace("--elastic: the other ranks are not compared", "rank 1 on h (pid 9) is at step 3"), False),
])
def test_a_stall_after_horovods_loop_died_is_told_apart(text, want):
  assert stalled_after_horovod_died(text) == want


def test_a_command_is_kept_as_typed_at_the_repository_root():
  cmd = ["bash", f"{REPO}/scripts/cluster/cluster.sh", "run", "horovodrun", "--gloo", "--host-discovery-script",
         f"{REPO}/scripts/elastic/discover_hosts.sh", sys.executable, "train.py", f"--model_dir={REPO}/runs/x",
         "--data_dir=/elsewhere/data"]
  assert shown(cmd) == ("bash scripts/cluster/cluster.sh run horovodrun --gloo --host-discovery-script "
                        "scripts/elastic/discover_hosts.sh python train.py --model_dir=runs/x "
                        "--data_dir=/elsewhere/data")


def test_a_line_written_just_before_the_job_ends_is_seen(tmp_path):
  # The predicate reads the log, then takes a second (a loaded machine); the job writes its line and
  # ends meanwhile. Asking whether it ended after reading the log reported "ended before" a line it wrote.
  program = [sys.executable, "-c", "import sys, time; time.sleep(0.5); print('awaited', file=sys.stderr)"]
  calls = []

  def seen(text):
    calls.append(text)
    if len(calls) == 1:
      time.sleep(1.5)  # the job writes its line and ends meanwhile
    return "awaited" in text

  with Job(str(tmp_path), launcher=["env"], program=program) as job:
    assert job.wait_until(seen, "the awaited line", timeout=60) < 60


def test_reading_the_log_while_the_job_writes_it_loses_no_line(tmp_path):
  # Each read seeks the log to 0; the job's processes share that open file, so without O_APPEND a
  # line written between the seek and the read went to offset 0, over the first lines.
  program = [sys.executable, "-c", "import sys\nfor i in range(20000):\n  print(f'line {i:05d} ' + 'x' * 100, "
             "file=sys.stderr, flush=True)"]
  with Job(str(tmp_path), launcher=["env"], program=program) as job:
    reads = 0
    while job.proc.poll() is None or reads == 0:
      job.stderr()
      reads += 1
    job.proc.wait(timeout=60)
    lines = job.stderr().splitlines()
  assert lines == [f"line {i:05d} " + "x" * 100 for i in range(20000)], (reads, lines[:1], len(lines))


def test_a_process_that_outlives_its_parent_is_tracked_and_ended_by_pid(tmp_path):
  # The launcher's child starts a grandchild and exits: the grandchild, now an orphan, is still the
  # job's (found while its parent ran), and kill() ends it.
  pid_file = tmp_path / "orphan.pid"
  script = ("import subprocess, sys, time; p = subprocess.Popen(['sleep', '300']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(1.5)")
  try:
    with Job(str(tmp_path), launcher=["env"], program=[sys.executable, "-c", script]) as job:
      deadline = time.time() + 60
      while job.proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
      orphan = int(pid_file.read_text())
      assert job.proc.returncode == 0 and job.alive() == {orphan}, (job.proc.returncode, job.alive(), orphan)
    deadline = time.time() + 30  # SIGKILLed on leaving the job; gone once the kernel is done with it
    while started(orphan) is not None and time.time() < deadline:
      time.sleep(0.05)
    assert started(orphan) is None, f"the job's orphan {orphan} outlived the job"
  finally:  # the test's own process, by its id, also when the job lost track of it
    if pid_file.exists() and started(int(pid_file.read_text())) is not None:
      os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_failed_jobs_tail_leads_with_the_lines_that_say_why(tmp_path):
  # An abort's dump of extension modules fills the end of the log; the cause came long before it.
  program = [sys.executable, "-c", "import sys; print('terminate called after throwing gloo::IoException', file=sys.stderr); "
             "print('Fatal Python error: Aborted', file=sys.stderr); print('m, ' * 5000, file=sys.stderr)"]
  with Job(str(tmp_path), launcher=["env"], program=program) as job:
    job.wait_gone(60)
    tail = job.tail()
  assert tail.startswith("lines saying why (of 3):\nterminate called after throwing gloo::IoException\n"
                         "Fatal Python error: Aborted\nstdout:"), tail[:300]
  assert tail.endswith("m, m, \n") and len(tail) < 7000


def test_a_launchs_logs_are_saved_beside_its_run(tmp_path):
  program = [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]
  with Job(str(tmp_path), launcher=["env"], program=program) as job:
    job.wait_gone(60)
    job.save_logs(str(tmp_path))
  assert (tmp_path / "stdout.log").read_text() == "out\n" and (tmp_path / "stderr.log").read_text() == "err\n"


# A program that brought something up, as make faults brings up its hosts: SIGTERM runs its finally.
AFTER_UP = """
import sys, time
from bench.harness import stop_on_sigterm
stop_on_sigterm()
try:
  print("up", flush=True)
  time.sleep(60)
finally:
  open(sys.argv[1], "w").write("down")
"""


def test_sigterm_takes_down_what_a_program_brought_up(tmp_path):
  marker = tmp_path / "down"
  child = subprocess.Popen([sys.executable, "-c", AFTER_UP, str(marker)], cwd=REPO, stdout=subprocess.PIPE, text=True)
  try:
    assert child.stdout.readline() == "up\n"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 128 + signal.SIGTERM
  finally:
    child.kill()
    child.wait(timeout=30)
  assert marker.read_text() == "down"
