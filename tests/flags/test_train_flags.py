"""Flag validation: every bad input becomes one ConfigError naming the flag and the fix."""
import importlib.util
import json
import os
import types

import pytest
from absl import flags as absl_flags

from flags import train_flags as flags
from comm.topology import World
from conftest import REPO, python


def values(**overrides):
  """Parsed-flag stand-in: every flag's default, with overrides."""
  flags.define_flags()
  f = absl_flags.FLAGS
  defaults = {name: f[name].default for name in f}
  unknown = set(overrides) - set(defaults)
  assert not unknown, unknown
  return types.SimpleNamespace(**{**defaults, **overrides})


def error(world=World(), **overrides):
  with pytest.raises(flags.ConfigError) as e:
    flags.build_config(values(**overrides), world)
  return str(e.value)


def test_defaults_are_valid(tmp_path):
  config = flags.build_config(values(model_dir=str(tmp_path)), World(size=2, rank=1))
  assert config.data.global_batch == 2 * config.data.batch_size
  assert config.data.data_dir.endswith(os.path.join("data", "digits"))
  json.dumps(config.to_json(), default=str)


@pytest.mark.parametrize("overrides, world, must_name", [
    ({"model": "resnet51"}, World(), "--model"),
    ({"dataset": "mnist"}, World(), "--dataset"),
    ({"batch_size": 0}, World(), "--batch_size"),
    ({"batch_size": -4}, World(), "--batch_size"),
    ({"global_batch_size": 63}, World(size=2), "--global_batch_size"),
    ({"global_batch_size": -64}, World(size=2), "--global_batch_size"),
    ({"batch_size": 1000}, World(size=2), "--batch_size"),  # 2000 > 1497 training examples
    ({"batch_size": 1}, World(size=301), "ranks"),           # more ranks than 300 held-out examples
    ({"epochs": 0}, World(), "--epochs"),
    ({"max_steps": -1}, World(), "--max_steps"),
    ({"log_every": 0}, World(), "--log_every"),
    ({"base_lr": 0}, World(), "--base_lr"),
    ({"momentum": 1.0}, World(), "--momentum"),
    ({"decay_epochs": ["ten"]}, World(), "--decay_epochs"),
    ({"model_dir": ""}, World(), "--model_dir"),
    ({"accumulation_steps": 0}, World(), "--accumulation_steps"),
    ({"global_batch_size": 64, "accumulation_steps": 3}, World(size=2), "--global_batch_size"),
    ({"batch_size": 250, "accumulation_steps": 4}, World(size=2), "--batch_size"),  # 2000 > 1497
    ({"eval_every": -1}, World(), "--eval_every"),
    ({"eval_every_epochs": 0}, World(), "--eval_every_epochs"),
    ({"target_top1": 75.9}, World(), "--target_top1"),  # a percentage, not a fraction
    ({"target_top5": -0.5}, World(), "--target_top5"),
    ({"target_top1": 0.5, "dataset": "synthetic"}, World(), "--target_top1"),  # no held-out split
    ({"base_batch": -8}, World(), "--base_batch"),
    ({"base_batch": 8}, World(size=2), "--lr_scaling=adascale"),  # B0 is AdaScale's alone
    ({"lr_scaling": "adascale", "noise_scale": False}, World(size=2), "--noise_scale"),  # the gain's source
    ({"lr_scaling": "adascale", "base_batch": 8}, World(), "--accumulation_steps"),  # 1 rank: no noise scale
    ({"batch_policy": "adaptive"}, World(size=2), "--lr_scaling=adascale"),  # the linear rule would jump the LR
    ({"batch_policy": "adaptive", "lr_scaling": "adascale", "max_global_batch": 32}, World(size=2),
     "--max_global_batch"),  # below the starting 64
    ({"batch_policy": "adaptive", "lr_scaling": "adascale", "max_global_batch": 64}, World(size=2),
     "--max_global_batch"),  # one batch to choose
    ({"batch_policy": "adaptive", "lr_scaling": "adascale", "batch_decide_every": 0}, World(size=2),
     "--batch_decide_every"),
    ({"max_global_batch": 512}, World(size=2), "--batch_policy=adaptive"),
    ({"eval_only": True, "elastic": True}, World(size=2), "--elastic"),  # one fixed world evaluates
    ({"eval_only": True, "dataset": "synthetic"}, World(size=2), "held-out split"),
])
def test_bad_flags(overrides, world, must_name):
  message = error(world, **overrides)
  assert must_name in message
  assert message.endswith(".") and "\n" not in message


def test_global_batch_divides_by_ranks():
  config = flags.build_config(values(global_batch_size=64), World(size=4))
  assert (config.data.batch_size, config.data.global_batch) == (16, 64)


@pytest.mark.parametrize("overrides, world, batch, step_batch, global_batch", [
    ({"batch_size": 8}, World(size=4), 8, 8, 32),
    ({"batch_size": 8, "accumulation_steps": 4}, World(size=1), 8, 32, 32),  # the same update on 1 rank
    ({"global_batch_size": 64, "accumulation_steps": 4}, World(size=2), 8, 32, 64),
    ({"global_batch_size": 64, "accumulation_steps": 8}, World(size=8), 1, 8, 64),
])
def test_accumulation_multiplies_the_global_batch(overrides, world, batch, step_batch, global_batch):
  d = flags.build_config(values(**overrides), world).data
  assert (d.batch_size, d.step_batch, d.global_batch) == (batch, step_batch, global_batch)


@pytest.mark.parametrize("overrides, world, base, adascale_base", [
    ({}, World(size=4), 32, 0),                                                   # linear: no B0
    ({"lr_scaling": "adascale"}, World(size=4), 32, 32),                          # B0: the per-rank batch
    ({"lr_scaling": "adascale", "base_batch": 16}, World(size=4), 16, 16),
    ({"lr_scaling": "adascale"}, World(), 32, 32),                                # S = 1 on one rank: no noise needed
    ({"lr_scaling": "adascale", "batch_size": 8, "accumulation_steps": 4}, World(), 8, 8),  # micro-batches measure it
])
def test_adascale_takes_its_base_batch_from_the_per_rank_batch(overrides, world, base, adascale_base):
  optim = flags.build_config(values(**overrides), world).optim
  assert (optim.base_batch, optim.adascale_base) == (base, adascale_base)


@pytest.mark.parametrize("overrides, world, k_range, global_batch", [
    ({"batch_policy": "adaptive", "lr_scaling": "adascale"}, World(size=2), (1, 8), 64),  # 8 x the start
    ({"batch_policy": "adaptive", "lr_scaling": "adascale", "max_global_batch": 1000}, World(size=2), (1, 15), 64),
    ({"batch_policy": "adaptive", "lr_scaling": "adascale", "accumulation_steps": 2, "batch_size": 8}, World(),
     (2, 16), 16),
    ({"batch_policy": "adaptive", "lr_scaling": "adascale"}, World(), (2, 8), 32),  # one rank: K >= 2, its noise
    # scale compares micro-batches (an elastic world of one rank too; train.py starts it at 2)
])
def test_the_adaptive_policy_chooses_accumulation_steps_within_the_largest_global_batch(overrides, world, k_range,
                                                                                       global_batch):
  d = flags.build_config(values(**overrides), world).data
  assert d.adaptive and d.k_range(world.size) == k_range and d.global_batch == global_batch
  four = d.with_accumulation(4, world.size)
  assert (four.accumulation_steps, four.global_batch, four.step_batch) == (4, d.batch_size * world.size * 4,
                                                                           d.batch_size * 4)


def test_a_checkpoint_of_the_linear_rule_is_refused_under_adascale(tmp_path):
  # Its position has no AdaScale clock: resumed, the schedule would start again.
  linear = flags.build_config(values(model_dir=str(tmp_path)), World(size=2))
  (tmp_path / flags.CONFIG_FILE).write_text(json.dumps({"identity": {"model": "resnet20", "dataset": "digits",
                                                                      "optimizer": "sgd"}}))  # before lr_scaling was kept
  assert flags.check_paths(linear)[0] is None
  ada = flags.build_config(values(model_dir=str(tmp_path), lr_scaling="adascale"), World(size=2))
  message, _ = flags.check_paths(ada)
  assert "--lr_scaling=linear, not adascale" in message
  (tmp_path / flags.CONFIG_FILE).write_text(json.dumps({"identity": flags.checkpoint_identity(ada)}))
  other_base = flags.build_config(values(model_dir=str(tmp_path), lr_scaling="adascale", base_batch=8), World(size=2))
  assert "--base_batch=32, not 8" in flags.check_paths(other_base)[0]


@pytest.mark.parametrize("overrides", [
    # AdaScale's gain under PowerSGD: the mean gradient's norm from a count sketch (comm/sketch.py).
    {"lr_scaling": "adascale", "base_batch": 8, "compression": "powersgd"},
    {"lr_scaling": "adascale", "batch_policy": "adaptive", "compression": "auto"},
    # auto chooses again in each world of an elastic run (its probe is per world).
    {"compression": "auto", "elastic": True},
])
def test_combinations_that_compose(overrides, tmp_path):
  flags.build_config(values(model_dir=str(tmp_path), **overrides), World(size=2))


def test_a_default_base_batch_is_the_first_worlds_and_a_requeue_onto_other_ranks_keeps_it(tmp_path):
  # Issue 38: 2 ranks, --lr_scaling=adascale --global_batch_size=64 (B0 the per-rank 32), requeued onto 1
  # rank: the per-rank batch is 64 there, and the restart was refused ("trained with --base_batch=32, not 64").
  first = flags.build_config(values(model_dir=str(tmp_path), lr_scaling="adascale", global_batch_size=64), World(size=2))
  assert first.optim.base_batch == 32 and not first.optim.base_batch_given
  (tmp_path / flags.CONFIG_FILE).write_text(json.dumps({"identity": flags.checkpoint_identity(first)}))
  one = values(model_dir=str(tmp_path), lr_scaling="adascale", global_batch_size=64, accumulation_steps=2)
  again = flags.build_config(one, World(size=1))
  assert again.optim.base_batch == 32 and flags.check_paths(again) == (None, None)  # not refused
  assert flags.saved_base_batch(str(tmp_path)) == 32
  pinned = flags.build_config(one, World(size=1), base_batch=flags.saved_base_batch(str(tmp_path)))
  assert pinned.optim.base_batch == 32 and pinned.data.batch_size == 32 and pinned.data.global_batch == 64
  # The same command, no accumulation: one rank cannot measure the noise scale, which a fresh run needs
  # (refused); a requeued run goes on from its estimates (training/hooks.Measuring says so).
  same = values(model_dir=str(tmp_path), lr_scaling="adascale", global_batch_size=64)
  assert "--accumulation_steps" in error(World(size=1), lr_scaling="adascale", global_batch_size=64, base_batch=32)
  assert flags.build_config(same, World(size=1), base_batch=32).optim.base_batch == 32
  # Given explicitly, it is the run's identity: another one is refused, as before.
  other = flags.build_config(values(model_dir=str(tmp_path), lr_scaling="adascale", base_batch=16), World(size=2))
  assert "--base_batch=32, not 16" in flags.check_paths(other)[0]


def test_an_elastic_world_past_the_largest_global_batch_goes_on(tmp_path):
  # 4 ranks x 32 = 128 at K = 1 is past --max_global_batch=96: refused as a launch's flags, taken by a later
  # world (which starts at the largest K that fits, K = 1, and says so).
  f = values(model_dir=str(tmp_path), lr_scaling="adascale", batch_policy="adaptive", max_global_batch=96)
  assert "--max_global_batch=96" in error(World(size=4), lr_scaling="adascale", batch_policy="adaptive",
                                          max_global_batch=96)
  assert flags.build_config(f, World(size=4), later_world=True).data.k_range(4) == (1, 1)
  # A starting K past the bound is no error: the world starts at the largest K that fits.
  g = values(model_dir=str(tmp_path), lr_scaling="adascale", batch_policy="adaptive", max_global_batch=128,
             accumulation_steps=4)
  assert flags.build_config(g, World(size=2)).data.k_range(2) == (1, 2)


def test_eval_only_needs_a_checkpoint_and_not_what_training_at_adascale_needs(tmp_path):
  # One rank may evaluate an AdaScale run (training there would need accumulation for the noise scale).
  config = flags.build_config(values(model_dir=str(tmp_path / "run"), eval_only=True, lr_scaling="adascale",
                                     base_batch=8), World())
  message, _ = flags.check_paths(config)
  assert message.startswith("--eval_only found no checkpoint in --model_dir=") and "train first" in message
  assert not os.path.exists(tmp_path / "run")  # refused before anything is made
  os.makedirs(tmp_path / "run")
  (tmp_path / "run" / "ckpt-5.index").write_text("")
  assert flags.check_paths(config) == (None, None)


def test_missing_data_dir(tmp_path):
  config = flags.build_config(values(data_dir=str(tmp_path / "nope"), model_dir=str(tmp_path / "m")), World())
  assert "--data_dir" in flags.check_paths(config)[0]


def test_unwritable_model_dir(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  config = flags.build_config(values(model_dir=str(blocker / "run")), World())
  assert "--model_dir" in flags.check_paths(config)[0]


def test_only_rank0_checks_model_dir(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("x")
  config = flags.build_config(values(model_dir=str(blocker / "run")), World(size=2, rank=1))
  assert flags.check_paths(config) == (None, None)


def test_checkpoint_of_another_model_is_refused_and_left_alone(tmp_path):
  config = flags.build_config(values(model_dir=str(tmp_path)), World())
  saved = {"identity": {**flags.checkpoint_identity(config), "model": "resnet50"}}
  (tmp_path / flags.CONFIG_FILE).write_text(json.dumps(saved))
  message, _ = flags.check_paths(config)
  assert "--model=resnet50" in message and "new --model_dir" in message
  assert json.loads((tmp_path / flags.CONFIG_FILE).read_text()) == saved


def test_train_py_exits_2_with_one_sentence(tmp_path):
  proc = python("train.py", "--batch_size=0", f"--model_dir={tmp_path}", timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert "error: --batch_size=0 must be positive" in proc.stderr
  assert not os.listdir(tmp_path)  # stopped before writing anything


def our_flags():
  flags.define_flags()
  by_module = absl_flags.FLAGS.flags_by_module_dict()
  return [f for module, fs in by_module.items() if module.startswith("flags.") for f in fs]


def test_every_flag_has_help():
  defined = our_flags()
  assert len(defined) >= 20
  for flag in defined:
    assert len(flag.help) > 20, flag.name


def test_helpfull_documents_every_flag():
  proc = python("train.py", "--helpfull", timeout=300)
  assert proc.returncode in (0, 1), proc.stderr[-2000:]  # absl exits 1 after printing help
  for flag in our_flags():
    # absl writes boolean flags as --[no]name.
    assert f"--{flag.name}:" in proc.stdout or f"--[no]{flag.name}:" in proc.stdout, flag.name


def test_flag_table_is_current():
  spec = importlib.util.spec_from_file_location("flag_table", os.path.join(REPO, "scripts", "flag_table.py"))
  flag_table = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(flag_table)
  generated = flag_table.table()
  missing = [f.name for f in our_flags() if f"| `--{f.name}` |" not in generated]
  assert not missing, f"the generated flag table lacks {missing}"
  written = ""
  if os.path.exists(flag_table.OUTPUT):
    with open(flag_table.OUTPUT) as fh:
      written = fh.read()
  assert written == generated, "docs/flags.md differs from the flag definitions in flags/: run make docs"
