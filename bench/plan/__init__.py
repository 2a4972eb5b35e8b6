"""The planner (`make plan`, `python -m bench.plan`): how many ranks and how big a global batch reach
a target soonest, and at what cost, read before a job is launched.

  python -m bench.plan --workload=resnet50-imagenet                      # Jia et al.'s cluster (default)
  python -m bench.plan --workload=resnet50-imagenet --cluster=p40-400g   # the same nodes, 400 Gbit/s
  python -m bench.plan --summary=runs/exp1/summary.json                  # a run of train.py
  python -m bench.plan --summary=S --b_simple=900 --max_epochs=4         # a summary without noise_scale
  python -m bench.plan --summary=S --cost_model=2645,0.707,3741,0.0696 --ranks_per_node=2
  python -m bench.plan --summary=S --measured=128:1.25,4096:7.51 --speeds=128:321.4,4096:654.4 --max_epochs=12

One model with the batch controller (training/adaptive/goodput.py): the steps to the target by AdaScale's
clock, S(B) = S(B0) / r(B), which is McCandlish et al.'s E(B) = E_min (1 + B / B_crit) (2018)
normalised at the run's batch B0; B_crit = --ratio x B_simple through the run's point, or, given
--measured epochs at other batches, fitted to them (training/noise_scale.fit_tradeoff), each
measured batch then predicted by the fit of the others (leave-one-out) and B_crit / B_simple given
with its spread. An update's time is a goodput.StepTime: one rank's per-update overhead plus its
images' compute (a time per image), both fitted to the images/s measured at several batches
(--speeds; the run's alone: one speed whatever the batch), plus what the exchange leaves exposed
(exchange.py: the cluster's hybrid allreduce per 32 MB bucket, overlapping backprop). For each
number of ranks (1, 2, 4, ... --max_ranks) and global batch (--per_rank_batches x --accumulation)
the time to the target; printed and written to results/plan_NAME.{md,json,png}: the fastest batch at
each number of ranks, the least time, the least GPU-hours, where doubling the ranks buys less than
10%, all among the batches within --max_epochs, each answer past the largest measured batch marked
as extrapolated (the least time given at a measured batch or below first).

  workload.py  a summary.json read into a Workload, or ResNet-50 on ImageNet stated from the papers
  exchange.py  clusters and what one exchange costs on them (also make time-to-accuracy's at-scale
               section, bench/time_to_accuracy/scale.py)
  predict.py   the steps and compute models, the time to the target at each (ranks, per-rank batch, accumulation)
  validate.py  the steps model out of sample: leave-one-out, and B_crit's bootstrap interval
  report.py    the answers, the tables, the figure and the JSON
"""
