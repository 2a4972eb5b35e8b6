"""Time to a held-out accuracy on Fashion-MNIST, small batch against large (`make time-to-accuracy`).

The papers' headline is a time to accuracy ("ImageNet in 4 minutes": 75.8% top-1 in 6.6
minutes), as MLPerf's: train until the held-out metric reaches a target, then stop. This
measures it at this machine's size: ResNet-8 on Fashion-MNIST (60,000 training images, its
10,000 test images held out), 2 ranks on this host (horovodrun -np 2), every configuration
with each of SEEDS:

  (a) small-batch baseline: SGD, global batch 64 (32 per rank), no warmup
  (b) 16x the batch (1,024): the linear scaling rule + gradual warmup from (a)'s LR (Goyal et al.)
  (c) (b) with LARS, warmup and poly decay (You et al.; Jia et al.; MLPerf)
  (d) (c) in bf16 (Jia et al.'s mixed precision, in the CPU's bfloat16)
  (e) 64x the batch (4,096) through 8 accumulation steps of 256 per rank, (c)'s recipe

Each run stops at the first held-out evaluation (every ~1/4 epoch, and at epoch ends) with top-1
at or above --target; a run that has not reached it by --max_epochs ends there and is reported as
not reached, with its best top-1. The LR schedule spans --max_epochs (as MLPerf's runs lay out
their schedule and stop at the target).

  python -m bench.time_to_accuracy                          # all 10 runs: ~1.5 hours of both cores
  python -m bench.time_to_accuracy --only=a --target=0.9    # calibrate the target on the baseline
  python -m bench.time_to_accuracy --reuse                  # finished runs of the same flags read back
  python -m bench.time_to_accuracy --quick --only=a --seeds=0 --out_dir=/tmp/tta   # smoke run

Writes OUT_DIR/time_to_accuracy.json (every run), .md (the tables, the commands, the findings and
the exchange at the papers' scale, priced by the planner's model) and .png (held-out top-1 against
wall time) after every run. A report covers the runs of its invocation: --only=a now and the full set
with --reuse later (the runs of a read back) writes the full report.

  recipe.py    the configurations (a)-(e), the target and each run's train.py flags (also what
               make compression's accuracy part trains: its (c))
  runs.py      a run launched from scratch, or read back with --reuse
  stats.py     the runs over their seeds: the statistics, the table and the findings
  scale.py     the exchange to the target at the papers' scale (bench/plan/exchange.py's pricing)
  report.py    results/time_to_accuracy.{md,json,png}
  __main__.py  the command line
"""
