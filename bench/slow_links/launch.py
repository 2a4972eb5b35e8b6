"""The study's launches on an emulated cluster (bench/harness/hosts.Hosts at a link rate): one
configuration's hosts up, each run of train.py on them, the bytes the kernel counted on each
host's link, the run's record (run.json beside its model_dir, read back with --reuse).

Every run is launched from the cluster's head host (its own namespace, no rank on it) by
horovodrun over Gloo with one rank a host: the fixed and adaptive arms plainly, the lost-host arm
with --elastic (Horovod's elastic driver, host discovery from a file) and a host taken away by
SIGKILLing the job's processes in its namespace, by pid, then listed again.
"""
import json
import os
import re
import shutil
import subprocess
import time

from bench.harness.hosts import Hosts, regrown, stalled_after_horovod_died, world_sizes
from bench.harness.launches import Job
from bench.harness.train_runs import read_events, record, reused, shown

NAME, SUBNET = "imcsl", "198.18.41"  # a cluster of this program's own (others: 198.18.7-31)
IFACE = f"{NAME}0"
TIMEOUT_S = 5400      # a run's bound: the 4-epoch cap at K = 16 on 4 hosts at 20 Mbit/s is ~10 minutes
QUICK_TIMEOUT_S = 1200
# The lost-host arm's bound: LOST_BOUND_X x the joint arm's time to target, at least LOST_BOUND_S; a
# world that never re-forms (a joining rank hung in a collective) ends there and is recorded so.
LOST_BOUND_X, LOST_BOUND_S = 4, 600
STARTED = re.compile(r"training (?:base-batch )?steps \d+\.\.\d+")
START_LINE = re.compile(r"batch: this world starts at K .*")
AUTO_LINE = re.compile(r"compression auto \(.*")


def hosts_for(rate: str, count: int, runs_dir: str) -> Hosts:
  return Hosts(NAME, SUBNET, count, os.path.join(runs_dir, "hosts.txt"), rate=rate)


def link_counters(hosts: Hosts) -> dict[str, list[int]]:
  """{host: [tx bytes, rx bytes]} of each rank host's link, as the kernel counts them (TCP/IP
  headers and everything else that crossed it: Gloo's rendezvous, the evaluation's sums)."""
  out = {}
  for host in hosts.names:
    text = subprocess.run(["ip", "-n", host, "-s", "-j", "link", "show", "dev", IFACE], capture_output=True,
                          text=True, timeout=30).stdout
    stats = json.loads(text)[0]["stats64"]
    out[host] = [int(stats["tx"]["bytes"]), int(stats["rx"]["bytes"])]
  return out


def _curve(points, start: float) -> list[list[float]]:
  """[[seconds since the launch, update, held-out top-1]] from rank 0's TensorBoard scalars."""
  return [[round(wall - start, 1), step, round(value, 4)] for wall, step, tag, value in sorted(points)
          if tag == "eval/top1"]


def _record(key: dict, model_dir: str, job: Job, start: float, before: dict, after: dict, extra: dict) -> dict:
  """The run's record from its summary.json, log and counters; a failed run's with its log's tail."""
  job.save_logs(model_dir)
  err = job.stderr()
  path = os.path.join(model_dir, "summary.json")
  summary = {}
  if os.path.exists(path):
    with open(path) as fh:
      summary = json.load(fh)
  sent = {h: [after[h][0] - before[h][0], after[h][1] - before[h][1]] for h in after}
  policy = summary.get("batch_policy") or {}
  compression = summary.get("compression") or {}
  start_line, auto_line = START_LINE.search(err), AUTO_LINE.search(err)
  run = dict(key, command=shown(job.cmd), exit=job.proc.returncode, status=summary.get("status", "failed"),
             reached=bool(summary.get("target_reached")), time_to_target_seconds=summary.get("time_to_target_seconds"),
             target_step=summary.get("target_step"), target_epoch=summary.get("target_epoch"),
             final_top1=summary.get("final_top1"), steps=summary.get("steps"), epochs=summary.get("epochs"),
             images_trained=summary.get("images_trained"), images_per_sec=summary.get("images_per_sec"),
             global_batch_end=summary.get("global_batch"), k_end=summary.get("accumulation_steps"),
             changes=policy.get("changes", []), c_final=policy.get("c_final"),
             compression_chose=compression.get("chose"),
             start_line=start_line.group(0).strip() if start_line else None,
             auto_line=auto_line.group(0).strip() if auto_line else None,
             adascale=summary.get("adascale"), elastic=summary.get("elastic"),
             link_bytes=sent, link_mb_per_host=round(sum(s[0] for s in sent.values()) / max(1, len(sent)) / 2 ** 20, 3),
             wall_seconds=round(time.time() - start, 1), **extra)
  if summary:
    run["curve"] = _curve(read_events(model_dir), start)
  else:
    run["tail"] = job.tail(3000)
  if stalled_after_horovod_died(err):
    run["hang"] = "Horovod's race: a survivor hung after its background loop died (bench/harness/hosts.py)"
  if summary:
    record(model_dir, run)
  return run


def run_fixed(key: dict, flags: list[str], model_dir: str, hosts: Hosts, reuse: bool, timeout: float) -> dict:
  """One plain (not elastic) run of train.py on the hosts; reused when its key matches."""
  done = reuse and reused(model_dir, {**key, "flags": flags})
  if done:
    return dict(done, reused=True)
  shutil.rmtree(model_dir, ignore_errors=True)
  os.makedirs(model_dir)
  before = link_counters(hosts)
  start = time.time()
  with Job(model_dir, *flags, launcher=hosts.static_launcher(), extra_env=hosts.env) as job:
    _, left = job.wait_gone(timeout)
    after = link_counters(hosts)
    return _record({**key, "flags": flags}, model_dir, job, start, before, after,
                   {"left_running": sorted(left), "timed_out": bool(left)})


def _wait(job: Job, until: float, predicate, bound: float) -> bool:
  """Until `until` (time.time()) has passed and predicate(rank 0's log) holds, or the job ended
  (False) or `bound` seconds passed past `until` (False)."""
  while True:
    if job.proc.poll() is not None:
      return False
    now = time.time()
    if now >= until and predicate(job.stderr()):
      return True
    if now > until + bound:
      return False
    time.sleep(0.2)


def run_lost(key: dict, flags: list[str], model_dir: str, hosts: Hosts, schedule: tuple[float, float], reuse: bool,
             timeout: float) -> dict:
  """The joint arm under --elastic: at schedule[0] seconds after the launch (and once training has
  begun) a host without rank 0 is lost, at schedule[1] (and once the smaller world trains) it is
  listed again; then the run goes on to its end. The times it happened are in the record."""
  done = reuse and reused(model_dir, {**key, "flags": flags})
  if done:
    return dict(done, reused=True)
  shutil.rmtree(model_dir, ignore_errors=True)
  os.makedirs(model_dir)
  n = len(hosts.names)
  hosts.publish(*hosts.names)
  before = link_counters(hosts)
  start = time.time()
  events = {"lose_planned_s": schedule[0], "back_planned_s": schedule[1]}
  deadline = start + timeout  # every wait within the run's bound
  with Job(model_dir, *flags, launcher=hosts.launcher(n, 1, n), extra_env=hosts.env) as job:
    def wait(until, predicate):
      return _wait(job, until, predicate, bound=max(0.0, deadline - until))
    if wait(start + schedule[0], lambda text: STARTED.search(text) is not None):
      rank0 = hosts.host_of_rank(job, 0)
      lost = [h for h in hosts.names if h != rank0][-1]
      events.update(lost_host=lost, lost_at_s=round(time.time() - start, 1), killed=hosts.lose(job, lost))
      if wait(start + schedule[1], lambda text: len(world_sizes(text)) >= 2 and world_sizes(text)[1] < n):
        hosts.publish(*hosts.names)
        events["back_at_s"] = round(time.time() - start, 1)
        if wait(time.time(), lambda text: regrown(text, n) is not None):
          events["rejoined_at_s"] = round(time.time() - start, 1)
    _, left = job.wait_gone(max(1.0, deadline - time.time()))
    after = link_counters(hosts)
    events["worlds_logged"] = world_sizes(job.stderr())
    return _record({**key, "flags": flags}, model_dir, job, start, before, after,
                   {"left_running": sorted(left), "timed_out": bool(left), "loss": events})
