"""bench/launches.py's reading of a launch's log (the launches themselves: tests/multiprocess)."""
import pytest

from bench.launches import last_step

LINEAR = "[1,0]<stderr>:epoch   0.35  step      8/276  loss 2.2830  top1 0.281  lr 0.03043     1712.3 img/s  eta 0:00:10\n"
ADASCALE = ("[0]<stderr>:epoch   3.72  update    102  loss 0.2289  top1 0.938  lr 0.01067  B_simple     222  "
            "r  1.78  data epoch   4.36     557.4 img/s  eta 0:00:00\n")


@pytest.mark.parametrize("text, want", [
    ("", 0),
    (LINEAR, 8),
    (LINEAR + LINEAR.replace("8/276", "9/276"), 9),
    (ADASCALE, 102),  # --lr_scaling=adascale counts updates
    ("[0]<stderr>:15:04:24 training steps 0..69 (23 per epoch, 3.0 epochs)\n", 0),
])
def test_last_step_reads_the_newest_progress_line(text, want):
  assert last_step(text) == want
