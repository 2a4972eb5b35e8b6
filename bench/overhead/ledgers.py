"""Figures of launches' time blocks (training/ledger.block) and evaluation clocks, and the targets they are held
to. Pure."""
import statistics

# The parts an epoch's end costs: its iterator ending and the next built, the evaluation, BatchNorm's
# averaging, the checkpoint and --elastic's commit (docs/time.md).
EPOCH_END = ("epoch_input", "evaluation", "statistics", "checkpoint", "commit")
SHARE_AFTER_STARTUP, EPOCH_END_SHARE, WALL_OVER_STEPS = 0.90, 0.05, 2.0  # issue 44's targets
GAP_RATIO = 1.3  # issue 44, item 2: no gap between evaluations over 1.3x the run's median gap, in any run


def eval_gaps(walls: list[float]) -> tuple[float | None, float | None]:
  """(the largest gap between consecutive evaluations, in seconds, and its ratio to the median gap)
  from the evaluations' wall clocks; (None, None) with fewer than two gaps. The time before the first
  evaluation is not a gap: it holds the start-up."""
  walls = sorted(walls)
  gaps = [b - a for a, b in zip(walls, walls[1:])]
  if len(gaps) < 2:
    return None, None
  middle = statistics.median(gaps)
  return max(gaps), (max(gaps) / middle if middle > 0 else None)


def figures(summary: dict, eval_walls: list[float] = ()) -> dict:
  """One launch: its wall, step and start-up seconds, the productive share (steps over wall) and the
  same after start-up, the epoch ends' cost as a share of the steps' time (per epoch, the same
  ratio: the run's epochs cancel), and, from its evaluations' wall clocks (TensorBoard's
  eval/top1), the largest gap between two of them against the median gap."""
  t = summary["time"]
  groups = t["groups"]
  wall, steps, startup = t["wall_seconds"], groups.get("steps", 0.0), groups.get("startup", 0.0)
  end = sum(groups.get(g, 0.0) for g in EPOCH_END)
  gap, ratio = eval_gaps(list(eval_walls))
  return {"wall_seconds": wall, "step_seconds": steps, "startup_seconds": startup,
          "epochs": summary.get("epochs"),
          "productive_share": steps / wall if wall else None,
          "productive_share_after_startup": steps / (wall - startup) if wall > startup else None,
          "epoch_end_share_of_steps": end / steps if steps else None,
          "wall_over_steps": wall / steps if steps else None,
          "eval_gap_max_seconds": gap, "eval_gap_ratio": ratio,
          "groups": groups}


def median_of(launches: list[dict]) -> dict:
  """The median of each figure over launches (figures()), with its range: {name: [median, min, max]}."""
  names = [k for k, v in launches[0].items() if isinstance(v, (int, float)) and v is not None]
  out = {}
  for name in names:
    values = [f[name] for f in launches if f.get(name) is not None]
    out[name] = [statistics.median(values), min(values), max(values)]
  return out


def verdicts(name: str, medians: dict, on_hosts: bool = False) -> dict:
  """{target: (met, the figure it is read from)} for a configuration: 'train' (make train) is held to
  wall <= 2x its step time; the Fashion-MNIST ones ('fashion', 'fashion-*') to a productive share >= 0.90
  after start-up and epoch ends <= 5% of the steps' time (medians); on emulated hosts also to no gap
  between evaluations over 1.3x its run's median gap (the largest ratio of any launch); the others are
  reported without a target."""
  if name == "train":
    wall = medians["wall_over_steps"][0]
    return {f"wall <= {WALL_OVER_STEPS:g}x step time": (wall <= WALL_OVER_STEPS, wall)}
  if name != "fashion" and not name.startswith("fashion-"):
    return {}
  share, end = medians["productive_share_after_startup"][0], medians["epoch_end_share_of_steps"][0]
  out = {f"productive share after start-up >= {SHARE_AFTER_STARTUP:g}": (share >= SHARE_AFTER_STARTUP, share),
         f"epoch ends <= {EPOCH_END_SHARE:.0%} of step time": (end <= EPOCH_END_SHARE, end)}
  if on_hosts and "eval_gap_ratio" in medians:
    worst = medians["eval_gap_ratio"][2]
    out[f"no gap between evaluations over {GAP_RATIO:g}x the run's median"] = (worst <= GAP_RATIO, worst)
  return out
