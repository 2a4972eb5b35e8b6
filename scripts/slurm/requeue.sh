# Sourced by common.sh (and by tests/scripts/test_slurm_requeue.py): whether a preempted run goes back
# in the queue.
#
# should_requeue RC START_MARK MODEL_DIR: true when the run stopped resumable (75), or, whatever its
# status, when it wrote a checkpoint after START_MARK (a file touched as the run began, in MODEL_DIR so
# that both times come from one filesystem's clock). A notice that reaches the ranks while they cannot
# stop within its window (a long evaluation or export, start-up) ends them with SIGKILL, status 137
# or 143 from the launcher: their checkpoints are intact, and requeueing only on 75 left the job out
# of the queue with its progress on disk. A run that wrote nothing new is not requeued: a job that
# fails before its first checkpoint would otherwise queue again for ever.
should_requeue() {
  local rc=$1 mark=$2 dir=$3
  [ "$rc" = 75 ] && return 0
  [ -f "$mark" ] || return 1
  [ -n "$(find "$dir" -maxdepth 1 -name 'ckpt-*.index' -newer "$mark" -print -quit 2>/dev/null)" ]
}
