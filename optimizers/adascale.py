"""AdaScale SGD (Johnson, Agarwal and Wu, ICML 2020): one LR schedule, written for a base batch
B0, serves any batch B = S x B0 and any change of it (--lr_scaling=adascale).

Each step the LR is r x schedule(tau) and the schedule's clock moves on by r: tau += r, in
base-batch steps. The gain r is the ratio of a base batch's expected squared gradient norm to
this batch's,

    r = (sigma^2 + mu^2) / (sigma^2 / S + mu^2),   sigma^2 = tr(Sigma) / B0,  mu^2 = |G|^2

(fairscale's optim/adascale.py computes the same from per-rank gradients). Divided by |G|^2,
with McCandlish et al.'s B_simple = tr(Sigma) / |G|^2 that every run measures
(training/adaptive/noise_scale.py):

    r = (1 + B_simple / B0) / (1 + B_simple / B)

r lies between 1 and S: where the gradient is mostly noise (B_simple >> B) a batch S times larger
is worth S base steps (the linear scaling rule, r = S); where it is mostly signal (B_simple << B0)
it is worth one. r / S = (B_simple + B0) / (B_simple + B) is Pollux's statistical efficiency
(Qiao et al., OSDI 2021): the fraction of the batch's examples that count.

With the schedule read at tau, a run's LR is r x schedule_B0(tau). Written in this world's steps
(training/course.py counts the schedule in them, tau x B0 / B), that is (r / S) x schedule_B(.),
schedule_B the linear scaling rule's schedule for batch B: linear scaling is AdaScale with r = S.

Where it is not proved (the paper's own caveats): momentum is outside its analysis (they use it,
as here); Adam is not covered; BatchNorm normalises over the micro-batch, not B.
"""
import dataclasses


def gain(b_simple: float | None, base_batch: float, batch: float) -> float:
  """r = (1 + B_simple / B0) / (1 + B_simple / B); 1 until B_simple is measured (None).

  Between 1 and S = B / B0 for B >= B0 (between S and 1 below it: a smaller batch's steps are worth
  less than a base step, which an elastic world that shrank past B0 can meet)."""
  if base_batch <= 0 or batch <= 0:
    raise ValueError(f"batch sizes must be positive, got base_batch={base_batch}, batch={batch}")
  if b_simple is None:
    return 1.0
  if b_simple <= 0:
    raise ValueError(f"b_simple={b_simple}: a noise scale is positive (NoiseScale.b_simple gives None instead)")
  return (1 + b_simple / base_batch) / (1 + b_simple / batch)


@dataclasses.dataclass(frozen=True)
class Gain:
  """One world's gain: base_batch B0, this world's global batch B, and `b_simple()` the noise
  scale now (None: not measured yet). Every rank computes the same r: the estimates come from
  allreduced norms and are restored from the same committed state in each world."""
  base_batch: int
  batch: int
  b_simple: object  # () -> float | None

  @property
  def scale(self) -> float:
    """S = B / B0."""
    return self.batch / self.base_batch

  def __call__(self) -> float:
    return gain(self.b_simple(), self.base_batch, self.batch)
