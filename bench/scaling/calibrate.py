"""The cost model's calibration inside a launch: per level the call the exchanges make, timed at
several sizes, fitted by comm/cost_model.fit (least squared relative error).

Levels: in the node flat's grouped allreduce (all node groups at once, each on
its own host: beta per rank) and hier's reduce-scatter + allgather pair; one
local pass over a buffer (hier's scale); across hosts flat's own call over every
rank and hier's cross allreduce (all cross groups at once, the local_size groups
of a host sharing its link: beta per host link).
"""
import time
from statistics import median

import numpy as np
import tensorflow as tf

from comm.cost_model import CostModel, Link, fit
from progress import emit
from bench.scaling import timing
from bench.scaling.settings import SMALL_CASE_BYTES, SMALL_CASE_CALLS

TAGS = ("cal_node", "cal_pair", "cal_copy", "cal_flat", "cal_cross")


def carried(tag: str, n: int, local_size: int) -> int:
  """Bytes a level's call carries when a row's buffer is n: hier's cross allreduce
  carries a 1/local_size share. Calibrated at 1-64 MB it sat above hier's 0.5 MB
  cross calls, and the 2x2 1 MB hier row came out 1.15-1.49 x over in four runs."""
  return n // local_size if tag == "cal_cross" else n


def levels(hvd, world, groups) -> list[tuple]:
  """(tag, collective(x, name)) per level this topology has."""
  out = []
  if groups.node is not None:
    # On one host flat's call itself (the global set); on several, the node's set.
    node_set = hvd.global_process_set if world.cross_size == 1 else groups.node
    out.append(("cal_node", lambda x, name: hvd.grouped_allreduce(
        [x], op=hvd.Average, process_set=node_set, name=name)[0]))
    if world.local_size > 1:
      # hier's first and last phases as it runs them (comm/hierarchical.py): their own cost.
      out.append(("cal_pair", lambda x, name: hvd.allgather(
          hvd.reducescatter(x, op=hvd.Sum, process_set=groups.node, name=f"{name}_rs"),
          process_set=groups.node, name=f"{name}_ag")))
  # One pass over a buffer on every rank at once, as hier's scale (CostModel.copy).
  out.append(("cal_copy", lambda x, name: x * 0.25))
  if world.cross_size > 1:
    # flat's own call across hosts: one grouped allreduce over every rank (CostModel.flat_call).
    out.append(("cal_flat", lambda x, name: hvd.grouped_allreduce([x], op=hvd.Average, name=name)[0]))
  if groups.cross is not None:
    out.append(("cal_cross", lambda x, name: hvd.allreduce(x, op=hvd.Sum, process_set=groups.cross, name=name)))
  return out


def calls(hvd, world, groups, sizes) -> dict:
  """{(tag, bytes): (tf.function, buffer)}, traced and warmed up.

  Each level's call run as the measured exchanges run it (inside a tf.function,
  one stable name per size, the result fetched with .numpy()), all groups of a
  level at once, as hier's phases run (and comm/probe.py). Eager allreduces
  under a new name per call, which this replaced, cost more per call than whole
  exchanges (1x4: 65-78 ms at 64 KB-4 MB, against 38 ms for a 1 MB flat one).
  """
  rng = np.random.default_rng(world.rank)
  out = {}
  for tag, collective in levels(hvd, world, groups):
    for n in sizes:
      fn = tf.function(lambda x, n=n, tag=tag, collective=collective: collective(x, f"{tag}_{n}"))
      x = tf.constant(rng.standard_normal(carried(tag, n, world.local_size) // 4).astype(np.float32))
      fn(x).numpy()
      out[(tag, n)] = (fn, x)
  return out


def time_calls(hvd, calls: dict, times: dict) -> None:
  """One timing of every calibration call, sizes taking turns, appended to times[(tag, bytes)]."""
  for key, (fn, x) in calls.items():
    k = SMALL_CASE_CALLS if key[1] <= SMALL_CASE_BYTES else 1
    timing.sync(hvd)
    start = time.perf_counter()
    for _ in range(k):
      fn(x).numpy()
    times.setdefault(key, []).append((time.perf_counter() - start) / k)


def points(hvd, world, times: dict, sizes) -> dict:
  """{tag: [(bytes carried, median seconds of the slowest rank)]} (collective: every rank calls it)."""
  return {tag: [(carried(tag, n, world.local_size), median(timing.slowest(hvd, times[(tag, n)])))
                for n in sizes if (tag, n) in times] for tag in TAGS}


def model_from(pts: dict, world, gloo: bool) -> CostModel:
  """The CostModel these calibration points fit (a level without points: no cost)."""
  intra = fit(world.local_size, pts["cal_node"]) if pts["cal_node"] else Link(0.0, 0.0)
  inter = (fit(world.cross_size, pts["cal_cross"], sharing=world.local_size) if pts["cal_cross"]
           else Link(0.0, 0.0))
  pair = fit(world.local_size, pts["cal_pair"]) if pts["cal_pair"] else None
  # fit over 2 ranks: its bytes term is then the buffer's own bytes, one pass.
  copy = fit(2, pts["cal_copy"]).beta if pts["cal_copy"] else 0.0
  flat_call = fit(2, pts["cal_flat"]) if pts["cal_flat"] else None  # 2 ranks: beta per buffer byte
  return CostModel(intra=intra, inter=inter, flat="ring" if gloo else "mpi", pair=pair, copy=copy,
                   flat_call=flat_call)


def _link(link, per: str, pts) -> dict:
  return {"alpha_us": link.alpha * 1e6 if link else None, "gbps": link.gbps if link and link.beta else None,
          "per": per, "points": pts}


def summary(model: CostModel, points: dict, world) -> dict:
  """The calibration as the JSON records it: per level alpha (us), bandwidth (GB/s), what it is per, points."""
  inter = _link(model.inter, "host link", points["cal_cross"])
  inter["sharing"] = world.local_size
  return {"flat": model.flat, "path": "tf.function, stable names", "fit": "least squared relative error",
          "intra": _link(model.intra, "rank", points["cal_node"]),
          "copy": {"gbps": 1e-9 / model.copy if model.copy else None, "per": "rank, one pass",
                   "points": points["cal_copy"]},
          "flat_call": _link(model.flat_call, "byte of the buffer", points["cal_flat"]),
          "pair": _link(model.pair, "rank", points["cal_pair"]), "inter": inter}


def fitted(hvd, world, times: dict, sizes, label: str, launch: str) -> tuple[CostModel, dict]:
  """(CostModel, its JSON summary) from {(tag, bytes): [seconds]}; rank 0 prints the points."""
  pts = points(hvd, world, times, sizes)
  if world.rank == 0:
    for tag, p in pts.items():
      if p:
        emit(f"{launch} calibration {label} {tag}: " + ", ".join(f"{n} bytes {t * 1e3:.1f} ms" for n, t in p))
  model = model_from(pts, world, hvd.gloo_enabled())
  return model, summary(model, pts, world)

