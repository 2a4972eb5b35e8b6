# The README's commands. Every target runs inside .venv, which `make setup` creates.
SHELL := /bin/bash
PY := .venv/bin/python
# Open MPI refuses root unless told; horovodrun passes these through.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PATH := $(CURDIR)/.venv/bin:$(PATH)
NP ?= 2
MODEL_DIR ?= runs/train-$(shell date +%Y%m%d-%H%M%S)

.PHONY: setup setup-gpu ops test test-fast test-mp train clean

setup:  ## apt packages, .venv, pinned packages, Horovod built with TF + MPI + Gloo
	bash scripts/setup.sh

setup-gpu:  ## the same with CUDA TensorFlow and Horovod's NCCL operations (GPU machines only)
	GPU=1 bash scripts/setup.sh

ops:  ## compile input/kernels/*.cc against .venv's TensorFlow (make setup does it; quick when up to date)
	bash scripts/build_ops.sh

test: ops  ## the whole suite: fast single-process tests, then multi-process tests
	$(PY) -m pytest -q tests

test-fast: ops  ## single-process tests only
	$(PY) -m pytest -q -m "not multiprocess" tests

test-mp: ops  ## multi-process tests under horovodrun only
	$(PY) -m pytest -q -m multiprocess tests

train: ops  ## ResNet-20 on the digits set, 2 ranks; prints one JSON line, writes summary.json
	horovodrun -np $(NP) $(PY) train.py --model_dir=$(MODEL_DIR) $(ARGS)

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

.PHONY: reproduce

reproduce: ops  ## Goyal-style large-batch experiment on digits (batch 16 vs 256, SGD/warmup/LARS/bf16, 2 seeds); writes results/reproduce.{md,png,json}
	$(PY) scripts/reproduce.py

.PHONY: bench-input
bench-input: ops  ## input pipeline on real ImageNet JPEGs vs the decoder limit; writes results/bench_input.{json,png}
	$(PY) -m bench.bench_input $(ARGS)

.PHONY: bench-comm
bench-comm: ops  ## allreduce algorithms (horovod, flat, hier, hybrid, mpi4py floor), 2 and 4 ranks, MPI and Gloo; writes results/bench_comm.{json,png}
	$(PY) bench/bench_comm.py $(ARGS)

.PHONY: bench-scaling
bench-scaling: ops  ## on an emulated 4-host cluster (root): cost model calibrated and checked, flat/hier/hybrid/horovod, training efficiency, simulation to 2,048 ranks; writes results/bench_scaling.json, scaling.md, scaling_*.png
	$(PY) bench/bench_scaling.py $(ARGS)
