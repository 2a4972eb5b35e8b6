"""What bench/faults/slurm.py reads from a batch log (common.sh's and train.py's lines), and which
rows --only picks; the launches themselves run under `make faults` and tests/multiprocess/test_slurm.py."""
import pytest

from bench.faults import slurm as faults_slurm

# A preempted, requeued job's log (cpu_nodes.sbatch, srun, 2 hosts), cut to the lines that matter.
FIRST = """job 7: 2 node(s) [imcsfault-h[1-2]], 2 ranks, launcher srun, run 0 (requeues so far)
epoch   1.65  step     38/80  loss 1.9  top1 0.4  lr 0.1     181.5 img/s  eta 0:00:46
epoch   1.70  step     39/80  loss 1.8  top1 0.5  lr 0.1     209.0 img/s  eta 0:00:40
job 7: SIGUSR1 at 12:17:37; the ranks finish their step and checkpoint
stopped: SIGUSR1 received at step 39 (epoch 1.70); checkpoint m/ckpt-39; run the same command to resume (exit 75)
srun: error: imcsfault-h1: task 0: Exited with exit code 75
job 7: run 0 exits 75
job 7: requeued; the next run resumes from m
"""
SECOND = """job 7: 2 node(s) [imcsfault-h[1-2]], 2 ranks, launcher srun, run 1 (requeues so far)
resumed from m/ckpt-39 at step 39
epoch   3.48  step     80/80  loss 0.1  top1 1.0  lr 0.1     209.0 img/s  eta 0:00:00
job 7: run 1 exits 0
"""


@pytest.mark.parametrize("text, step, line, status", [
    (FIRST, 39, FIRST.splitlines()[4], 75),
    (SECOND, 80, "", 0),
    ("", 0, "", None),  # a run killed before common.sh could print its status
])
def test_what_a_run_printed(text, step, line, status):
  assert (faults_slurm.last_step(text), faults_slurm.user_line(text), faults_slurm.run_exit(text)) == \
      (step, line, status)


@pytest.mark.parametrize("exit_code, want", [("75:0", 75), ("0:15", -15), ("0:0", 0), ("UNKNOWN", None)])
def test_slurm_exit_code_as_one_number(exit_code, want):
  assert faults_slurm.slurm_exit(exit_code) == want


def test_the_second_run_is_told_from_the_first():
  first, _, second = (FIRST + SECOND).partition(faults_slurm.SECOND_RUN)
  assert faults_slurm.run_exit(first) == 75 and faults_slurm.run_exit(second) == 0
  assert faults_slurm.RESUMED.search(second).group(1) == "39" and not faults_slurm.RESUMED.search(first)


def test_only_other_rows_start_no_slurm(tmp_path):
  assert faults_slurm.rows("sigkill-rank-mpi,disk-full", str(tmp_path)) == ([], None)


ROW = {"line": FIRST.splitlines()[4], "checkpoint_step": 39, "last_step": 39, "resumed_from": 39,
       "resume_exit_status": 0, "processes_left": 0, "resume_processes_left": 0, "exit_status": 75, "requeued": True,
       "resume_state": "COMPLETED"}
IN_EVAL = dict(ROW, line="stopped: SIGUSR1 received at step 23 (epoch 1.00); checkpoint m/ckpt-23; run the same "
               "command to resume (exit 75)", checkpoint_step=23, last_step=23, resumed_from=23, phase_at_fault="eval",
               step_at_fault=23, seconds_to_stop_line=1.8, evaluated_in_first_run=False, resume_eval_seconds=41.0,
               resume_evaluated="epoch 1.00 eval top1 0.3867 top5 0.8733 loss 2.0220")


def test_a_preempted_job_is_kept_when_it_stopped_at_its_checkpoint_requeued_and_completed():
  assert faults_slurm.verdict("slurm-preempt-srun", ROW)["kept"]
  assert not faults_slurm.verdict("slurm-preempt-srun", dict(ROW, requeued=False))["kept"]
  assert not faults_slurm.verdict("slurm-preempt-srun", dict(ROW, last_step=40))["kept"]  # a step past its checkpoint
  assert not faults_slurm.verdict("slurm-preempt-mpirun", dict(ROW, exit_status=137))["kept"]
  cancelled = dict(ROW, line=ROW["line"].replace("SIGUSR1", "SIGTERM"), exit_status=143, requeued=False)
  assert faults_slurm.verdict("slurm-scancel-srun", cancelled)["kept"]
  assert not faults_slurm.verdict("slurm-scancel-srun", dict(cancelled, requeued=True))["kept"]


def test_a_notice_during_an_evaluation_stops_it_within_the_window_and_the_requeued_run_evaluates_again():
  assert faults_slurm.verdict("slurm-usr1-in-eval", IN_EVAL)["kept"]
  assert not faults_slurm.verdict("slurm-usr1-in-eval", dict(IN_EVAL, seconds_to_stop_line=None))["kept"]
  assert not faults_slurm.verdict("slurm-usr1-in-eval", dict(IN_EVAL, seconds_to_stop_line=130.0))["kept"]
  assert not faults_slurm.verdict("slurm-usr1-in-eval", dict(IN_EVAL, evaluated_in_first_run=True))["kept"]
  assert not faults_slurm.verdict("slurm-usr1-in-eval", dict(IN_EVAL, resume_evaluated=None))["kept"]
  assert not faults_slurm.verdict("slurm-usr1-in-eval", dict(IN_EVAL, phase_at_fault="step"))["kept"]


def test_the_requeued_runs_first_evaluation_is_the_interrupted_one():
  second = ("resumed from m/ckpt-23 at step 23\nepoch   1.00  eval top1 0.3867  top5 0.8733  loss 2.0220\n"
            "epoch   1.04  step     24/24  loss 1.9  top1 0.4  lr 0.1\n")
  assert faults_slurm._evaluated_first(second) == "epoch 1.00 eval top1 0.3867 top5 0.8733 loss 2.0220"
  trained_first = second.splitlines()[0] + "\n" + second.splitlines()[2] + "\n" + second.splitlines()[1]
  assert faults_slurm._evaluated_first(trained_first) is None
