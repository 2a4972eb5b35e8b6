"""training/outcome.py, training/watchdog.py and training/signals.py: the pure verdicts as tables,
and the signal handling and launcher watch on real processes."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO, _env
from training import outcome, signals, watchdog
from training.outcome import DIVERGED, OK, STOPPED


@pytest.mark.parametrize("finite, stop, skipped, fp16, want", [
    (True, 0, 0, False, (OK, 0)),
    (True, 15, 0, False, (STOPPED, 0)),            # a stop after a good step: checkpoint and stop
    (False, 0, 0, False, (DIVERGED, 1)),           # fp32/bf16: one non-finite step is divergence
    (False, 15, 0, False, (DIVERGED, 1)),          # divergence wins over a stop request
    (False, 0, 0, True, (OK, 1)),                  # fp16: an overflow lowers the scale and goes on
    (False, 0, 8, True, (OK, 9)),
    (False, 0, 9, True, (DIVERGED, 10)),           # the 10th in a row: the scale cannot recover
    (True, 0, 9, True, (OK, 0)),                   # a finite step resets the count
    (False, 10, 3, True, (STOPPED, 4)),            # fp16 skip + stop: weights unchanged, so resumable
])
def test_after_step(finite, stop, skipped, fp16, want):
  verdict = outcome.after_step(finite, stop, skipped, fp16, max_skipped=10)
  assert (verdict.status, verdict.skipped) == want


@pytest.mark.parametrize("floor, steps, first_time, want", [
    (300, [], True, 600),                   # the first step (or evaluation): twice the floor
    (10, [0.1], True, watchdog.STARTUP_SECONDS),
    (300, [0.1] * 10, False, 300),          # fast steps: the floor
    (300, [20.0, 30.0, 25.0], False, 500),  # slow steps: 20 typical steps
    (0.5, [1.0], False, 20.0),
])
def test_stall_limit(floor, steps, first_time, want):
  assert watchdog.stall_limit(floor, steps, first_time) == want


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


CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from training import signals
    request = signals.StopRequest(poll_seconds=0.1)
    request.install()
    open({ready!r}, "w").close()
    deadline = time.time() + 30
    while not request.code and time.time() < deadline:
      time.sleep(0.05)
    with open({out!r}, "w") as fh:
      fh.write(f"{{request.code}} {{request.reason}}")
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
""")


def _child(tmp_path, *args, launcher=None):
  ready, out = tmp_path / "ready", tmp_path / "out"
  script = tmp_path / "child.py"
  script.write_text(CHILD.format(repo=REPO, ready=str(ready), out=str(out)))
  cmd = [sys.executable, str(script), *args]
  proc = subprocess.Popen(launcher + [" ".join(cmd)] if launcher else cmd, env=_env(), start_new_session=True)
  deadline = time.time() + 60
  while not ready.exists() and time.time() < deadline:
    time.sleep(0.05)
  assert ready.exists(), "the child did not start"
  return proc, out


def _result(out, timeout=30):
  deadline = time.time() + timeout
  while not (out.exists() and out.read_text()) and time.time() < deadline:
    time.sleep(0.05)
  return out.read_text()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP])
def test_a_stop_signal_is_a_request_not_an_exit(tmp_path, sig):
  proc, out = _child(tmp_path)
  try:
    proc.send_signal(sig)
    assert _result(out) == f"{int(sig)} {signal.Signals(sig).name} received"
    assert proc.wait(timeout=30) == 0  # it went on and finished normally
  finally:
    proc.kill()
    proc.wait()


def test_a_second_signal_ends_the_process_at_once(tmp_path):
  proc, out = _child(tmp_path, "30")  # after the request it would sleep 30 s
  try:
    proc.send_signal(signal.SIGTERM)
    assert _result(out).startswith("15 ")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
  finally:
    proc.kill()
    proc.wait()


def test_the_launcher_gone_is_a_stop_request(tmp_path):
  # sh -c "python child.py; true": sh stays the child's parent, as horovodrun's
  # /bin/sh stays mpirun's. Killing sh alone (not its group) is what a SIGTERM
  # to horovodrun did.
  proc, out = _child(tmp_path, launcher=["sh", "-c"])
  try:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    code, _, reason = _result(out).partition(" ")
    assert int(code) == signals.LAUNCHER_GONE and "(sh) is gone" in reason, reason
  finally:
    os.killpg(proc.pid, signal.SIGKILL)


WATCHED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from training import watchdog
    watchdog.STARTUP_SECONDS = 0.5
    dog = watchdog.Watchdog(rank=0, size=2, floor_seconds=0.5, directory={beats!r},
                            newest_checkpoint=lambda: "runs/x/ckpt-40")
    dog.start()
    for step in (1, 2, 3):
      dog.mark("step")
      time.sleep(0.05)
      dog.progress(step)
    dog.mark("step")
    time.sleep(30)  # step 4 hangs
""")


def test_the_watchdog_ends_a_hung_process_with_one_line(tmp_path):
  beats = tmp_path / "beats"
  beats.mkdir()
  # A stopped peer: its heartbeat stopped a minute ago at step 3.
  (beats / "rank-1.json").write_text(
      '{"rank": 1, "host": "h2", "pid": 42, "step": 3, "phase": "step", "progress_time": %f, '
      '"beat_time": %f}' % (time.time() - 60, time.time() - 60))
  script = tmp_path / "hang.py"
  script.write_text(WATCHED.format(repo=REPO, beats=str(beats)))
  proc = subprocess.run([sys.executable, str(script)], env=_env(), capture_output=True, text=True, timeout=60)
  assert proc.returncode == outcome.STALLED, proc.stderr
  (line,) = proc.stderr.strip().splitlines()
  assert line.startswith("stalled: rank 0 on ") and "after step 3 (step)" in line, line
  assert "rank 1 on h2 (pid 42) last heard" in line and "stopped or dead" in line, line
  assert "(newest checkpoint runs/x/ckpt-40)" in line and "exit 4" in line, line
  assert (beats / "rank-0.json").exists()
