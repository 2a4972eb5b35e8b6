# The README's commands. Every target runs inside .venv, which `make setup` creates.
SHELL := /bin/bash
PY := .venv/bin/python
# Open MPI refuses root unless told; horovodrun passes these through.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
# mpirun answers SIGTERM/SIGINT, and a rank's non-zero exit, by sending the
# ranks SIGTERM and, 1 s later by default, SIGKILL: too soon for the step and
# checkpoint a stopping rank finishes first (docs/faults.md). 10 s: mpirun also
# sleeps this long in that path when every rank has already exited (60 s kept a
# stopped job's mpirun alive 2.5 minutes after its ranks were gone).
export OMPI_MCA_odls_base_sigkill_timeout ?= 10
export PATH := $(CURDIR)/.venv/bin:$(PATH)
NP ?= 2
MODEL_DIR ?= runs/train-$(shell date +%Y%m%d-%H%M%S)

.PHONY: setup setup-gpu ops test test-fast test-mp train docs clean

setup:  ## apt packages, .venv, pinned packages, Horovod built with TF + MPI + Gloo
	bash scripts/setup.sh

setup-gpu:  ## the same with CUDA TensorFlow and Horovod's NCCL operations (GPU machines only)
	GPU=1 bash scripts/setup.sh

ops:  ## compile input/kernels/*.cc against .venv's TensorFlow (make setup does it; quick when up to date)
	bash scripts/build_ops.sh

# Three pytest workers (pytest-xdist) on 2 cores, a test file each at a time (--dist loadfile: a
# file's shared launch runs once): the launches spend much of their time waiting (start-up, a stall
# limit, a signal's round trip, Slurm), which the other workers fill. Idle, a clean clone's suite
# took 13:44 with 3 and 16:59 with 4 (2026-12-07; 2 workers: 19:19 a commit earlier, docs/setup.md).
# --durations: where the time goes.
PYTEST := $(PY) -m pytest -q -n 3 --dist loadfile --durations=25

test: ops  ## the whole suite: single-process and multi-process tests, two at a time
	$(PYTEST) tests

test-fast: ops  ## single-process tests only
	$(PYTEST) -m "not multiprocess" tests

test-mp: ops  ## multi-process tests under horovodrun only
	$(PYTEST) -m multiprocess tests

train: ops  ## ResNet-20 on the digits set, 2 ranks; prints one JSON line, writes summary.json
	horovodrun -np $(NP) $(PY) train.py --model_dir=$(MODEL_DIR) $(ARGS)

docs:  ## rewrite docs/flags.md from the flag definitions in flags/ (scripts/flag_table.py)
	$(PY) scripts/flag_table.py

clean:  ## remove runs and generated data (not .venv)
	rm -rf runs data/digits data/fashion_mnist results/*.tmp-*

# The emulated cluster (scripts/cluster/cluster.sh; root): HOSTS network
# namespaces with their own addresses in 198.18.0.0/15 and hostnames, joined
# by links rate-limited to RATE each way.
HOSTS ?= 2
RATE ?= 200mbit
.PHONY: cluster-up cluster-down cluster-status cluster-run

cluster-up:  ## HOSTS emulated hosts imc-h1..imc-hN joined by RATE links
	bash scripts/cluster/cluster.sh up $(HOSTS) $(RATE)

cluster-down:  ## remove every namespace, link and process of the emulated cluster
	bash scripts/cluster/cluster.sh down

cluster-status:  ## the emulated hosts and their addresses
	bash scripts/cluster/cluster.sh status

cluster-run:  ## CMD on host imc-h1 with the others reachable, e.g. CMD="horovodrun -np 4 -H imc-h1:2,imc-h2:2 --network-interface imc0 python train.py --max_steps=20"
	bash scripts/cluster/cluster.sh run bash -c "$$CMD"

# Slurm on the emulated cluster (scripts/slurm/local-slurm.sh; root): slurmctld
# on imc-h1, a slurmd on each host, its files under SLURM_DIR. slurm-up brings
# the cluster up when it is down, and slurm-down then brings it down again.
SLURM_DIR ?= /tmp/imc-slurm
.PHONY: slurm-up slurm-down slurm-run

slurm-up:  ## Slurm over HOSTS emulated hosts (installs Debian's slurm-wlm and munge when missing)
	bash scripts/slurm/local-slurm.sh install
	bash scripts/slurm/local-slurm.sh start-cluster $(SLURM_DIR) $(HOSTS)

slurm-down:  ## stop the daemons slurm-up started (and the cluster, if slurm-up brought it up)
	bash scripts/slurm/local-slurm.sh stop $(SLURM_DIR)

slurm-run:  ## CMD on imc-h1 against that Slurm, e.g. CMD="sbatch -N 2 --ntasks-per-node=1 --cpus-per-task=1 scripts/slurm/cpu_nodes.sbatch --max_steps=10"
	SLURM_CONF=$(SLURM_DIR)/slurm.conf bash scripts/cluster/cluster.sh run bash -c "$$CMD"

.PHONY: bench-input
bench-input: ops  ## input pipeline on real JPEGs (packaged photographs; ARGS=--images_dir=../shared/data/imagenet-sample for ImageNet's) vs the decoder limit; writes results/bench_input.{json,png}
	$(PY) -m bench.input_pipeline $(ARGS)

.PHONY: bench-comm
bench-comm: ops  ## allreduce algorithms (horovod, flat, hier, hybrid, mpi4py floor), 2 and 4 ranks, MPI and Gloo; writes results/bench_comm.{json,png}
	$(PY) -m bench.allreduce $(ARGS)

.PHONY: bench-overhead
bench-overhead: ops  ## where train.py's wall time goes outside its steps: make train, Fashion-MNIST ResNet-8 4 epochs (on this host, and on 2 and 4 emulated hosts unshaped and at 20 Mbit/s), ResNet-50 synthetic, 3 launches each; writes results/overhead.{json,md,png} (ARGS="--quick --launches=1 --out_dir=/tmp/o": a smoke run)
	$(PY) -m bench.overhead $(ARGS)

.PHONY: bench-scaling
bench-scaling: ops  ## on an emulated 4-host cluster (root): cost model calibrated and checked, flat/hier/hybrid/horovod, training efficiency, simulation to 2,048 ranks; writes results/bench_scaling.json, scaling.md, scaling_*.png (ARGS="--quick --only=2x2 --repeats=1 --train_steps=1 --out_dir=/tmp/s": a smoke run)
	$(PY) -m bench.scaling $(ARGS)

.PHONY: bench-join-ahead
bench-join-ahead: ops  ## a returning host's process started ahead of the survivor's reset (scripts/horovod/join_ahead.patch) against stock Horovod's order (HOROVOD_JOIN_AHEAD=0), make faults' elastic-horovod launch in turn on 2 emulated hosts (root), 5 pairs; writes results/join_ahead.{json,md}
	$(PY) -m bench.faults.join_ahead $(ARGS)

.PHONY: faults
faults: ops  ## every fault (signals to the launcher and to ranks, a stopped rank, divergence, damaged checkpoints, a full disk) against real launches; writes results/faults.{md,json}
	$(PY) -m bench.faults $(ARGS)

.PHONY: time-to-accuracy
time-to-accuracy: ops  ## time to a held-out top-1 on Fashion-MNIST, 2 ranks: batch 64 SGD vs 1,024 (warmup, LARS, bf16) vs 4,096 by accumulation, 2 seeds; writes results/time_to_accuracy.{md,json,png} (ARGS="--quick --only=a --seeds=0 --out_dir=/tmp/tta": a smoke run)
	$(PY) -m bench.time_to_accuracy $(ARGS)

.PHONY: bench-step-cache
bench-step-cache: ops  ## the adaptive run's step at K (one traced per K it tries, kept) against the fixed step at K, one process; writes results/step_cache.{md,json}
	$(PY) -m bench.step_cache $(ARGS)

.PHONY: bench-compression
bench-compression: ops  ## PowerSGD rank 1/2/4, fp16 and auto: ResNet-50 on 2 and 4 emulated hosts (root) at 0.5, 2 and 10 Gbit/s (bytes counted on the links, encode/exchange/step ms, efficiency, the cost model's prediction per row), and Fashion-MNIST at batch 1,024 with LARS, uncompressed vs PowerSGD rank 2/4 with and without error feedback, 2 seeds, and LARS's trust ratios per layer at the rank-4 runs' checkpoints; ~3.5 hours; writes results/compression.{md,json,png} (ARGS="--only=speed --rates=500mbit --hosts=2 --variants=none,powersgd-r4 --steps=2 --out_dir=/tmp/bc", "--only=accuracy --quick --configs=r4 --seeds=0 --out_dir=/tmp/bc": smoke runs)
	$(PY) -m bench.compression $(ARGS)

.PHONY: plan
plan:  ## ranks and global batch to a target soonest, from the noise scale and the exchange's cost (default ResNet-50 on Jia et al.'s P40 cluster; ARGS="--summary=runs/x/summary.json --b_simple=N"); writes results/plan_*.{md,json,png}
	$(PY) -m bench.plan $(or $(ARGS),--workload=resnet50-imagenet)

.PHONY: adaptive
adaptive: ops  ## AdaScale and --batch_policy=adaptive against fixed batches on Fashion-MNIST, 2 ranks, 2 seeds: one budget of base-batch epochs at S = 1, 8, 32 (linear rule vs AdaScale, also given AdaScale's updates), the scale changed 8 -> 32 -> 8 and an elastic world 2 -> 1 -> 2 hosts, time to 0.85 (adaptive vs batch 64 at its searched LR); writes results/adaptive.{md,json,png} (ARGS="--only=target", "--quick --out_dir=/tmp/ad": a smoke run)
	$(PY) -m bench.adaptive $(ARGS)

.PHONY: slow-links
slow-links: ops  ## stock Horovod (3 fixed batches) against ours (flat + compression auto, adaptive K, both, both with a host lost and back) to a held-out top-1 on Fashion-MNIST, 2 and 4 emulated hosts (root) at 20 Mbit/s and unshaped, 2 seeds, plus final top-1 at equal epochs; bytes counted on the links; writes results/slow_links.{md,json,png} (ARGS="--quick": a smoke run into runs/slow_links-quick/; ARGS="--reuse" resumes)
	$(PY) -m bench.slow_links $(ARGS)

.PHONY: noise-scale
noise-scale: ops  ## the gradient noise scale against real training: steps to a held-out target on Fashion-MNIST at global batches 64..4,096 (2 ranks, accumulation), the S_min/E_min fit, B_crit / B_simple; ~3 hours; writes results/noise_scale.{md,json,png} (ARGS="--cost": its cost per step; ARGS="--quick --out_dir=/tmp/ns": a smoke run)
	$(PY) -m bench.noise_scale $(ARGS)
