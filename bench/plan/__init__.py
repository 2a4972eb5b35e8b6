"""The planner (`make plan`, `python -m bench.plan`): how many ranks and how big a global batch reach
a target soonest, and at what cost, read before a job is launched.

  python -m bench.plan --workload=resnet50-imagenet                      # Jia et al.'s cluster (default)
  python -m bench.plan --workload=resnet50-imagenet --cluster=p40-400g   # the same nodes, 400 Gbit/s
  python -m bench.plan --summary=runs/exp1/summary.json                  # a run of train.py
  python -m bench.plan --summary=S --b_simple=900 --max_epochs=4         # a summary without noise_scale
  python -m bench.plan --summary=S --cost_model=2645,0.707,3741,0.0696 --ranks_per_node=2

Steps to the target come from the gradient noise scale (McCandlish et al. 2018; training/
noise_scale.py): E(B) = E_min (1 + B / B_crit), S = E / B, B_crit = --ratio x B_simple, E_min
through the run's epochs to target at its batch. A step is one rank's compute (its images at the
run's images/s per rank, or --images_per_sec) plus what the exchange leaves exposed (exchange.py:
the cluster's hybrid allreduce per 32 MB bucket, overlapping backprop). For each number of ranks
(1, 2, 4, ... --max_ranks) and global batch (--per_rank_batches x --accumulation) the time to the
target; printed and written to results/plan_NAME.{md,json,png}: the fastest batch at each number
of ranks, the least time, the least GPU-hours, where doubling the ranks buys less than 10%.

  workload.py  a summary.json read into a Workload, or ResNet-50 on ImageNet stated from the papers
  exchange.py  clusters and what one exchange costs on them (also time_to_accuracy's, via scale.py)
  predict.py   the time to the target at each (ranks, per-rank batch, accumulation)
  report.py    the answers, the tables, the figure and the JSON
"""
