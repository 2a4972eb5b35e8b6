#!/bin/bash
# Run the command with CUDA_VISIBLE_DEVICES set to this rank's local rank, so
# each rank of a node owns one GPU (srun sets SLURM_LOCALID, mpirun
# OMPI_COMM_WORLD_LOCAL_RANK).
export CUDA_VISIBLE_DEVICES=${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:?not started by srun or mpirun}}
exec "$@"
