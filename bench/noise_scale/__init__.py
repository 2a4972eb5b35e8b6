"""make noise-scale: the gradient noise scale checked against real training (McCandlish et al.
2018's figure in miniature), and what measuring it costs.

  python -m bench.noise_scale                  # the study: ~3 hours of both cores
  python -m bench.noise_scale --reuse          # the report again from the runs on disk
  python -m bench.noise_scale --cost           # the measurement's cost per step, alternating runs
  python -m bench.noise_scale --quick --out_dir=/tmp/ns   # a smoke run: two batches, a low target
  python -m bench.noise_scale --reuse --tries=2048:1,4096:2 --lr=4096:1.34   # results/noise_scale.md's

The study: ResNet-8 on Fashion-MNIST (60,000 training images; the 10,000 test images held out),
2 ranks on this host, BatchNorm batch 32 per rank (Goyal et al.'s fixed n, so only the update's
batch changes), global batch 64 x K for K = 1, 2, 4, ..., 64 (gradient accumulation: 64 to
4,096). For each batch B, the steps S and examples E = S x B to a held-out top-1 target (the
first of 8 evaluations an epoch at or above it) at the best LR of a small search; S_min and E_min
fitted to the (S, E) pairs (training/noise_scale.fit_tradeoff), B_crit = E_min / S_min, against
B_simple that the same runs measured (train.py --noise_scale) at the target.

LR: warmup (1/4 epoch or 20 updates, whichever is longer) then constant, so the steps to a target
do not depend on a decay laid over an arbitrary cap. The first peak LR for batch B follows
McCandlish et al.'s optimal-LR form eps(B) = eps_max / (1 + B_guess / B): Goyal et al.'s linear
rule below B_guess, saturating above (a linear rule at 4,096 would be 3.2 with SGD), with B_guess =
1,000 (what make time-to-accuracy's runs at 64 and 1,024 imply). At 64 it starts from that study's
LR (0.05); at each larger batch, from the best LR the search found at the batch before, carried
along the curve. Then doubled while doubling reaches the target in fewer steps (halved instead only
when nothing reached it), at most 3 runs a batch; each later run is capped at the best steps so far
(past them it cannot win). `--tries` cuts the search at some batches to fit a time budget and
`--lr` sets a first LR by hand; the report states both.

  study.py   the runs: flags, the LR search, reading a finished run back
  report.py  the fit, B_crit / B_simple, the table, the figure, results/noise_scale.{md,json,png}
  cost.py    --cost: steps with --noise_scale on and off, alternating (results/noise_scale_cost.json)
"""
