"""LARS against an independent numpy implementation of You et al.'s formulas."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from optimizers.lars import LARS

# name -> shape; the names decide exclusion ('bias', 'gamma', 'beta' skip LARS and decay).
SHAPES = {"conv/kernel": (3, 3, 4, 8), "fc/kernel": (16, 10), "fc/bias": (10,),
          "bn/gamma": (8,), "bn/beta": (8,), "scalar/kernel": (), "zero/kernel": (5, 3)}
LRS = [0.0, 0.5, 1.2, 3.0, 2.0, 0.7]  # a warmup-like ramp then decay, one per step
WD, ETA, EPS, MOMENTUM = 5e-4, 0.02, 1e-9, 0.9


def reference(ws, grads_per_step, nesterov, excluded):
  """numpy float64: You et al. 2017 algorithm 1 with momentum on LR-scaled steps."""
  ws = {k: w.astype(np.float64) for k, w in ws.items()}
  vs = {k: np.zeros_like(w) for k, w in ws.items()}
  for lr, grads in zip(LRS, grads_per_step):
    for k, w in ws.items():
      g = grads[k].astype(np.float64)
      local = lr
      if not excluded(k):
        wn, gn = np.sqrt((w * w).sum()), np.sqrt((g * g).sum())
        if wn > 0 and gn > 0:
          local = lr * ETA * wn / (gn + WD * wn + EPS)
        g = g + WD * w
      vs[k] = MOMENTUM * vs[k] + local * g
      ws[k] = w - (MOMENTUM * vs[k] + local * g if nesterov else vs[k])
  return ws


def inputs(seed=0):
  rng = np.random.default_rng(seed)
  ws = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
  ws["zero/kernel"][...] = 0.0  # zero weight norm: plain LR, never NaN
  grads = []
  for step in range(len(LRS)):
    g = {k: (rng.standard_normal(s) * 10.0 ** rng.uniform(-3, 1)).astype(np.float32) for k, s in SHAPES.items()}
    if step == 2:
      g["conv/kernel"][...] = 0.0  # zero gradient norm: plain LR on the decay term only
    grads.append(g)
  return ws, grads


def run_lars(ws, grads_per_step, lrs=LRS, **kwargs):
  variables = {}
  for k, w in ws.items():  # path 'conv/kernel', as inside a layer named 'conv'
    with keras.name_scope(k.split("/")[0]):
      variables[k] = keras.Variable(w, name=k.split("/")[1])
  opt = LARS(learning_rate=0.0, momentum=MOMENTUM, weight_decay=WD, eta=ETA, epsilon=EPS, **kwargs)
  opt.build(list(variables.values()))
  step = tf.function(lambda gs: opt.apply_gradients(zip(gs, variables.values())))
  for lr, grads in zip(lrs, grads_per_step):
    opt.learning_rate.assign(lr)
    step([tf.constant(grads[k]) for k in variables])
  return {k: v.numpy() for k, v in variables.items()}, opt


@pytest.mark.parametrize("nesterov", [False, True], ids=["classic", "nesterov"])
def test_matches_numpy_over_several_steps(nesterov):
  ws, grads = inputs()
  got, _ = run_lars(ws, grads, nesterov=nesterov)
  want = reference(ws, grads, nesterov, lambda k: any(s in k for s in ("bias", "gamma", "beta")))
  for k in SHAPES:
    assert np.isfinite(got[k]).all(), k
    rel = np.linalg.norm(got[k] - want[k]) / np.linalg.norm(want[k])
    assert rel < 1e-6, (k, rel)
    assert not np.allclose(got[k], ws[k]), f"{k} never moved"


def test_exclude_takes_regexes_and_empty_means_every_variable_adapts():
  ws, grads = inputs(1)
  got, _ = run_lars(ws, grads, exclude=[r"^bn/"])
  want = reference(ws, grads, False, lambda k: k.startswith("bn/"))
  for k in SHAPES:
    assert np.linalg.norm(got[k] - want[k]) / np.linalg.norm(want[k]) < 1e-6, k
  got, _ = run_lars(ws, grads, exclude=[])
  want = reference(ws, grads, False, lambda k: False)
  for k in SHAPES:
    assert np.linalg.norm(got[k] - want[k]) / np.linalg.norm(want[k]) < 1e-6, k


def test_trust_ratio_makes_the_step_independent_of_the_gradient_scale():
  # One step from zero velocity: a non-excluded layer moves by lr * eta * ||w|| / (||g|| + ...)
  # * ||g + wd w||, so multiplying g by 1000 (as an unscaled fp16 loss scale would) barely matters
  # when wd * ||w|| << ||g||; plain SGD would move 1000x further.
  ws, grads = inputs(2)
  small, _ = run_lars(ws, grads[:1], lrs=[1.0])
  big, _ = run_lars(ws, [{k: 1000 * g for k, g in grads[0].items()}], lrs=[1.0])
  moved_small = np.linalg.norm(small["fc/kernel"] - ws["fc/kernel"])
  moved_big = np.linalg.norm(big["fc/kernel"] - ws["fc/kernel"])
  assert moved_big == pytest.approx(moved_small, rel=0.05)
  assert moved_small == pytest.approx(ETA * np.linalg.norm(ws["fc/kernel"]), rel=0.05)


def test_config_round_trip_and_checkpoint(tmp_path):
  ws, grads = inputs(3)
  _, opt = run_lars(ws, grads[:2], nesterov=True, exclude=["bias", r"bn\d*/"])
  config = opt.get_config()
  clone = LARS.from_config(config)
  assert clone.get_config() == config
  assert (clone.eta, clone.lars_weight_decay, clone.nesterov, clone.exclude) == (ETA, WD, True, ("bias", r"bn\d*/"))
  assert isinstance(keras.optimizers.deserialize(keras.optimizers.serialize(opt)), LARS)

  # The velocities travel through tf.train.Checkpoint, as train.py saves them.
  path = tf.train.Checkpoint(optimizer=opt).save(str(tmp_path / "ckpt"))
  fresh = LARS.from_config(config)
  fresh.build([keras.Variable(w) for w in ws.values()])
  tf.train.Checkpoint(optimizer=fresh).restore(path).assert_existing_objects_matched()
  for a, b in zip(opt.variables, fresh.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert any(np.abs(v.numpy()).sum() > 0 for v in fresh.velocities)


def test_bad_arguments():
  with pytest.raises(ValueError):
    LARS(momentum=1.0)
  with pytest.raises(ValueError):
    LARS(eta=0.0)


@pytest.mark.parametrize("no_decay_on_bias_bn", [True, False])
def test_flags_build_lars_that_skips_bias_and_bn(no_decay_on_bias_bn):
  from flags.config import OptimConfig
  from models import build_model
  from optimizers import build_optimizer
  config = OptimConfig(optimizer="lars", base_lr=1.0, momentum=0.9, weight_decay=1e-4, warmup_epochs=0,
                       warmup_start_lr=0, lr_schedule="poly", decay_epochs=(), lars_eta=0.002,
                       label_smoothing=0.0, no_decay_on_bias_bn=no_decay_on_bias_bn, precision="fp32")
  model = build_model("resnet20", 10, (8, 8, 1))
  opt = build_optimizer(config, model.trainable_variables)
  assert isinstance(opt, LARS) and (opt.eta, opt.lars_weight_decay) == (0.002, 1e-4)
  adapted = {v.path for v in model.trainable_variables if not opt.excluded(v)}
  if no_decay_on_bias_bn:
    assert adapted == {v.path for v in model.trainable_variables if v.path.endswith("kernel")}
    assert "fc/bias" not in adapted and "stem_bn/gamma" not in adapted
  else:
    assert adapted == {v.path for v in model.trainable_variables}


@pytest.mark.parametrize("overrides, must_name", [
    ({"lars_eta": 0.0}, "--lars_eta"), ({"label_smoothing": 1.0}, "--label_smoothing"),
    ({"label_smoothing": -0.1}, "--label_smoothing"),
])
def test_bad_recipe_flags(overrides, must_name):
  import types

  from absl import flags as absl_flags

  from flags import train_flags as flags
  from comm.topology import World
  flags.define_flags()
  parsed = types.SimpleNamespace(**{**{n: absl_flags.FLAGS[n].default for n in absl_flags.FLAGS}, **overrides})
  with pytest.raises(flags.ConfigError, match=must_name):
    flags.build_config(parsed, World())
