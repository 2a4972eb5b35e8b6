"""training/watchdog.py: the stall limit and the culprits as tables; the thread ending a hung
process with one line."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO, _env
from training import outcome, watchdog


@pytest.mark.parametrize("floor, steps, first_time, want", [
    (300, [], True, 600),                   # the first step (or evaluation): twice the floor
    (10, [0.1], True, watchdog.STARTUP_SECONDS),
    (300, [0.1] * 10, False, 300),          # fast steps: the floor
    (300, [20.0, 30.0, 25.0], False, 500),  # slow steps: 20 typical steps
    (0.5, [1.0], False, 20.0),
])
def test_stall_limit(floor, steps, first_time, want):
  assert watchdog.stall_limit(floor, steps, first_time) == want


def test_the_first_evaluation_is_first_time_work_until_it_has_ended(tmp_path):
  # Rank 0 done with its first evaluation's batches waits in the closing exchange for a rank still
  # tracing its own: a 10 s limit there ended a healthy job (make test, both cores loaded).
  dog = watchdog.Watchdog(rank=0, size=2, floor_seconds=10, directory=str(tmp_path))
  for step in (1, 2):
    dog.mark("step")
    dog.progress(step)
  assert dog.limit() == 10
  dog.mark("eval")
  dog.progress(2, "eval", timed=False)
  assert dog.limit() == watchdog.STARTUP_SECONDS
  dog.evaluated(2)
  dog.mark("step")
  dog.progress(3)
  dog.mark("eval")
  dog.progress(3, "eval", timed=False)
  assert dog.limit() == 10
  assert watchdog.Watchdog(rank=1, size=2, floor_seconds=10, directory=str(tmp_path)).limit() == \
      watchdog.STARTUP_SECONDS + watchdog.GRACE_SECONDS


def beat(step, phase, age, progress_age=None, host="h2", pid=42):
  now = 1000.0
  return {"host": host, "pid": pid, "step": step, "phase": phase, "beat_time": now - age,
          "progress_time": now - (progress_age if progress_age is not None else age)}


@pytest.mark.parametrize("beats, own_step, want", [
    ({1: beat(57, "step", 1.0)}, 57, []),                                      # waiting with us: fine
    ({1: beat(57, "step", 60.0)}, 57, ["rank 1 on h2 (pid 42) last heard 60 s ago at step 57 (step): "
                                       "stopped or dead"]),
    ({1: beat(56, "input", 1.0, 70.0)}, 57, ["rank 1 on h2 (pid 42) is at step 56 (input), no progress "
                                              "for 70 s"]),
    ({1: None}, 57, ["rank(s) 1: no heartbeat visible (is --model_dir on a filesystem every host shares?)"]),
    ({1: beat(57, "step", 1.0), 2: beat(50, "step", 30.0, host="h3", pid=7), 3: None}, 57,
     ["rank 2 on h3 (pid 7) last heard 30 s ago at step 50 (step): stopped or dead",
      "rank(s) 3: no heartbeat visible (is --model_dir on a filesystem every host shares?)"]),
])
def test_culprits(beats, own_step, want):
  assert watchdog.culprits(beats, 1000.0, own_step) == want




# Three quick steps under a watchdog (rank 0 of `size`, the given floor), then step 4: {step4}.
WATCHED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from training import watchdog
    watchdog.STARTUP_SECONDS = 0.5
    dog = watchdog.Watchdog(rank=0, size={size}, floor_seconds={floor}, directory={beats!r},
                            newest_checkpoint=lambda: "runs/x/ckpt-40")
    dog.start()
    for step in (1, 2, 3):
      dog.mark("step")
      time.sleep(0.05)
      dog.progress(step)
    dog.mark("step")
    print("ready", flush=True)
    {step4}
""")
HANGS = "time.sleep(30)  # step 4 hangs"
# A 7 s step (limit 4 s), of which the test stops the process for 5 s.
SLOW = "time.sleep(7); dog.progress(4); dog.close()"


def test_the_watchdog_ends_a_hung_process_with_one_line(tmp_path):
  beats = tmp_path / "beats"
  beats.mkdir()
  # A stopped peer: its heartbeat stopped a minute ago at step 3.
  (beats / "rank-1.json").write_text(
      '{"rank": 1, "host": "h2", "pid": 42, "step": 3, "phase": "step", "progress_time": %f, '
      '"beat_time": %f}' % (time.time() - 60, time.time() - 60))
  script = tmp_path / "hang.py"
  script.write_text(WATCHED.format(repo=REPO, beats=str(beats), size=2, floor=0.5, step4=HANGS))
  proc = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True, text=True, timeout=60)
  assert proc.returncode == outcome.STALLED, proc.stderr
  assert proc.stdout.strip() == "ready"
  (line,) = proc.stderr.strip().splitlines()
  assert line.startswith("stalled: rank 0 on ") and "after step 3 (step)" in line, line
  assert "rank 1 on h2 (pid 42) last heard" in line and "stopped or dead" in line, line
  assert "(newest checkpoint runs/x/ckpt-40)" in line and "exit 4" in line, line
  assert (beats / "rank-0.json").exists()


def test_a_rank_stopped_and_continued_does_not_count_its_own_stop_as_a_stall(tmp_path):
  # Open MPI continues a SIGSTOPped rank before terminating it; that rank woke up, found
  # 40 s without progress and blamed rank 0, which had named it and exited already.
  # Here the watchdog wakes 5.5 s into the step, 1.5 s before the step ends.
  script = tmp_path / "stopped.py"
  script.write_text(WATCHED.format(repo=REPO, beats=str(tmp_path / "beats"), size=1, floor=4, step4=SLOW))
  proc = subprocess.Popen([sys.executable, str(script)], env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  try:
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signal.SIGSTOP)
    time.sleep(5)
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
  finally:
    proc.kill()
    proc.wait(timeout=10)
  assert proc.returncode == 0, err
