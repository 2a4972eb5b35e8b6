"""make adaptive (bench/adaptive.py, bench/adaptive_report.py): the runs' flags and the report
from recorded runs, no launch."""
import json

import pytest

from bench import adaptive, adaptive_report


def flag(flags, name):
  return [f.split("=", 1)[1] for f in flags if f.startswith(f"--{name}=")]


def test_budget_flags_reach_s_by_accumulation_and_only_adascale_has_a_base_batch():
  linear, ada = adaptive.budget_flags("linear", 8, 1.0, 0), adaptive.budget_flags("adascale", 8, 1.0, 0)
  assert flag(linear, "accumulation_steps") == ["8"] == flag(ada, "accumulation_steps")  # 8 x 64 = 2 x 32 x 8
  assert flag(ada, "lr_scaling") == ["adascale"] and flag(ada, "base_batch") == ["64"] and not flag(linear, "lr_scaling")
  assert flag(linear, "base_lr") == flag(ada, "base_lr") == ["0.8"]  # one LR per 256: the base batch's


def test_the_change_phases_stop_at_the_updates_of_each_scale_and_the_last_runs_to_the_end():
  phases = adaptive.change_phases("runs/x", 1.0, 1)
  assert [flag(p, "accumulation_steps") for p in phases] == [["8"], ["32"], ["8"]]
  assert [flag(p, "max_steps") for p in phases] == [["118"], ["158"], []]
  assert all(flag(p, "model_dir") == ["runs/x"] and flag(p, "seed") == ["1"] for p in phases)
  # Only the batch and the stop differ: one schedule (--epochs, the LR) for every phase.
  rest = [[f for f in p if not f.startswith(("--accumulation_steps=", "--max_steps=", "--log_every="))] for p in phases]
  assert rest[0] == rest[1] == rest[2]


@pytest.mark.parametrize("argv, message", [(["--only=budget,nope"], "nope"), (["--scales=1"], "2 or more"),
                                           (["--seeds=a"], "integers")])
def test_bad_arguments_are_one_sentence(argv, message, capsys):
  with pytest.raises(SystemExit):
    adaptive.parse_args(argv)
  assert message in capsys.readouterr().err


def run(name, top1, **summary):
  return {"name": name, "wall_seconds": 10.0, "eval": [[10, top1]], "gain": [], "summary": {
      "final_top1": top1, "steps": 100, "images_trained": 60_000, "status": "finished", **summary}}


def test_the_report_states_each_part_against_its_target(tmp_path):
  ada = {"adascale": {"gain": 3.0, "data_epochs": 2.8, "tau": 937}}
  out = {"setup": {"ranks": 2, "micro_batch": 32, "base_batch": 64, "base_lr_per_256": 0.8, "budget_epochs": 1.0,
                   "target": 0.85, "seeds": [0, 1], "cpu": "x", "change": adaptive.CHANGE,
                   "lose_at": adaptive.LOSE_AT, "alone": adaptive.ALONE},
         "parts": {"budget": {"base S=1": [run("budget-base-s0", 0.86), run("budget-base-s1", 0.88)],
                              "linear S=8": [run("budget-linear8-s0", 0.80)],
                              "adascale S=8": [run("budget-adascale8-s0", 0.88, **ada)]},
                   "steps": {"linear S=8, AdaScale's updates": [run("steps-linear8-s0", 0.85)]},
                   "change": {"adascale S=8 -> 32 -> 8": [run("change-8-32-8-s0", 0.874, **ada)]},
                   "elastic": {"adascale S=8, hosts 2 -> 1 -> 2": [
                       run("elastic-2-1-2-s0", 0.871, elastic={"worlds": [2, 1, 2], "steps_lost": [3]}, **ada)]}}}
  adaptive_report.write(out, str(tmp_path))
  md = (tmp_path / "adaptive.md").read_text()
  assert "| base S=1 | 2 | 0.87 (0.86-0.88) |" in md  # median and range over seeds
  assert "linear S=8, AdaScale's updates: final top-1 0.8500 against AdaScale's 0.8800" in md
  assert "adascale S=8 -> 32 -> 8: final top-1 0.8740 against the unchanged AdaScale S=8's 0.8800 (-0.60 points" in md
  assert "hosts 2 -> 1 -> 2: final top-1 0.8710" in md and "worlds [2, 1, 2]" in md and "| [3] |" in md
  assert "Not run (issue 24): a target the base batch needs several epochs for." in md
  assert json.loads((tmp_path / "adaptive.json").read_text())["parts"].keys() == out["parts"].keys()
  assert (tmp_path / "adaptive.png").stat().st_size > 0
