"""scripts/slurm/requeue.sh's rule, in bash: a preempted run is requeued when it stopped resumable (75)
or, whatever its status, when it checkpointed after it began (the sbatch scripts source it)."""
import os
import subprocess

import pytest

from conftest import REPO


def should_requeue(rc: int, mark: str, model_dir: str) -> bool:
  script = os.path.join(REPO, "scripts", "slurm", "requeue.sh")
  proc = subprocess.run(["bash", "-c", f'source "{script}"; should_requeue "$@"', "_", str(rc), mark, model_dir],
                        capture_output=True, text=True, timeout=30)
  assert proc.returncode in (0, 1), proc.stderr
  return proc.returncode == 0


@pytest.mark.parametrize("rc, checkpoint_age, want", [
    (75, None, True),    # stopped resumable, with or without a new checkpoint
    (137, -100, True),   # SIGKILLed once the notice ran out (an evaluation longer than it): its checkpoint counts
    (143, -100, True),
    (1, -100, True),     # whatever the status
    (137, 100, False),   # only a checkpoint from before this run began: nothing gained by requeueing
    (137, None, False),  # none at all (failed at start-up): not requeued for ever
])
def test_a_preempted_run_is_requeued_when_it_stopped_resumable_or_checkpointed_since_it_began(
    tmp_path, rc, checkpoint_age, want):
  mark = tmp_path / ".run-start-7"
  mark.touch()
  began = os.stat(mark).st_mtime
  if checkpoint_age is not None:
    index = tmp_path / "ckpt-40.index"
    index.touch()
    os.utime(index, (began - checkpoint_age, began - checkpoint_age))  # age < 0: written after the start
  assert should_requeue(rc, str(mark), str(tmp_path)) is want
