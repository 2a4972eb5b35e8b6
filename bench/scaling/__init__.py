"""Scaling on the emulated cluster, against the alpha-beta cost model: `make bench-scaling`.

  python -m bench.scaling                    # the driver: cluster up, every launch, report, cluster down
  python -m bench.scaling --rate=200mbit     # slower links between the emulated hosts
  python -m bench.scaling --quick --only=2x2 --repeats=1 --train_steps=1 --out_dir=/tmp/s   # smoke run
  python -m bench.scaling --report           # scaling.md and the plots again from results/bench_scaling.json

The driver (driver.py) brings up an emulated cluster of 4 hosts
(scripts/cluster/cluster.sh, its own name 'imcb' and subnet 198.18.30.0/24,
links RATE each way) and runs mpirun launches in it (worker.py); rank 0 of
each writes what it measured:

  comm       topologies 1 host x 4 ranks, 2 x 2 and 4 x 1. The cost model
             (comm/cost_model.py) is calibrated per level (calibrate.py):
             allreduces of 5 sizes up to Horovod's fused response, in a
             tf.function as the exchanges call them, inside a node and across
             nodes, with hier's in-node pair, one local pass over a buffer and
             flat's own call over every rank. flat, hier, hybrid
             (comm/exchange.py, 32 MB buckets) and stock horovod exchange
             buffers of 1-32 MB and the ResNet-50 gradient set; the model's
             prediction (one alpha per collective after Horovod's fusion,
             replay.py) stands beside each median, and so do the bytes each host
             sent on its link and the bytes the model says cross it.
  training   ranks N = 1 (1x1), 2 (2 hosts x 1), 4 (2 x 2): seconds per step of
             train.py's own training step (training/step.py) on synthetic data
             (the CIFAR ResNet-20 at 32x32 and ResNet-50 at 64x64, batch 16 per
             rank) per algorithm, and of the same step with an identity
             exchange; S = images/sec per rank, e = S_N / S_1, T = N * S * e
             (Jia et al.).
  simulation the model at cluster scale (64-2,048 ranks, simulate.py): ring,
             hierarchical and hybrid for one exchange of ResNet-50 and AlexNet,
             with the stated parameters of a 2018 P40 cluster.

Writes OUT_DIR/bench_scaling.json, scaling.md (report.py, its prose from
report_template.md), scaling_comm.png and scaling_training.png; OUT_DIR is
results/ unless --out_dir says otherwise. Every emulated host runs on the same
2 cores: ranks on different "hosts" still compete for CPU, so training
efficiency falls with N from CPU sharing alone; the step without exchange
separates the two.
"""
