"""make adaptive (bench/adaptive/): the runs' flags (settings.py), the command line, and the report
from recorded runs (report.py, tables.py), no launch."""
import json

import pytest

from bench.adaptive import __main__ as cli, report, settings, tables


def flag(flags, name):
  return [f.split("=", 1)[1] for f in flags if f.startswith(f"--{name}=")]


def test_budget_flags_reach_s_by_accumulation_and_only_adascale_has_a_base_batch():
  linear, ada = settings.budget_flags("linear", 8, 1.0, 0), settings.budget_flags("adascale", 8, 1.0, 0)
  assert flag(linear, "accumulation_steps") == ["8"] == flag(ada, "accumulation_steps")  # 8 x 64 = 2 x 32 x 8
  assert flag(ada, "lr_scaling") == ["adascale"] and flag(ada, "base_batch") == ["64"] and not flag(linear, "lr_scaling")
  assert flag(linear, "base_lr") == flag(ada, "base_lr") == ["0.8"]  # one LR per 256: the base batch's


def test_the_change_phases_stop_at_the_updates_of_each_scale_and_the_last_runs_to_the_end():
  phases = settings.change_phases("runs/x", 1.0, 1)
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
    cli.parse_args(argv)
  assert message in capsys.readouterr().err


def run(name, top1, **summary):
  return {"name": name, "wall_seconds": 10.0, "eval": [[10, top1]], "gain": [], "summary": {
      "final_top1": top1, "steps": 100, "images_trained": 60_000, "status": "finished", **summary}}


def test_the_report_states_each_part_against_its_target(tmp_path):
  ada = {"adascale": {"gain": 3.0, "data_epochs": 2.8, "tau": 937}}
  out = {"setup": {"ranks": 2, "micro_batch": 32, "base_batch": 64, "base_lr_per_256": 0.8, "budget_epochs": 1.0,
                   "target": 0.85, "seeds": [0, 1], "cpu": "x", "change": settings.CHANGE,
                   "lose_at": settings.LOSE_AT, "alone": settings.ALONE},
         "parts": {"budget": {"base S=1": [run("budget-base-s0", 0.86), run("budget-base-s1", 0.88)],
                              "linear S=8": [run("budget-linear8-s0", 0.80)],
                              "adascale S=8": [run("budget-adascale8-s0", 0.88, **ada)]},
                   "steps": {"linear S=8, AdaScale's updates": [run("steps-linear8-s0", 0.85)]},
                   "change": {"adascale S=8 -> 32 -> 8": [run("change-8-32-8-s0", 0.874, **ada)]},
                   "elastic": {"adascale S=8, hosts 2 -> 1 -> 2": [
                       run("elastic-2-1-2-s0", 0.871, elastic={"worlds": [2, 1, 2], "steps_lost": [3]}, **ada)]}}}
  report.write(out, str(tmp_path))
  md = (tmp_path / "adaptive.md").read_text()
  assert "| base S=1 | 2 | 0.87 (0.86-0.88) |" in md  # median and range over seeds
  assert "linear S=8, AdaScale's updates: final top-1 0.8500 against AdaScale's 0.8800" in md
  assert "adascale S=8 -> 32 -> 8: final top-1 0.8740 against the unchanged AdaScale S=8's 0.8800 (-0.60 points" in md
  assert "hosts 2 -> 1 -> 2: final top-1 0.8710" in md and "worlds [2, 1, 2]" in md and "| [3] |" in md
  assert "Not run (issue 24): a target the base batch needs several epochs for." in md
  assert json.loads((tmp_path / "adaptive.json").read_text())["parts"].keys() == out["parts"].keys()
  assert (tmp_path / "adaptive.png").stat().st_size > 0


def trial(step, k_from, k_to, probe):
  return {"step": step, "k_from": k_from, "k_to": k_to, "global_from": 64 * k_from, "global_to": 64 * k_to,
          "probe": probe}


def target_run(name, step, changes=None):
  summary = {"time_to_target_seconds": step / 10, "target_step": step, "steps": step, "images_trained": step * 64}
  if changes is not None:
    summary["batch_policy"] = {"k_final": changes[-1]["k_to"] if changes else 1, "changes": changes}
  return run(name, 0.86, **summary)


def test_k_updates_counts_the_updates_above_k_1_before_the_target():
  adaptive_run = target_run("target-adaptive-s0", 887, [trial(50, 1, 2, True), trial(100, 2, 1, False)])
  assert tables.k_updates(adaptive_run) == (50, 887, 1)  # updates at K > 1, updates to it, K there
  assert tables.k_updates(target_run("x", 300, [trial(50, 1, 2, True)])) == (250, 300, 2)
  assert tables.k_updates(target_run("x", 300, [])) == (0, 300, 1)


def test_an_adaptive_run_that_stayed_at_k_1_is_said_not_to_tell_the_controller_apart():
  # The adaptive runs took fewer updates than the fixed ones, but K was 2 for 50 updates of each:
  # the report must not credit the controller with them.
  trials = [trial(50, 1, 2, True), trial(100, 2, 1, False)]
  parts = {"target": {"fixed": [target_run("target-fixed-s0", 1054), target_run("target-fixed-s1", 1288)],
                      "adaptive": [target_run("target-adaptive-s0", 887, trials),
                                   target_run("target-adaptive-s1", 1238, trials)]}}
  note = tables.k_note(parts["target"])
  assert "K was 1 at the target in every seed" in note and "50 of 887 and 50 of 1,238 updates" in note
  assert "could not tell the controller from the fixed run" in note
  assert "1,062 against 1,171" in note and "(1,054-1,288)" in note
  assert "fewer updates" not in "\n".join(tables.targets(parts))
  assert any("K stayed 1" in line for line in tables.targets(parts))


def tau_run(name, s, tau):
  flags = ["--warmup_epochs=0.25", f"--accumulation_steps={s}"]
  return {**run(name, 0.8, global_batch=64 * s), "flags": flags, "tau": tau}


def test_warmups_compare_the_linear_arms_updates_with_adascales_from_tau():
  # S = 32: 60,000 // 2,048 = 29 updates an epoch, a quarter of it 7; AdaScale's warmup is a
  # quarter of 29 x 32 = 928 base-batch steps, 232, which tau passes between its logged updates 56 and 60.
  tau = [[52, 214.1], [56, 226.4], [60, 238.5], [64, 250.1]]
  budget = {"linear S=32": [tau_run("budget-linear32-s0", 32, [])],
            "adascale S=32": [tau_run("budget-adascale32-s0", 32, tau), tau_run("budget-adascale32-s1", 32, tau)]}
  (line,) = tables.warmups(budget)
  assert line.startswith("- S = 32: the linear rule warms up in 7 updates (0.25 of its 29 an epoch) to 32x the "
                         "base LR; AdaScale's warmup, 232 base-batch steps of tau (0.25 of 29 x 32), ended between "
                         "updates 56 and 60 in every seed")
  assert tables.warmups({"linear S=32": budget["linear S=32"]}) == []
