"""What the benchmark programs of bench/ share: how they launch train.py and read what it left.

  launches.py    Job: one launch of train.py in a session of its own, every pid it had tracked, ended
                 by pid; reading its log (steps, the lines a user acts on, checkpoints)
  hosts.py       Hosts: emulated hosts (network namespaces) for elastic launches, a host lost and back
  slurm_jobs.py  a real Slurm on this machine or on emulated hosts, and the launches' environment (env)
  train_runs.py  a run of train.py from scratch under horovodrun, its record kept for --reuse, its
                 held-out curve, the command as a user types it
  train_step.py  train.py's own training step and default optimizer, as the benchmarks time it
  samples.py     100 real JPEGs in ImageNet's layout, for bench-input and the input tests

The tests of tests/multiprocess/ launch through the same Job, Hosts and Slurm.
"""
import os
import signal
import sys
import threading

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stop_on_sigterm() -> None:
  """SIGTERM ends this program as Ctrl-C does, through its `finally` blocks, where it had none:
  `kill` of make faults without it left the emulated cluster's network namespaces up (its default
  action ends the process at once). Called where a program brings up something to take down."""
  if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _exit_143)


def _exit_143(signum, frame):
  sys.exit(128 + signum)
