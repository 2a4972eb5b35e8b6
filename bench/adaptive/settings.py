"""`make adaptive`'s constants and each run's train.py flags (pure): the base batch and its LR from
make noise-scale's study (bench/noise_scale/study.py), the budget, the scales, the change part's
phases and the elastic part's loss."""
from bench.noise_scale import study

RANKS, MICRO, B0 = study.RANKS, study.BN_BATCH, 64
BASE_LR = 0.2 * 256 / B0  # per 256 images: peak 0.2 at B0 (make noise-scale's best at 64)
BUDGET_EPOCHS = 1.0       # base-batch epochs: B0 reaches ~0.86 in it (0.85 at 0.87 epochs, constant LR)
SCALES = (8, 32)
TARGET = study.TARGET
PARTS = ("budget", "steps", "change", "elastic", "target")
# (S, updates at it) of the change part's phases, the last to the budget's end: at S = 8 the
# budget part's runs counted a third of the base-batch epoch (tau 312) at update ~118, and S = 32
# moves tau by ~4-8 an update there, so 40 updates are about the middle third
CHANGE = ((8, 118), (32, 40), (8, None))
LOSE_AT = 118  # the elastic part's second host is lost at this update (a third of the budget)...
ALONE = 40     # ... and listed again this many updates into the world of one rank
ELASTIC_HOSTS = ("imcada", "198.18.23")  # an emulated cluster of this program's own
# Earlier controllers' runs, kept under target-adaptive-<tag>-s<seed>: what they did is part of the finding.
EARLIER = (("v1", "adaptive, first controller (stale times compared)"),
           ("v2", "adaptive, before b08d572 (the epoch's rest dealt again at each change)"))
QUICK = dict(budget_epochs=0.1, target=0.5, scales=(8,))


def common(seed: int) -> list[str]:
  return ["--dataset=fashion_mnist", f"--model={study.MODEL}", f"--batch_size={MICRO}",
          f"--base_lr={BASE_LR:g}", "--optimizer=sgd", f"--seed={seed}", "--export=false", "--noise_scale=true",
          f"--eval_batch_size={study.EVAL_BATCH}"]


def budget_flags(kind: str, scale: int, epochs: float, seed: int) -> list[str]:
  """kind: base (S = 1), linear or adascale at global batch scale x B0, by accumulation."""
  k = scale * B0 // (RANKS * MICRO)
  flags = common(seed) + [f"--accumulation_steps={k}", "--lr_schedule=cosine", "--warmup_epochs=0.25",
                                     f"--epochs={epochs:g}", f"--log_every={max(1, round(study.TRAIN_IMAGES / (scale * B0) / 8))}"]
  if kind == "adascale":
    flags += ["--lr_scaling=adascale", f"--base_batch={B0}"]
  return flags


def target_flags(kind: str, target: float, seed: int) -> list[str]:
  """kind: fixed (batch 64) or adaptive (starting at 64), make noise-scale's recipe to the target."""
  every = study.eval_every(B0)
  flags = common(seed) + ["--accumulation_steps=1", "--lr_schedule=step", "--decay_epochs=1000",
                                     f"--warmup_epochs={study.warmup_epochs(B0):.4g}", f"--epochs={study.MAX_EPOCHS:g}",
                                     f"--target_top1={target:g}", f"--eval_every={every}", f"--log_every={every}"]
  if kind == "adaptive":
    flags += ["--lr_scaling=adascale", f"--base_batch={B0}", "--batch_policy=adaptive"]
  return flags


def change_phases(model_dir: str, epochs: float, seed: int) -> list[list[str]]:
  """The flags of each launch of the change part: AdaScale at CHANGE's S in turn, each phase
  ended by --max_steps (updates since the run began) but the last."""
  phases, until = [], 0
  for scale, updates in CHANGE:
    until = until + updates if updates else 0
    phases.append([f"--model_dir={model_dir}", *budget_flags("adascale", scale, epochs, seed)]
                  + ([f"--max_steps={until}"] if until else []))
  return phases
