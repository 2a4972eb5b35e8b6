"""--compression=auto's choice (comm/compression_choice.py): ResNet-50's gradients against a table
of link rates, and hand-computed prices of small cases."""
import math

import pytest

from comm import compression_choice, cost_model, powersgd
from comm.cost_model import CostModel, Link
from comm.topology import World
from models import gradient_sets

RESNET50 = gradient_sets.shapes("resnet50")
VIEWS = powersgd.plan(RESNET50, 4)  # 54 of the 161 gradients
TWO_HOSTS = World(size=2, local_size=1, cross_size=2)
MB32 = 32 << 20


def resnet50_encode(view) -> float:
  """Encode + decode seconds of one matrix: 30 us + 5 ns an element, a line through what
  comm/probe.encode_seconds measured for ResNet-50 at rank 4 on this 2-core machine (121 ms for its
  25.5 M compressed elements)."""
  return 30e-6 + 5e-9 * view[0] * view[1] if view else 0.0


def price_at(gbit: float, world: World = TWO_HOSTS, algorithm: str = "flat"):
  """Bucket prices of a link of `gbit` Gbit/s per host, 300 us a call (the probe's order here)."""
  model = CostModel(intra=Link(300e-6, 1 / 5e9), inter=Link(300e-6, 8 / (gbit * 1e9)))
  return lambda nbytes, tensors: cost_model.bucket_time(model, world, algorithm, nbytes, tensors)


def resnet50_choice(gbit: float, wire: str = "float32") -> compression_choice.Choice:
  return compression_choice.choose(RESNET50, VIEWS, 4, [resnet50_encode(v) for v in VIEWS], price_at(gbit), MB32,
                                   wire=wire)


@pytest.mark.parametrize("gbit, layers, smallest", [
    # ResNet-50's 97.5 MB cost 1.64 s whole at 0.5 Gbit/s: compressing every matrix (1.47 MB,
    # 129 ms of encoding) pays by far.
    (0.5, 54, 64 * 64),
    (2, 54, 64 * 64),
    # Near the break-even (4 bytes at 6 Gbit/s: 5.3 ns an element against 5 ns of encoding plus
    # 30 us a matrix) only the large matrices pay: the 29 of 512 x 512 elements or more.
    (6, 29, 512 * 512),
    # Fast links: bytes cost less than their encoding; every gradient whole.
    (10, 0, None),
    (100, 0, None),
])
def test_resnet50_on_links_from_slow_to_fast(gbit, layers, smallest):
  choice = resnet50_choice(gbit)
  chosen = choice.chosen
  assert chosen.layers == layers and choice.planned == 54 and len(chosen.mask) == 161
  compressed = [math.prod(v) for v, keep in zip(VIEWS, chosen.mask) if keep]
  if layers:
    assert min(compressed) == smallest
    # the big ones: every matrix left whole is smaller than every one compressed
    assert max((math.prod(v) for v, keep in zip(VIEWS, chosen.mask) if v and not keep), default=0) < smallest
    assert chosen.seconds < choice.plain.seconds and choice.summary()["chose"] == "powersgd"
  else:
    assert chosen is choice.plain and choice.summary()["chose"] == "none"
  # Never predicted above either fixed way: every gradient whole, or every matrix compressed.
  assert chosen.seconds <= min(choice.plain.seconds, choice.every.seconds)
  assert choice.every.layers == 54


def test_resnet50_bytes_each_way():
  choice = resnet50_choice(0.5)
  assert choice.plain.nbytes == 4 * sum(math.prod(s) for s in RESNET50) == 102_228_128
  assert choice.plain.second_bytes == 0 and choice.plain.encode_s == 0
  sent = powersgd.wire_bytes(RESNET50, VIEWS, 4, 4)  # every matrix: --compression=powersgd's bytes
  assert (choice.every.first_bytes, choice.every.second_bytes) == (sent.first, sent.second)
  # --powersgd_wire=fp16 halves P and Q; the gradients left whole stay float32 under auto.
  fp16 = resnet50_choice(0.5, wire="float16").every
  vectors = sum(math.prod(s) for s, v in zip(RESNET50, VIEWS) if v is None)
  assert fp16.nbytes == (sent.compressed - 4 * vectors) // 2 + 4 * vectors


def test_the_start_up_line_and_summary_say_what_and_why():
  slow, fast = resnet50_choice(0.5), resnet50_choice(100)
  assert slow.describe() == ("PowerSGD rank 4 on 54 of 54 matrices: 1.47 MB in two allreduces, 25.2 ms + 129.1 ms "
                             "encode/decode = 154.3 ms, against 97.49 MB whole in 1636.9 ms "
                             "(all 54 matrices: 154.3 ms)")
  assert fast.describe() == ("every gradient whole: 97.49 MB whole in 9.4 ms, against PowerSGD rank 4 on all 54 "
                             "matrices: 1.47 MB in two allreduces, 0.7 ms + 129.1 ms encode/decode = 129.9 ms")
  summary = fast.summary()
  assert summary["uncompressed"] == summary["chosen"] == {
      "layers": 0, "bytes_per_step": 102_228_128, "predicted_ms": 9.378, "exchange_ms": 9.378, "encode_ms": 0.0}
  assert summary["all_measured"]["layers"] == 54 and summary["layers_compressed"] == 0


# Hand-computed: one call costs 1 ms + 1 ns a byte (price below), no fusion threshold (each tensor alone).
def linear(nbytes, tensors):
  return 1e-3 + nbytes * 1e-9


@pytest.mark.parametrize("shapes, encode, want_mask, want_ms", [
    # (1000, 1000) at rank 1: P 1000 + Q 1000 elements instead of 1e6. Whole: 1 + 4 = 5 ms.
    # Compressed: first call 1 + 0.004, second 1 + 0.004, encode 1 ms: 3.008 ms.
    ([(1000, 1000)], [1e-3], (True,), 3.008),
    # The same with 3 ms of encoding: 5.008 ms, more than 5 ms whole.
    ([(1000, 1000)], [3e-3], (False,), 5.0),
    # A small matrix: 400 bytes save 0.4 us, the second call costs 1 ms: whole.
    ([(10, 10)], [0.0], (False,), 1.0004),
    # Two matrices and a vector; the second's encoding (5 ms) costs more than its 4 ms of bytes:
    # only the first. Whole: 3 calls = 3 + 4 + 4 + 0.004 ms; chosen: the first as P (0.004),
    # the second and the vector whole, then one Q: 4 calls + 8.012 us + 1 ms encode.
    ([(1000, 1000), (1000, 1000), (1000,)], [1e-3, 5e-3, 0.0], (True, False, False), 4 + 4.012 + 1),
    # Not measured (inf): never compressed, however much it would save.
    ([(1000, 1000)], [math.inf], (False,), 5.0),
])
def test_hand_computed_choices(shapes, encode, want_mask, want_ms):
  views = powersgd.plan(shapes, 1)
  choice = compression_choice.choose(shapes, views, 1, encode, linear, threshold=0)
  assert choice.chosen.mask == want_mask
  assert choice.chosen.seconds * 1e3 == pytest.approx(want_ms)


@pytest.mark.parametrize("overlap, want", [(0.0, (True,)), (1 / 3, (False,)), (0.5, (False,))])
def test_the_plain_exchange_hiding_behind_backprop_can_make_whole_the_faster_way(overlap, want):
  # One (1000, 1000) matrix: whole 1 + 4 ms; compressed two calls of 8 us and 2 ms of encoding = 4.008 ms.
  # Priced alone, compression wins by 1 ms; with a third of the plain exchange hidden (3.33 ms visible), whole wins.
  views = powersgd.plan([(1000, 1000)], 1)
  choice = compression_choice.choose([(1000, 1000)], views, 1, [2e-3], linear, threshold=0, overlap=overlap)
  assert choice.chosen.mask == want and choice.summary()["overlap"] == overlap


def test_fused_buckets_share_alpha_so_the_second_call_is_what_compression_pays_extra():
  # One 32 MB bucket: the four matrices and the vector whole in one call (1 ms + 4.004 ms of bytes).
  # Compressing all four saves their bytes but adds a call; at 0.1 ms of encoding each it pays.
  shapes = [(500, 500)] * 4 + [(1000,)]
  views = powersgd.plan(shapes, 1)
  choice = compression_choice.choose(shapes, views, 1, [1e-4] * 4 + [0.0], linear, threshold=MB32)
  assert choice.plain.seconds * 1e3 == pytest.approx(1 + 4.004)
  assert choice.chosen.mask == (True,) * 4 + (False,)
  # first call: 4 P's of 500 + the vector; second: 4 Q's of 500; 4 x 0.1 ms of encoding
  assert choice.chosen.seconds * 1e3 == pytest.approx(1 + 0.012 + 1 + 0.008 + 0.4)


def test_matrices_left_unmeasured_are_never_compressed_and_the_line_says_so():
  # The time bound reached only the 20 largest (probe.encode_seconds measures largest first).
  largest = sorted(range(len(VIEWS)), key=lambda i: -math.prod(VIEWS[i]) if VIEWS[i] else 0)[:20]
  encode = [resnet50_encode(v) if i in largest else (math.inf if v else 0.0) for i, v in enumerate(VIEWS)]
  choice = compression_choice.choose(RESNET50, VIEWS, 4, encode, price_at(0.5), MB32)
  assert choice.chosen.layers == choice.every.layers == 20 and choice.planned == 54
  assert {i for i, keep in enumerate(choice.chosen.mask) if keep} == set(largest)
  assert choice.describe().endswith("(all 20 measured of 54 matrices: 377.9 ms)")


def test_one_rank_has_nothing_to_exchange_and_never_compresses():
  choice = compression_choice.choose(RESNET50, VIEWS, 4, [resnet50_encode(v) for v in VIEWS],
                                     price_at(0.5, World()), MB32)
  assert choice.plain.seconds == 0 and choice.chosen is choice.plain


def test_no_matrix_to_compress():
  choice = compression_choice.choose([(10,), ()], [None, None], 4, [0.0, 0.0], linear, MB32)
  assert choice.best is None and choice.every is None and choice.chosen is choice.plain
  assert choice.describe().endswith("no matrix to compress at rank 4")
  assert choice.summary()["all_measured"] is None


@pytest.mark.parametrize("algorithm", ["flat", "horovod", "hier", "hybrid"])
def test_every_algorithm_is_priced(algorithm):
  # 2 hosts x 2 ranks at 0.5 Gbit/s per host link: slow under every algorithm.
  world = World(size=4, local_size=2, cross_size=2)
  choice = compression_choice.choose(RESNET50, VIEWS, 4, [resnet50_encode(v) for v in VIEWS],
                                     price_at(0.5, world, algorithm), MB32)
  assert choice.chosen.layers == 54
