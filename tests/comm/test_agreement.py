"""comm/agreement.py: what each rank will read (a fingerprint of its scan), and the one sentence
that names the hosts and their counts when the ranks' fingerprints differ (tables). The real
gather over 2 ranks with different data directories is tests/multiprocess/scripts/data_check.py."""
import pytest

from flags.config import Source
from comm import agreement
from input import sources

FULL = agreement.Fingerprint(train=1497, eval=300, files=5, classes=10, damaged=0, layout="a" * 12)
SHORT = agreement.Fingerprint(train=1122, eval=300, files=4, classes=10, damaged=0, layout="b" * 12)
NO_EVAL = agreement.Fingerprint(train=1497, eval=0, files=4, classes=10, damaged=0, layout="c" * 12)
RENAMED = agreement.Fingerprint(train=1497, eval=300, files=5, classes=10, damaged=0, layout="d" * 12)
TRUNCATED = agreement.Fingerprint(train=1496, eval=300, files=5, classes=10, damaged=1, layout="e" * 12)
FIX = "; make --data_dir hold the same files on every host."


@pytest.mark.parametrize("held, want", [
    ([(0, "hostA", FULL), (1, "hostB", FULL)], None),
    ([(0, "hostA", None), (1, "hostB", None)], None),  # synthetic, digits: nothing scanned, nothing to differ
    ([(0, "hostA", FULL)], None),
    # A host lacking a shard's records: rank 1 would take fewer steps per epoch.
    ([(0, "hostA", FULL), (1, "hostB", SHORT)],
     "the ranks do not hold the same data: rank 0 on hostA has 1,497 training / 300 held-out records in 5 "
     "files, rank 1 on hostB has 1,122 / 300 in 4 files" + FIX),
    # Ranks grouped by what they hold, each group by host; rank 0's group first.
    ([(0, "a", FULL), (1, "a", FULL), (2, "b", SHORT), (3, "b", SHORT), (4, "c", FULL), (5, "c", FULL)],
     "the ranks do not hold the same data: ranks 0-1 on a and 4-5 on c have 1,497 training / 300 held-out "
     "records in 5 files, ranks 2-3 on b have 1,122 / 300 in 4 files" + FIX),
    ([(0, "a", SHORT), (1, "a", FULL), (2, "a", SHORT)],
     "the ranks do not hold the same data: ranks 0, 2 on a have 1,122 training / 300 held-out records in "
     "4 files, rank 1 on a has 1,497 / 300 in 5 files" + FIX),
    # An empty held-out split on one host: its evaluation would skip the others' allreduce.
    ([(0, "hostA", FULL), (1, "hostB", NO_EVAL)],
     "the ranks do not hold the same data: rank 0 on hostA has 1,497 training / 300 held-out records in 5 "
     "files, rank 1 on hostB has 1,497 / 0 in 4 files" + FIX),
    # The same counts in other files (another conversion): the epochs' partitions would differ.
    ([(0, "hostA", FULL), (1, "hostB", RENAMED)],
     "the ranks do not hold the same data: rank 0 on hostA has 1,497 training / 300 held-out records in 5 "
     "files, rank 1 on hostB has 1,497 / 300 in 5 files with other names or per-file counts" + FIX),
    # --skip_corrupt on damage only one host has.
    ([(0, "hostA", FULL), (1, "hostB", TRUNCATED)],
     "the ranks do not hold the same data: rank 0 on hostA has 1,497 training / 300 held-out records in 5 "
     "files, rank 1 on hostB has 1,496 / 300 in 5 files (1 truncated, its tail skipped by --skip_corrupt)"
     + FIX),
])
def test_disagreement_names_the_hosts_and_their_counts(held, want):
  assert agreement.disagreement(held) == want


def test_other_classes_are_named():
  other = agreement.Fingerprint(train=1497, eval=300, files=5, classes=1000, damaged=0, layout="f" * 12)
  assert agreement.disagreement([(0, "a", FULL), (1, "b", other)]) == (
      "the ranks do not hold the same data: rank 0 on a has 1,497 training / 300 held-out records in 5 files "
      "of 10 classes, rank 1 on b has 1,497 / 300 in 5 files of 1,000 classes" + FIX)


def test_many_ranks_make_a_bounded_sentence():
  # 64 ranks on 16 hosts, each host's 4 ranks holding their own counts: 16 groups.
  held = [(r, f"node{r // 4:02d}", agreement.Fingerprint(1000 + r // 4, 300, 5, 10, 0, f"{r // 4:012d}"))
          for r in range(64)]
  sentence = agreement.disagreement(held)
  assert sentence.startswith("the ranks do not hold the same data: ranks 0-3 on node00 have 1,000 training / "
                             "300 held-out records in 5 files, ranks 4-7 on node01 have 1,001 / 300 in 5 files")
  assert "and 52 more ranks on 13 hosts with other data" in sentence and sentence.endswith(FIX)
  assert len(sentence) < 500


def split(directory, names, counts):
  return sources.Split(tuple(f"{directory}/{n}" for n in names), tuple(counts))


def scanned(directory, train_names=("train-00000-of-00002", "train-00001-of-00002"), train_counts=(5, 4),
            eval_names=("validation-00000-of-00001",), eval_counts=(3,), damaged=(), classes=10):
  info = sources.imagenet_like("imagenet", classes, 32, sum(train_counts), sum(eval_counts))
  return sources.Scanned(info=info, source=Source.IMAGENET, train=split(directory, train_names, train_counts),
                         eval=split(directory, eval_names, eval_counts),
                         damaged=tuple(f"{directory}/{n}" for n in damaged))


def test_a_fingerprint_is_what_the_rank_will_read_wherever_its_directory_is():
  here = agreement.of(scanned("/data/hostA/imagenet"))
  assert (here.train, here.eval, here.files, here.classes, here.damaged) == (9, 3, 3, 10, 0)
  assert agreement.of(scanned("/mnt/other")) == here  # the same files under another path
  assert agreement.of(None) is None  # synthetic, digits, fashion_mnist: no scan to differ
  # Anything that changes what a rank reads changes it.
  assert agreement.of(scanned("/d", train_counts=(4, 5))) != here  # the same total, other per-file counts
  assert agreement.of(scanned("/d", train_names=("train-00000-of-00002", "train-00001-of-00003"))) != here
  assert agreement.of(scanned("/d", eval_names=(), eval_counts=())).eval == 0
  assert agreement.of(scanned("/d", classes=1000)) != here
  assert agreement.of(scanned("/d", damaged=("train-00001-of-00002",))).damaged == 1


def test_image_folders_fingerprint_their_paths_below_the_root():
  # Two class folders holding the same file names: the class of a file is part of what is read.
  a = scanned("/r", train_names=("train/n01/x.JPEG", "train/n02/y.JPEG"), train_counts=(1, 1),
              eval_names=("val/n01/z.JPEG",), eval_counts=(1,))
  b = scanned("/s", train_names=("train/n02/x.JPEG", "train/n01/y.JPEG"), train_counts=(1, 1),
              eval_names=("val/n01/z.JPEG",), eval_counts=(1,))
  assert agreement.of(a) != agreement.of(b)
  assert agreement.of(a) == agreement.of(scanned("/elsewhere/r", train_names=("train/n01/x.JPEG", "train/n02/y.JPEG"),
                                                 train_counts=(1, 1), eval_names=("val/n01/z.JPEG",),
                                                 eval_counts=(1,)))
