"""bench/time_to_accuracy/scale.py: make time-to-accuracy's exchange at the papers' scale, from aggregate()'s rows."""
import pytest

from bench.time_to_accuracy import scale

EXCHANGE = {256: 0.04, 2048: 0.06}


def stat(config, batch, epochs):
  """The fields of bench/time_to_accuracy/stats.aggregate's row that at_scale reads."""
  return {"config": config, "name": f"({config}) batch {batch:,}", "global_batch": batch,
          "epochs_to_target": {"median": epochs, "mean": epochs}}


STATS = [stat("a", 64, 1.2), stat("c", 1024, 2.0), stat("d", 1024, 2.5), stat("e", 4096, None)]


def test_at_scale():
  rows = {(r["config"], r["ranks"]): r for r in scale.at_scale(STATS, EXCHANGE)}
  assert sorted(rows) == [("a", 256), ("a", 2048), ("c", 256), ("c", 2048), ("e", 256), ("e", 2048)]
  a = rows["a", 256]
  assert (a["global_batch"], a["multiple"], a["updates_per_epoch"]) == (1024, 1, 1251)
  assert a["exchange_seconds_per_epoch"] == pytest.approx(50.04)
  assert a["exchange_seconds_to_target"] == pytest.approx(50.04 * 1.2)
  assert rows["a", 2048]["updates_per_epoch"] is None  # 1,024 images on 2,048 ranks
  c = rows["c", 2048]
  assert (c["global_batch"], c["updates_per_epoch"]) == (16384, 78)
  assert c["exchange_seconds_to_target"] == pytest.approx(78 * 0.06 * 2.0)
  assert rows["e", 256]["global_batch"] == 65536 and rows["e", 256]["exchange_seconds_to_target"] is None
  assert scale.at_scale(STATS[1:], EXCHANGE) == []  # no (a) to scale from


def test_scale_table_and_findings():
  rows = scale.at_scale(STATS, EXCHANGE)
  table = scale.scale_table(rows).splitlines()
  assert len(table) == 8 and "| 2,048 | 1,024 (x 1) | - | - | - | 1.20 | - |" in table[3]
  text = scale.scale_findings(rows)
  assert "At 256 ranks (c) spends 6.2 s in the exchange to the target against (a)'s 60.0 s (10x less)." in text
  assert "At 2,048 ranks (a)'s batch of 1,024 gives under one image a rank; (c) spends 9.4 s" in text
  assert "(e)" not in text  # it never reached the target
  unreached = [dict(r, exchange_seconds_to_target=None) if r["config"] == "a" else r for r in rows]
  assert "At 256 ranks (a) did not reach the target; (c) spends 6.2 s" in scale.scale_findings(unreached)
  assert "nothing to compare" in scale.scale_findings([r for r in rows if r["config"] == "a"])


def test_section_names_the_parameters_and_holds_the_table():
  rows = scale.at_scale(STATS, EXCHANGE)
  text = scale.section({"params": {"ranks_per_node": 8, "bucket": "32 MB"}, "rows": rows})
  assert text.startswith("## At the papers' scale: the exchange to the target")
  assert "(ranks_per_node: 8; bucket: 32 MB)" in text and "ImageNet's 1,281,167 training images" in text
  assert scale.scale_table(rows) in text and scale.scale_findings(rows) in text


@pytest.mark.parametrize("value, spec, factor, text", [(None, ".1f", 1.0, "-"), (0.0366, ".1f", 1e3, "36.6"),
                                                       (1251, ",", 1.0, "1,251"), (0.8612, ".2f", 100, "86.12")])
def test_dash(value, spec, factor, text):
  assert scale.dash(value, spec, factor) == text
