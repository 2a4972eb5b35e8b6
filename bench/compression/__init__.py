"""Gradient compression measured: `make bench-compression` (issue 25).

Two parts, each selectable (--only):

  speed     ResNet-50 (synthetic) on 2 and 4 emulated hosts (scripts/cluster/cluster.sh, links
            tc-limited to each of --rates), per compression (none, fp16, PowerSGD rank 1/2/4,
            auto): bytes each host sent on its link per step (counted), PowerSGD's encode/decode
            ms, the exchange's ms, the step's ms, scaling efficiency e = S_N / S_1, and the cost
            model's predicted exchange beside each row (speed.py drives, worker.py measures; the
            cluster, the timing and the byte counting are bench-scaling's, bench/scaling/).
  accuracy  make time-to-accuracy's batch-1,024 LARS recipe on Fashion-MNIST, 2 ranks on this
            host, the same steps uncompressed and with PowerSGD rank 2 and 4, with and without
            error feedback, --seeds: final held-out top-1 and the time to 0.85 (accuracy.py).
  trust     LARS's per-layer trust ratios at the rank-4 runs' checkpoints: on PowerSGD's update
            against the uncompressed mean gradient at the same weights (trust.py; one process).

  python -m bench.compression                                   # both parts (root: the cluster)
  python -m bench.compression --only=speed --rates=500mbit --hosts=2
  python -m bench.compression --only=accuracy --seeds=0,1 --reuse   # finished runs read back
  python -m bench.compression --only=trust --seeds=0,1             # on the runs the accuracy part left
  python -m bench.compression.report                            # the report again from the JSON
  # smoke runs, numbers meaningless:
  python -m bench.compression --only=accuracy --quick --configs=r4 --seeds=0 --out_dir=/tmp/bc
  python -m bench.compression --only=speed --rates=500mbit --hosts=2 --variants=none,powersgd-r4 \\
      --steps=2 --out_dir=/tmp/bc

Writes OUT_DIR/compression.json after every launch and run (a part not run is kept from the JSON
already there), then compression.md and compression.png (report.py). Speed launches run in their
own cluster (imcc, 198.18.31.0/24), brought up per rate and down again, also on failure.
"""
