"""Faults against real launches of train.py (2 ranks, digits): every process gone, the exit
status that says why, and a checkpoint at the step it stopped (that a launch resumes from a
checkpoint: test_train.py's killed-run test; make faults restarts after every fault).

The machinery is bench/launches.py's Job (the same that `make faults` reports times with): each
job runs in a session of its own and every pid it ever had is tracked, so the test ends exactly
those processes, by pid, whatever happens.
"""
import json
import os
import re
import signal

import pytest

from bench.harness.launches import Job, newest_checkpoint
from conftest import MODEL, NO_GRACE
from training.ending import outcome

pytestmark = pytest.mark.multiprocess

ARGS = (f"--model={MODEL}", "--max_steps=600", "--log_every=1", "--checkpoint_every=20")
GONE_S = 600  # a bound, not a timing: a loaded 2-core machine took minutes to start and evaluate


# The launcher (MPI: only the launcher watch can tell) and one rank (Gloo: the agreement inside the
# step carries it to the other); make faults measures the other combinations.
@pytest.mark.parametrize("gloo, target", [(False, None), (True, 0)], ids=["sigterm-horovodrun-mpi", "sigusr1-rank0-gloo"])
def test_a_signal_stops_every_rank_after_a_checkpoint(tmp_path, gloo, target):
  sig = signal.SIGUSR1 if gloo else signal.SIGTERM
  with Job(str(tmp_path), *ARGS, gloo=gloo, extra_env=NO_GRACE) as job:
    job.wait_for_step(5, timeout=600)
    job.signal(sig, target)
    _, left = job.wait_gone(GONE_S)
    assert not left, f"processes left: {left}\n{job.tail()}"
    (line,) = [l for l in job.user_lines() if l.startswith("stopped:")]
    stopped_at = int(re.search(r"at step (\d+)", line).group(1))
    assert newest_checkpoint(str(tmp_path)) == stopped_at, (line, os.listdir(tmp_path))
    assert f"exit {outcome.STOPPED}" in line and not job.rank_traceback(), job.tail()
    if gloo:  # horovodrun over Gloo names the ranks' status, then exits 1 with its own RuntimeError
      assert f"exit with status code {outcome.STOPPED}" in job.stdout() and job.proc.returncode == 1, job.tail()
    elif target is not None:  # mpirun reports the ranks' status
      assert job.proc.returncode == outcome.STOPPED, job.tail()
    summary = json.load(open(tmp_path / "summary.json"))
    assert summary["status"] == "stopped" and summary["stopped_at_step"] == stopped_at
  # That a launch resumes from a checkpoint is test_train.py's killed-run test (past a damaged one);
  # make faults restarts after every fault and times it.


def test_a_stopped_rank_ends_the_job_naming_it(tmp_path):
  with Job(str(tmp_path), *ARGS, "--stall_timeout=10") as job:
    job.wait_for_step(25, timeout=600)
    job.signal(signal.SIGSTOP, 1)
    _, left = job.wait_gone(GONE_S)
    assert not left, f"processes left: {left}\n{job.tail()}"
    assert job.proc.returncode == outcome.STALLED, job.tail()
    lines = [l for l in job.user_lines() if l.startswith("stalled: rank 0")]
    assert lines and re.search(r"rank 1 on \S+ \(pid \d+\) last heard \d+ s ago", lines[0]), job.tail()
    # Open MPI continues the stopped rank before ending it: it must not blame rank 0 then.
    assert not [l for l in job.user_lines() if l.startswith("stalled: rank 1")], job.tail()
  # (The restart after a stall resumes like any other: make faults measures it.)


def test_a_killed_rank_on_gloo_leaves_the_survivor_no_traceback(tmp_path):
  # mpirun ends the survivors itself. Over Gloo the survivor's collective either fails at once
  # (a traceback before: now one line and exit 5) or never returns, Horovod's background loop
  # having died, and horovodrun SIGKILLs it 5 s after its SIGTERM; both were seen here.
  with Job(str(tmp_path), *ARGS, gloo=True) as job:
    job.wait_for_step(5, timeout=600)
    job.signal(signal.SIGKILL, 1)
    _, left = job.wait_gone(GONE_S)
    assert not left, f"processes left: {left}\n{job.tail()}"
    assert job.proc.returncode != 0 and not job.rank_traceback(), job.tail()
    lines = job.user_lines()
    assert len(lines) <= 1 and all(l.startswith("error: a collective failed") and f"exit {outcome.PEER_LOST}" in l
                                   for l in lines), job.tail()


# One launch, the hardest case: fp16 on 2 ranks, where an overflow is first skipped on every rank
# (the loss scale halves) and only a run of them, or inf/NaN weights at a save, is a divergence.
# The per-step verdicts of fp32, bf16 and fp16 are tests/training/test_loop.py's, in one process.
def test_divergence_stops_every_rank_and_keeps_the_good_checkpoint(tmp_path):
  model_dir = str(tmp_path)
  # The LR rises from 0 to 1e6 per 256 over the first epoch: step 1 (LR 0) is healthy and
  # checkpointed, a few steps later the weights, the BatchNorm statistics or the loss blow up.
  # --max_skipped_steps=3, not the default 10: two overflows are still skipped on every rank before the
  # third in a row is the divergence, and fp16 steps are slow on a CPU without fp16 arithmetic (each
  # of the default's 7 more skipped steps is one of them, on both ranks).
  with Job(model_dir, *ARGS, "--base_lr=1e6", "--warmup_epochs=1", "--checkpoint_every=1", "--precision=fp16",
           "--max_skipped_steps=3", extra_env=NO_GRACE) as job:
    _, left = job.wait_gone(GONE_S)
    assert not left and job.proc.returncode == outcome.DIVERGED, job.tail()
    (line,) = [l for l in job.user_lines() if l.startswith("diverged:")]
    assert "ranks hold different weights" not in job.stderr() and not job.rank_traceback(), job.tail()
  # The newest checkpoint is the newest good one: written before the divergence, named in the
  # line, and nothing after it.
  summary = json.load(open(os.path.join(model_dir, "summary.json")))
  assert summary["status"] == "diverged" and summary["replicas_identical"] is True
  good = newest_checkpoint(model_dir)
  assert 1 <= good <= summary["stopped_at_step"], (good, summary)
  assert re.search(rf"newest good checkpoint \S*ckpt-{good};", line), line
  # (Its restart with a sane LR resumes from `good`: make faults measures it.)
