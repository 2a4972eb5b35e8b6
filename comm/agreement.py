"""Whether the ranks will read the same data: each rank's fingerprint of what it scanned, and the
sentence that names the hosts and their counts when the fingerprints differ.

Every rank counts its own files (input/sources.py). Two hosts whose copies of --data_dir differ
(a shard missing on one, --skip_corrupt on damage only one has, an empty held-out split) would
get different steps per epoch: different LR schedules, replicas drifting apart silently, and one
rank entering the evaluation's allreduce while the others step, a stall or (elastic) a hang.
comm/sync.first_error gathers the fingerprints with the start-up's problems (one allgather), and
comm/sync.agree_on_data in each world of an elastic run, so every rank stops with the same sentence
before the model is built.
"""
import dataclasses
import hashlib
import os
from typing import Sequence

MAX_GROUPS = 3  # ranks holding alike, named in full; the rest summed up
MAX_HOSTS = 3   # hosts named within one group
FIX = "make --data_dir hold the same files on every host."


@dataclasses.dataclass(frozen=True)
class Fingerprint:
  """What one rank will read: train and eval records (after --skip_corrupt's exclusions), files,
  classes, files truncated and read to the damage, and layout: a digest of every file's path below
  the data's root and its record count (equal totals in other files would still be dealt differently)."""
  train: int
  eval: int
  files: int
  classes: int
  damaged: int
  layout: str

  def counts(self, first: bool) -> str:
    records = (f"{self.train:,} training / {self.eval:,} held-out records" if first
               else f"{self.train:,} / {self.eval:,}")
    return f"{records} in {self.files:,} file{'' if self.files == 1 else 's'}"


def of(scanned) -> Fingerprint | None:
  """The Fingerprint of an input.sources.Scanned; None for none (synthetic, digits, fashion_mnist:
  written by this code, the same on every host)."""
  if scanned is None:
    return None
  files = scanned.train.files + scanned.eval.files
  # Paths below the files' common directory: the same set under another mount point agrees, and an
  # image folder's class (train/<wnid>/x.JPEG) is part of what is read.
  root = os.path.commonpath([os.path.dirname(f) for f in files]) if files else ""
  digest = hashlib.sha256()
  for split, split_files, split_counts in (("train", scanned.train.files, scanned.train.counts),
                                           ("eval", scanned.eval.files, scanned.eval.counts)):
    for path, count in zip(split_files, split_counts):
      digest.update(f"{split}\0{os.path.relpath(path, root)}\0{count}\n".encode())
  return Fingerprint(train=scanned.train.total, eval=scanned.eval.total, files=len(files),
                     classes=scanned.info.num_classes, damaged=len(scanned.damaged),
                     layout=digest.hexdigest()[:16])


def _ranks(ranks: list[int]) -> str:
  """'0-3', '0, 2, 5-7': ascending ranks with their runs joined."""
  runs = []
  for r in ranks:
    if runs and r == runs[-1][1] + 1:
      runs[-1][1] = r
    else:
      runs.append([r, r])
  return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _who(members: list[tuple[int, str]]) -> str:
  """'rank 1 on b', 'ranks 0-1 on a and 4-5 on c': a group's ranks by host, hosts by first rank."""
  by_host: dict[str, list[int]] = {}
  for rank, host in sorted(members):
    by_host.setdefault(host, []).append(rank)
  parts = [f"{_ranks(ranks)} on {host}" for host, ranks in by_host.items()]
  if len(parts) > MAX_HOSTS:
    rest = sum(len(r) for r in list(by_host.values())[MAX_HOSTS:])
    parts = parts[:MAX_HOSTS] + [f"{rest} more on {len(parts) - MAX_HOSTS} hosts"]
  names = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
  return f"{'rank' if len(members) == 1 else 'ranks'} {names}"


def _what(held: Fingerprint | None, first: Fingerprint | None, all_held: list) -> str:
  """The counts of one group, with what else differs from the first group's."""
  if held is None:
    return "no files scanned"
  text = held.counts(first=held == first)
  if len({h.classes for h in all_held if h is not None}) > 1:
    text += f" of {held.classes:,} classes"
  if first is not None and held != first and dataclasses.replace(held, layout=first.layout) == first:
    text += " with other names or per-file counts"
  if held.damaged:
    text += f" ({held.damaged} truncated, its tail skipped by --skip_corrupt)" if held.damaged == 1 else \
        f" ({held.damaged} truncated, their tails skipped by --skip_corrupt)"
  return text


def disagreement(held: Sequence[tuple[int, str, Fingerprint | None]]) -> str | None:
  """None when every rank holds the same Fingerprint; else one sentence naming the ranks, their
  hosts and counts, rank 0's group first. held: (rank, host, fingerprint) of every rank, as gathered
  (pure: the same answer on every rank that gathered the same list)."""
  groups: dict[Fingerprint | None, list[tuple[int, str]]] = {}
  for rank, host, fingerprint in sorted(held, key=lambda h: h[0]):
    groups.setdefault(fingerprint, []).append((rank, host))
  if len(groups) <= 1:
    return None
  order = list(groups)  # by each group's lowest rank
  first = order[0]
  parts = []
  for fingerprint in order[:MAX_GROUPS]:
    members = groups[fingerprint]
    verb = "has" if len(members) == 1 else "have"
    parts.append(f"{_who(members)} {verb} {_what(fingerprint, first, order)}")
  if len(order) > MAX_GROUPS:
    rest = [m for f in order[MAX_GROUPS:] for m in groups[f]]
    parts[-1] += (f" and {len(rest)} more ranks on {len({host for _, host in rest})} hosts "
                  "with other data")
  return f"the ranks do not hold the same data: {', '.join(parts)}; {FIX}"
