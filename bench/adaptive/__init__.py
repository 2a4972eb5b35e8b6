"""`python -m bench.adaptive [--only=PARTS] [--seeds=0,1] [--reuse] [--quick]`: AdaScale and the
adaptive batch against fixed batches (`make adaptive`, issue 24); writes results/adaptive.{md,json,png}.

Fashion-MNIST, ResNet-8 and 2 ranks of 32-image micro-batches, as `make noise-scale`
(bench/noise_scale/study.py), whose search found the peak LR 0.2 best at batch 64: that is the
base batch B0 = 64 and its LR, the one LR of every AdaScale and adaptive run. Parts (--only):

  budget    one budget of base-batch epochs (BUDGET_EPOCHS, cosine to 0, warmup a quarter epoch):
            B0 alone (S = 1); the linear rule + warmup at S = 8 and 32 (accumulation); AdaScale at
            the same S; final held-out top-1 of each seed
  steps     the linear rule + warmup at each S given AdaScale's updates there (its data epochs, from
            the budget part's run of the same seed): whether AdaScale's gain is more than more steps
  change    AdaScale with the scale changed mid-run, S = 8 -> 32 -> 8 by accumulation (the run
            stopped by --max_steps and resumed at the other --accumulation_steps; CHANGE), on the
            budget, against the budget part's AdaScale S = 8 with no LR retuned
  elastic   AdaScale at S = 8 on 2 emulated hosts of 1 rank (horovodrun --elastic over Gloo): the
            second host lost at update LOSE_AT, S = 4 on the one left, the host back (2 -> 1 -> 2)
  target    time to held-out top-1 0.85, make noise-scale's recipe (constant LR after warmup, 8
            evaluations an epoch): the adaptive controller against batch 64 at its searched LR,
            the fastest fixed batch of results/noise_scale.md (233 s there; the others 329-1,078 s)

Each run is a train.py launch from scratch (bench/harness/train_runs.launch) kept under runs/adaptive/;
--reuse reads back a run whose flags match.

  settings.py  the study's constants and each run's train.py flags
  runs.py      each part's runs: launched (the elastic one on its emulated hosts), recorded, read back
  __main__.py  the command line: the parts chosen, results/adaptive.json kept across invocations
  report.py    results/adaptive.{md,json,png}; its tables and targets tables.py, its figure figure.py
"""
