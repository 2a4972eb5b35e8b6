"""training/ending/signals.py on real processes: a stop signal is a request, a second one ends the
process, and a vanished launcher is a request too."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO, _env
from training.ending import signals


CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from training.ending import signals
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


def test_a_second_signal_changes_nothing(tmp_path):
  # Launchers send more than one (a forwarded notice, then their own SIGTERM): the first wins.
  proc, out = _child(tmp_path, "3")  # after the request it sleeps 3 s, then exits 0
  try:
    proc.send_signal(signal.SIGUSR1)
    assert _result(out).startswith(f"{int(signal.SIGUSR1)} SIGUSR1 received")
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
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
