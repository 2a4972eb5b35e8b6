"""training/ending/watchdog.py: the stall limit, a peer explaining a wait and the culprits as tables; the
Watchdog driven by a hand-moved clock; the thread ending a hung process with one line."""
import io
import json
import signal
import subprocess
import sys
import textwrap
import time
from unittest import mock

import pytest

from conftest import REPO, _env
from training.ending import outcome, watchdog


class Clock:
  """A clock the test moves on by hand (seconds)."""

  def __init__(self, now: float = 1000.0):
    self.now = now

  def __call__(self) -> float:
    return self.now


@pytest.mark.parametrize("floor, kind, took, first_time, want", [
    (300, "step", {}, True, 600),                             # the first step (or evaluation): twice the floor
    (10, "step", {"step": [0.1]}, True, watchdog.STARTUP_SECONDS),
    (300, "step", {"step": [0.1] * 10}, False, 300),          # fast steps: the floor
    (300, "step", {"step": [20.0, 30.0, 25.0]}, False, 500),  # slow steps: 20 typical steps
    (0.5, "step", {"step": [1.0]}, False, 20.0),
    # One step that waited for a peer's first save does not raise the steps' limit: the median.
    (10, "step", {"step": [0.1] * 10 + [30.0]}, False, 10),
    (10, "epoch", {}, True, watchdog.STARTUP_SECONDS),        # the first epoch change: the allowance
    (10, "epoch", {"epoch": [8.0, 2.5]}, False, 32.0),        # later: 4 x the slowest so far
    (10, "eval", {"eval": [1.0], "epoch": [8.0]}, False, 10),  # another kind's history is not this one's
    (10, "checkpoint", {"checkpoint": [40.0]}, False, 160.0),
    (300, "checkpoint", {"checkpoint": [40.0]}, False, 300),
    # --elastic: a world re-forming waits for --min-np ranks or a joiner's start-up; Horovod bounds it.
    (10, "world", {}, True, float("inf")),
    (10, "world", {"world": [700.0]}, False, float("inf")),
])
def test_stall_limit(floor, kind, took, first_time, want):
  assert watchdog.stall_limit(floor, kind, took, first_time) == want


def steps(dog, clock, first, last, seconds=0.25):
  """Steps first..last, each its input then its step, `seconds` each."""
  for step in range(first, last + 1):
    dog.mark("input")
    clock.now += seconds / 2
    dog.mark("step")
    clock.now += seconds / 2
    dog.progress(step)


def test_the_epoch_change_is_first_time_work_then_judged_against_the_slowest_so_far(tmp_path):
  # make test, both cores loaded, 2 runs of 2: the flat 10 s limit ended a healthy job at the first
  # epoch's end, rank 0 reading past the epoch's last batch (then judged as a step).
  clock = Clock()
  dog = watchdog.Watchdog(rank=0, size=1, floor_seconds=10, directory=str(tmp_path), clock=clock)
  steps(dog, clock, 1, 23)
  dog.mark("epoch")  # the first epoch's iterator runs out
  assert dog.limit() == watchdog.STARTUP_SECONDS
  clock.now += 8
  dog.mark("checkpoint")
  clock.now += 1
  dog.progress(23, "checkpoint", timed=False)
  dog.mark("epoch")  # the next epoch's first batch: still the first epoch change
  assert dog.limit() == watchdog.STARTUP_SECONDS
  clock.now += 3
  steps(dog, clock, 24, 46)
  dog.mark("epoch")  # a later epoch change: 4 x the first one's 8 s, not the floor, nor the allowance
  assert dog.limit() == 32
  clock.now += 12    # slower than the 10 s floor: not a stall
  assert dog.overdue() is None
  clock.now += 21
  assert dog.overdue() == (33, 32)
  dog.mark("step")   # the epoch change ended: the step is judged from here, by the steps' limit
  assert dog.limit() == 10 and dog.overdue() is None


def test_the_input_built_again_at_another_batch_is_work_of_its_own_kind(tmp_path):
  # --batch_policy=adaptive's change of K builds the input again (a dataset, its functions traced):
  # judged by a step's limit, a slow rebuild on a loaded machine ended a healthy job.
  clock = Clock()
  dog = watchdog.Watchdog(rank=0, size=1, floor_seconds=10, directory=str(tmp_path), clock=clock)
  steps(dog, clock, 1, 20)
  dog.mark("resize")
  assert dog.limit() == watchdog.STARTUP_SECONDS  # the first: the allowance
  clock.now += 40
  assert dog.overdue() is None
  dog.progress(20, "resize", timed=False)
  steps(dog, clock, 21, 40)
  dog.mark("resize")
  assert dog.limit() == 4 * 40  # later: 4 x the slowest so far
  dog.mark("step")
  assert dog.limit() == 10


def test_an_elastic_rank_is_judged_on_its_own_progress_and_each_world_starts_afresh(tmp_path):
  # make test, a fresh clone: a survivor's step after its peer was SIGKILLed never returned (Gloo's
  # background loop died without failing the op), and with the watchdog off under --elastic the
  # survivor and horovodrun waited past the test's 900 s. A world change renumbers the ranks, so
  # no heartbeat is read or written: a peer's fresh one (a rank 1 of another world) explains nothing.
  clock = Clock()
  (tmp_path / "rank-1.json").write_text(json.dumps(beat(9, "checkpoint", age=0, limit=1e9) | {
      "progress_time": clock.now, "beat_time": clock.now}))
  dog = watchdog.Watchdog(rank=0, size=2, floor_seconds=10, directory=str(tmp_path), clock=clock, peers=False)
  steps(dog, clock, 1, 15)
  dog.mark("input")
  clock.now += 11
  assert dog.overdue() == (11, 10)  # the peer's heartbeat would have held a watchdog with peers
  dog._beat()
  assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-1.json"]
  with mock.patch.object(watchdog.os, "_exit") as ended, mock.patch.object(watchdog.sys, "stderr", io.StringIO()) as err:
    dog._fire(11, 10)  # the line does not claim the other ranks were looked at
  ended.assert_called_once_with(outcome.STALLED)
  assert "--elastic: the other ranks are not compared (a world change renumbers them)" in err.getvalue()
  assert "no other rank looks stuck" not in err.getvalue()
  dog.mark("world")  # rolled back; Horovod re-forms the world (waits --elastic-timeout for hosts)
  clock.now += 3600
  assert dog.limit() == float("inf") and dog.overdue() is None
  dog.new_world()  # the step traced again for the new size, the input rebuilt: first-time work
  assert dog.limit() == watchdog.STARTUP_SECONDS and dog.overdue() is None
  clock.now += watchdog.STARTUP_SECONDS - 1
  steps(dog, clock, 11, 12)
  assert dog.limit() == 10


def beat(step, phase, age, progress_age=None, host="h2", pid=42, limit=None):
  now = 1000.0
  beat = {"host": host, "pid": pid, "step": step, "phase": phase, "beat_time": now - age,
          "progress_time": now - (progress_age if progress_age is not None else age)}
  if limit is not None:
    beat["limit"] = limit
  return beat


@pytest.mark.parametrize("beats, grace, want", [
    # Rank 1 in step 24's allreduce, rank 0 still writing its first checkpoint: rank 0 explains the wait.
    ({0: beat(23, "checkpoint", 1.0, 30.0, limit=120)}, 10, True),
    ({0: beat(23, "checkpoint", 30.0, 30.0, limit=120)}, 10, False),   # its heartbeat is stale: stopped
    ({0: beat(23, "checkpoint", 1.0, 125.0, limit=120)}, 0, False),    # past its own limit: hung there
    # A rank other than 0 waits GRACE_SECONDS longer on a peer too, so rank 0 still fires first.
    ({0: beat(23, "checkpoint", 1.0, 125.0, limit=120)}, 10, True),
    ({1: beat(23, "eval", 1.0, 30.0, limit=130)}, 0, True),            # rank 0 waits for rank 1's first evaluation
    ({1: beat(23, "eval", 1.0, 30.0)}, 0, False),                      # no limit in its heartbeat: this rank's own
    ({1: None}, 0, False),                                             # not visible: this rank's own limit
    ({1: beat(23, "eval", 1.0, 30.0, limit=130), 2: None}, 0, True),
    # A stopped peer ends the job even while another is within its limit (that one may wait for it).
    ({1: beat(23, "eval", 1.0, 30.0, limit=130), 2: beat(23, "step", 20.0, limit=10)}, 0, False),
])
def test_explained_by_peer(beats, grace, want):
  assert watchdog.explained_by_peer(beats, 1000.0, grace) is want


def test_a_rank_waiting_for_a_peers_first_save_holds_while_the_peers_heartbeat_explains_it(tmp_path):
  # Only rank 0 writes the checkpoint files: the others' first save is quick, and they wait in the
  # next step's allreduce with a step's limit while rank 0 has the first save's allowance.
  clock = Clock()
  saver, waiter = (watchdog.Watchdog(rank=r, size=2, floor_seconds=10, directory=str(tmp_path), clock=clock)
                   for r in (0, 1))
  for dog in (saver, waiter):
    steps(dog, clock, 1, 3)
    dog.mark("checkpoint")
  waiter.progress(3, "checkpoint", timed=False)
  waiter.mark("input")
  waiter.mark("step")
  assert waiter.limit() == 10 + watchdog.GRACE_SECONDS
  clock.now += 25
  saver._beat()
  assert json.load(open(tmp_path / "rank-0.json"))["limit"] == watchdog.STARTUP_SECONDS
  assert waiter.overdue() is None  # rank 0's fresh heartbeat: 25 s into its first save's 120 s
  clock.now += 8                   # rank 0's heartbeat is 8 s old: stopped
  assert waiter.overdue() == (33, 20)
  clock.now += watchdog.STARTUP_SECONDS
  saver._beat()                    # fresh, but 153 s into a save allowed 120 s (+ rank 1's grace): hung
  assert waiter.overdue() == (153, 20)


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
    from training.ending import watchdog
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
