"""The names tests/multiprocess/ imports from here, which are bench/harness/'s now (launches.py and
hosts.py). Kept until those tests import bench.harness; then remove this file."""
from bench.harness.hosts import Hosts, regrown, stalled_after_horovod_died, world_sizes
from bench.harness.launches import Job, newest_checkpoint

__all__ = ["Hosts", "Job", "newest_checkpoint", "regrown", "stalled_after_horovod_died", "world_sizes"]
