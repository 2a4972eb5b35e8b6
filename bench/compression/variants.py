"""What `make bench-compression` runs: the compressions the speed rows time, the accuracy rows'
train.py flags, the link rates, and the measurement's constants (pure; no TensorFlow here).

A speed variant is one --compression as train.py would run it on the emulated cluster, every
timed step compressing (--compression_start=0); an accuracy configuration is one train.py run of
make time-to-accuracy's large-batch LARS recipe with a compression.
"""
import dataclasses
import math
import re

from flags.config import CommConfig, ConfigError

# The exchange every speed row uses: our fused buckets, one grouped allreduce over every rank each
# (comm/exchange.py), so each row's plan is recorded bucket by bucket and priced by the same model
# --compression=auto prices it with (comm/probe.measure_flat). On 2 and 4 hosts of one rank each
# flat, hier and hybrid send alike (no node to reduce in first). 32 MB: bench-scaling's buckets.
ALLREDUCE = "flat"
THRESHOLD_MB = 32.0
AUTO_RANK = 4  # --powersgd_rank's default: the rank auto chooses matrices at

# name -> CommConfig fields besides the exchange's; the order is the report's.
SPEED_VARIANTS = {
    "none": {"compression": "none"},
    "fp16": {"compression": "fp16"},
    "powersgd-r1": {"compression": "powersgd", "powersgd_rank": 1},
    "powersgd-r2": {"compression": "powersgd", "powersgd_rank": 2},
    "powersgd-r4": {"compression": "powersgd", "powersgd_rank": 4},
    "auto": {"compression": "auto", "powersgd_rank": AUTO_RANK},
}
# The issue's rates: ResNet-50's 97.5 MB a step is link-bound at the slowest, and at 2 and 10
# Gbit/s the emulated link is bound by the namespaces' TCP on the shared cores (~556 Mbit/s
# measured at 1gbit, results/scaling.md), so the faster rates show where compression stops paying.
RATES = ("500mbit", "2gbit", "10gbit")
HOSTS = (2, 4)  # emulated hosts of one rank each (2x1, 4x1)


def comm_config(variant: str) -> CommConfig:
  """The exchange's settings of one speed variant; every step compresses (compression_start 0)."""
  return CommConfig(allreduce=ALLREDUCE, fusion_threshold_mb=THRESHOLD_MB, compression_start=0,
                    **SPEED_VARIANTS[variant])


def rate_gbps(rate: str) -> float:
  """A tc rate ('500mbit', '2gbit', '10gbit') in Gbit/s; ConfigError naming --rates otherwise."""
  m = re.fullmatch(r"(\d+(?:\.\d+)?)(mbit|gbit)", rate)
  if not m:
    raise ConfigError(f"--rates: {rate!r} is not a tc rate; write e.g. --rates=500mbit,2gbit,10gbit.")
  return float(m.group(1)) * (1e-3 if m.group(2) == "mbit" else 1.0)


def launch_name(rate: str, hosts: int) -> str:
  """The key of one speed launch in the JSON: '500mbit-2x1'."""
  return f"{rate}-{hosts}x1"


@dataclasses.dataclass(frozen=True)
class AccuracyConfig:
  """One accuracy row: uncompressed (rank 0) or PowerSGD at `rank`, with or without error feedback."""
  name: str
  rank: int = 0
  error_feedback: bool = True

  def flags(self, compression_start: int) -> list[str]:
    """train.py's compression flags; PowerSGD starts after compression_start plain steps."""
    if not self.rank:
      return ["--compression=none"]
    return (["--compression=powersgd", f"--powersgd_rank={self.rank}", f"--compression_start={compression_start}"]
            + ([] if self.error_feedback else ["--powersgd_error_feedback=false"]))


ACCURACY_CONFIGS = {
    "none": AccuracyConfig("uncompressed"),
    "r2": AccuracyConfig("PowerSGD rank 2", 2),
    "r2-noef": AccuracyConfig("PowerSGD rank 2, no error feedback", 2, False),
    "r4": AccuracyConfig("PowerSGD rank 4", 4),
    "r4-noef": AccuracyConfig("PowerSGD rank 4, no error feedback", 4, False),
}


def warmup_steps(warmup_epochs: float, steps_per_epoch: int) -> int:
  """Steps of the LR warmup, rounded up: --compression_start, so PowerSGD starts after it (PyTorch's
  advice: early training is sensitive to approximate gradients, docs/communication.md)."""
  return math.ceil(warmup_epochs * steps_per_epoch)


def parse_list(text: str, allowed, flag: str) -> list[str]:
  """'a,b' -> ['a', 'b'], each among allowed; ConfigError naming the flag otherwise (empty too)."""
  names = [x for x in text.split(",") if x]
  unknown = [x for x in names if x not in allowed]
  if unknown or not names:
    raise ConfigError(f"--{flag}={text}: choose among {','.join(map(str, allowed))}, "
                      f"e.g. --{flag}={','.join(map(str, list(allowed)[:2]))}.")
  return names
