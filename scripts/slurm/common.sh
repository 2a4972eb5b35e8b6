# Sourced by the sbatch scripts beside it: the repository and its Python,
# Horovod's environment, and one launch of train.py per Slurm task that stops
# with a checkpoint when Slurm asks it to.
#
# Stopping and resuming. train.py's contract: SIGTERM, SIGINT or SIGUSR1
# reaching any rank makes every rank finish its step; rank 0 writes a
# checkpoint at that step and prints a line starting "stopped:", and every
# rank exits 75 (EX_TEMPFAIL: stopped, resumable). The same command with the
# same --model_dir resumes from it. Under Slurm:
#   - preemption notice: `#SBATCH --signal=B:USR1@120` (or by hand,
#     `scancel -b -s USR1 JOB`) signals this shell alone; it passes SIGUSR1 on
#     to the ranks, and when they exit 75 (or, ended otherwise after the notice,
#     wrote a checkpoint since this run began: requeue.sh) and the job is
#     requeueable (`sbatch --requeue`), runs `scontrol requeue`: the job queues
#     again under the same id, so the same MODEL_DIR, and resumes from the checkpoint.
#     The ranks honour the notice between steps, between evaluation batches,
#     during start-up's data checks and during the export.
#     (`scontrol requeue JOB` from outside does the same with a SIGTERM.)
#   - scancel: SIGTERM to every step (srun's ranks, mpirun's daemons) and to
#     this shell, SIGKILL after the cluster's KillWait (30 s on
#     local-slurm.sh's): the ranks' time to finish a step and checkpoint. The
#     job ends CANCELLED, not requeued.
# A preemptible, requeueable job (notice 2 minutes before the time limit):
#   sbatch --requeue --signal=B:USR1@120 --time=1:00:00 scripts/slurm/cpu_nodes.sbatch
#
# Environment a submitter may set (sbatch passes its environment on):
#   LAUNCHER=srun|mpirun   srun --mpi=pmix (default) or Open MPI's mpirun inside the allocation
#   PYTHON=...             default: .venv/bin/python of the repository
#   TIMELINE=1             write a Horovod timeline to <model_dir>/timeline.json (rank 0 writes it)
#   HOROVOD_*              any of Horovod's settings; the defaults below are printed at the start
set -euo pipefail

REPO=${SLURM_SUBMIT_DIR:?"run under Slurm: sbatch scripts/slurm/<script> from the repository root"}
cd "$REPO"
[ -f train.py ] || { echo "error: $REPO has no train.py; submit from the repository root." >&2; exit 2; }
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
[ -x "$PYTHON" ] || { echo "error: no Python at $PYTHON; run 'make setup' or set PYTHON=." >&2; exit 2; }
export PATH="$(dirname "$PYTHON"):$PATH"
LAUNCHER=${LAUNCHER:-srun}
# --model_dir among the script's arguments (train.py's flags) is MODEL_DIR: the requeue check below
# reads the directory train.py writes, and no runs/slurm-<jobid> is made beside it.
previous=
for arg in "$@"; do
  case "$arg" in
    --model_dir=*) MODEL_DIR=${arg#--model_dir=} ;;
    *) if [ "$previous" = --model_dir ]; then MODEL_DIR=$arg; fi ;;
  esac
  previous=$arg
done
MODEL_DIR=${MODEL_DIR:-runs/slurm-$SLURM_JOB_ID}
source "$REPO/scripts/slurm/requeue.sh"
# When this run began, in MODEL_DIR's own clock: a checkpoint newer than it is progress to requeue for.
mkdir -p "$MODEL_DIR"
START_MARK="$MODEL_DIR/.run-start-$SLURM_JOB_ID"
touch "$START_MARK"

# Horovod's settings that matter at scale.
# Tensor fusion: gradients smaller than the buffer are packed into one
# allreduce; 64 MB is what NVIDIA's MLPerf ResNet-50 submissions used
# (Horovod's default is 128 MB).
export HOROVOD_FUSION_THRESHOLD=${HOROVOD_FUSION_THRESHOLD:-67108864}
# How often (ms) the coordinator collects ready tensors into a fused batch.
export HOROVOD_CYCLE_TIME=${HOROVOD_CYCLE_TIME:-1}
# Stall check: warn when some ranks wait 60 s on a tensor others never
# submitted, and end the job after 10 minutes instead of holding the nodes.
export HOROVOD_STALL_CHECK_TIME_SECONDS=${HOROVOD_STALL_CHECK_TIME_SECONDS:-60}
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-600}
if [ "${TIMELINE:-0}" = 1 ]; then
  mkdir -p "$MODEL_DIR"
  export HOROVOD_TIMELINE=$REPO/$MODEL_DIR/timeline.json
fi
# Open MPI refuses root unless told (containers and CI run as root).
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}

echo "job $SLURM_JOB_ID: $SLURM_JOB_NUM_NODES node(s) [$SLURM_JOB_NODELIST], $SLURM_NTASKS ranks," \
     "${SLURM_CPUS_PER_TASK:-1} CPU(s) per rank, launcher $LAUNCHER, model_dir $MODEL_DIR," \
     "run ${SLURM_RESTART_COUNT:-0} (requeues so far)"
# Where Slurm places each task, e.g. "tasks: 0 node1, 1 node2" (a step of its own, well under a second).
echo "tasks: $(srun -l hostname | sort -n | sed 's/: / /' | paste -sd, | sed 's/,/, /g')"
env | grep '^HOROVOD_' | sort | sed 's/^/  /'

# Signals reaching this shell while the step runs are passed on once, as
# SIGUSR1, to the launcher, which forwards it to every rank (srun and mpirun
# both forward SIGUSR1; srun answers SIGTERM by SIGKILLing its tasks, and
# mpirun by aborting the job, so neither may be sent that). Under srun only
# the USR1 notice is: a SIGTERM (scancel, time limit, requeue) reaches every
# step's tasks from Slurm itself, and a second copy could land while a rank
# exits, when Python has put back the default action (death).
STEP_PID=""
FORWARDED=0
PREEMPTED=0
INTERRUPTED=0
on_signal() {
  INTERRUPTED=1
  [ "$1" = USR1 ] && PREEMPTED=1
  echo "job $SLURM_JOB_ID: SIG$1 at $(date +%T); the ranks finish their step and checkpoint"
  [ "$1" != USR1 ] && [ "$LAUNCHER" = srun ] && return
  if [ -n "$STEP_PID" ] && (( ! FORWARDED )); then
    FORWARDED=1
    kill -USR1 "$STEP_PID" 2>/dev/null || true
  fi
}
for sig in USR1 TERM INT; do trap "on_signal $sig" "$sig"; done

# The launcher in a session (so a process group) of its own: where Slurm
# signals a step's whole process group (proctrack/pgid), scancel's SIGTERM
# then reaches this shell alone, as it does under proctrack/cgroup, which
# signals only the step's own processes. Waits through trapped signals;
# returns the launcher's status.
run_step() {
  local rc
  setsid "$@" &
  STEP_PID=$!
  while :; do
    INTERRUPTED=0
    rc=0
    wait "$STEP_PID" || rc=$?
    (( INTERRUPTED )) || break  # a trap ended the wait, not the step: wait again
  done
  STEP_PID=""
  return "$rc"
}

# After the step: a preempted run that stopped resumable (75), or that wrote a
# checkpoint since it began whatever its status (requeue.sh), goes back in
# the queue if the job may be requeued (sbatch --requeue, or the cluster's
# JobRequeue=1). Exits with the step's status, printed first: without
# accounting Slurm keeps no run's status once the job is requeued
# (scontrol shows ExitCode=0:0 from then on).
finish() {
  local rc=$1
  trap '' USR1 TERM INT  # requeueing ends this run with a SIGTERM: nothing left to pass on
  echo "job $SLURM_JOB_ID: run ${SLURM_RESTART_COUNT:-0} exits $rc"
  local requeue=1
  should_requeue "$rc" "$START_MARK" "$MODEL_DIR" || requeue=0
  rm -f "$START_MARK"
  if (( PREEMPTED && requeue )); then
    if scontrol show job "$SLURM_JOB_ID" | grep -q '\bRequeue=1\b'; then
      echo "job $SLURM_JOB_ID: requeued; the next run resumes from $MODEL_DIR"
      scontrol requeue "$SLURM_JOB_ID"
    else
      echo "job $SLURM_JOB_ID: stopped; not requeueable (submit with --requeue), resume by resubmitting" \
           "with MODEL_DIR=$MODEL_DIR"
    fi
  fi
  exit "$rc"
}

# train.py once per task; RANK_WRAPPER (set by the GPU scripts) runs before it on each rank.
launch() {
  local cmd=(${RANK_WRAPPER:-} "$PYTHON" train.py "--model_dir=$MODEL_DIR" "$@") rc=0
  case "$LAUNCHER" in
    srun)
      # PMIx wires up Open MPI's ranks without mpirun. A rank that ends ends
      # the step 60 s later (--wait), not at once (--kill-on-bad-exit): after a
      # stop the other ranks exit 75 while rank 0 may still be writing the checkpoint.
      run_step srun --mpi=pmix --kill-on-bad-exit=0 --wait=60 "${cmd[@]}" || rc=$? ;;
    mpirun)
      # Open MPI reads the allocation from Slurm (nodes, slots per node) and
      # starts its daemons with srun. One rank per slot, each bound to
      # --cpus-per-task cores of its own; -x forwards what each rank needs.
      # A SIGTERM from Slurm reaches mpirun's daemon (orted), which then
      # stops its ranks with SIGCONT, SIGTERM after this many seconds and
      # SIGKILL after as many again (Open MPI's default: 1 s each, too short
      # to checkpoint); 10 + 10 s stays inside KillWait's 30.
      export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-10}
      local xs=() v
      for v in $(compgen -e); do
        case "$v" in HOROVOD_*|TF_*|NCCL_*|PATH|LD_LIBRARY_PATH|PYTHONPATH) xs+=(-x "$v") ;; esac
      done
      run_step mpirun -np "$SLURM_NTASKS" --map-by "slot:PE=${SLURM_CPUS_PER_TASK:-1}" \
        --bind-to "${BIND_TO:-core}" --report-bindings "${xs[@]}" "${cmd[@]}" || rc=$? ;;
    *) echo "error: LAUNCHER=$LAUNCHER; use srun or mpirun." >&2; exit 2 ;;
  esac
  finish "$rc"
}
