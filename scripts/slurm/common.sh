# Sourced by the sbatch scripts beside it: the repository and its Python,
# Horovod's environment, and one launch of train.py per Slurm task.
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
MODEL_DIR=${MODEL_DIR:-runs/slurm-$SLURM_JOB_ID}

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
     "${SLURM_CPUS_PER_TASK:-1} CPU(s) per rank, launcher $LAUNCHER, model_dir $MODEL_DIR"
env | grep '^HOROVOD_' | sort | sed 's/^/  /'

# train.py once per task; RANK_WRAPPER (set by the GPU scripts) runs before it on each rank.
launch() {
  local cmd=(${RANK_WRAPPER:-} "$PYTHON" train.py "--model_dir=$MODEL_DIR" "$@")
  case "$LAUNCHER" in
    srun)
      # PMIx wires up Open MPI's ranks without mpirun; a rank that fails ends the step.
      srun --mpi=pmix --kill-on-bad-exit=1 "${cmd[@]}" ;;
    mpirun)
      # Open MPI reads the allocation from Slurm (nodes, slots per node) and
      # starts its daemons with srun. One rank per slot, each bound to
      # --cpus-per-task cores of its own; -x forwards what each rank needs.
      local xs=() v
      for v in $(compgen -e); do
        case "$v" in HOROVOD_*|TF_*|NCCL_*|PATH|LD_LIBRARY_PATH|PYTHONPATH) xs+=(-x "$v") ;; esac
      done
      mpirun -np "$SLURM_NTASKS" --map-by "slot:PE=${SLURM_CPUS_PER_TASK:-1}" \
        --bind-to "${BIND_TO:-core}" --report-bindings "${xs[@]}" "${cmd[@]}" ;;
    *) echo "error: LAUNCHER=$LAUNCHER; use srun or mpirun." >&2; exit 2 ;;
  esac
}
