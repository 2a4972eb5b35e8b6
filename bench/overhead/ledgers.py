"""Figures of launches' time blocks (training/ledger.block), and the targets they are held to. Pure."""
import statistics

# The parts an epoch's end costs: its iterator ending and the next built, the evaluation, BatchNorm's
# averaging, the checkpoint and --elastic's commit (docs/time.md).
EPOCH_END = ("epoch_input", "evaluation", "statistics", "checkpoint", "commit")
SHARE_AFTER_STARTUP, EPOCH_END_SHARE, WALL_OVER_STEPS = 0.90, 0.05, 2.0  # issue 44's targets


def figures(summary: dict) -> dict:
  """One launch: its wall, step and start-up seconds, the productive share (steps over wall) and the
  same after start-up, and the epoch ends' cost as a share of the steps' time (per epoch, the same
  ratio: the run's epochs cancel)."""
  t = summary["time"]
  groups = t["groups"]
  wall, steps, startup = t["wall_seconds"], groups.get("steps", 0.0), groups.get("startup", 0.0)
  end = sum(groups.get(g, 0.0) for g in EPOCH_END)
  return {"wall_seconds": wall, "step_seconds": steps, "startup_seconds": startup,
          "epochs": summary.get("epochs"),
          "productive_share": steps / wall if wall else None,
          "productive_share_after_startup": steps / (wall - startup) if wall > startup else None,
          "epoch_end_share_of_steps": end / steps if steps else None,
          "wall_over_steps": wall / steps if steps else None,
          "groups": groups}


def median_of(launches: list[dict]) -> dict:
  """The median of each figure over launches (figures()), with its range: {name: [median, min, max]}."""
  names = [k for k, v in launches[0].items() if isinstance(v, (int, float)) and v is not None]
  out = {}
  for name in names:
    values = [f[name] for f in launches if f.get(name) is not None]
    out[name] = [statistics.median(values), min(values), max(values)]
  return out


def verdicts(name: str, medians: dict) -> dict:
  """{target: (met, the median it is read from)} for a configuration: 'train' (make train) is held to
  wall <= 2x its step time; 'fashion' to a productive share >= 0.90 after start-up and epoch ends <= 5%
  of the steps' time; the others are reported without a target."""
  if name == "train":
    wall = medians["wall_over_steps"][0]
    return {f"wall <= {WALL_OVER_STEPS:g}x step time": (wall <= WALL_OVER_STEPS, wall)}
  if name != "fashion":
    return {}
  share, end = medians["productive_share_after_startup"][0], medians["epoch_end_share_of_steps"][0]
  return {f"productive share after start-up >= {SHARE_AFTER_STARTUP:g}": (share >= SHARE_AFTER_STARTUP, share),
          f"epoch ends <= {EPOCH_END_SHARE:.0%} of step time": (end <= EPOCH_END_SHARE, end)}
