"""PowerSGD (comm/powersgd.py): the plan and its bytes on literal tables; the algorithm on
simulated replicas in one process, each with its own PowerSGD of the same seed, driven phase by
phase with an allreduce-mean across them."""
import numpy as np
import pytest
import tensorflow as tf

from comm import powersgd
from comm.powersgd import PowerSGD

SEED = 7


@pytest.mark.parametrize("shape, rank, min_ratio, want", [
    ((3, 3, 64, 128), 4, 2, (576, 128)),    # conv kernel HWIO: (H*W*I, O)
    ((1, 1, 256, 64), 2, 2, (256, 64)),     # 1x1 conv
    ((2048, 1000), 4, 2, (2048, 1000)),     # dense kernel (in, out) as is
    ((1000,), 1, 1, None),                  # bias
    ((64,), 1, 1, None),                    # BatchNorm gamma
    ((), 1, 1, None),                       # scalar
    ((3, 3, 3, 8), 4, 2, None),             # 216 elements against 2 * 4 * (27 + 8) = 280
    ((3, 3, 3, 8), 1, 2, (27, 8)),          # 216 against 2 * 1 * 35 = 70
    ((10, 10), 5, 1, None),                 # 100 against 5 * 20 = 100: saves nothing
    ((10, 10), 4, 1, (10, 10)),             # 100 against 80
    ((10, 10), 4, 2, None),                 # 100 against 160
    ((3, 3, 32, 1), 1, 1, None),            # depthwise kernel: one column, 288 against 289
    (tf.TensorShape([5, 6, 7]), 1, 2, (30, 7)),
])
def test_plan(shape, rank, min_ratio, want):
  assert powersgd.plan([shape], rank, min_ratio) == [want]


@pytest.mark.parametrize("rank, min_ratio", [(0, 2), (1, 0.5)])
def test_plan_rejects_bad_settings(rank, min_ratio):
  with pytest.raises(ValueError, match="PowerSGD"):
    powersgd.plan([(8, 8)], rank, min_ratio)


def test_wire_bytes_of_resnet50_like_layers():
  shapes = [(7, 7, 3, 64), (64,), (64,), (1, 1, 64, 256), (3, 3, 512, 512), (2048, 1000), (1000,)]
  views = powersgd.plan(shapes, 4)
  assert views == [(147, 64), None, None, (64, 256), (4608, 512), (2048, 1000), None]
  fp32 = powersgd.wire_bytes(shapes, views, 4, 4)
  # first: the P's (n * 4) and the three vectors whole; second: the Q's (m * 4)
  assert fp32.first == 4 * (147 * 4 + 64 + 64 + 64 * 4 + 4608 * 4 + 2048 * 4 + 1000) == 114384
  assert fp32.second == 4 * (64 * 4 + 256 * 4 + 512 * 4 + 1000 * 4) == 29312
  assert fp32.uncompressed == 4 * (9408 + 64 + 64 + 16384 + 2359296 + 2048000 + 1000) == 17736864
  assert fp32.compressed == 114384 + 29312
  assert powersgd.wire_bytes(shapes, views, 4, 2) == powersgd.WireBytes(114384 // 2, 29312 // 2, 17736864 // 2)


def _mean(payloads):
  """The simulated allreduce-mean: per position, the replicas' tensors averaged in fp32, back in their dtype."""
  return [tf.cast(tf.add_n([tf.cast(t, tf.float32) for t in ts]) / len(ts), ts[0].dtype) for ts in zip(*payloads)]


def _step(replicas, grads):
  """One step of every replica, phase by phase: per replica (its gradients out, its Update)."""
  ones = [r.compute_p(g) for r, g in zip(replicas, grads)]
  first = _mean([payload for _, payload in ones])
  twos = [r.compute_q(ms, first) for r, (ms, _) in zip(replicas, ones)]
  second = _mean([payload for _, payload in twos])
  return [r.decompress(g, ms, first, ps, second) for r, g, (ms, _), (ps, _) in zip(replicas, grads, ones, twos)]


def _replicas(count, shapes, **kwargs):
  return [PowerSGD(shapes, seed=SEED, **kwargs) for _ in range(count)]


def _grads(rng, count, shapes):
  return [[tf.constant(rng.standard_normal(s), tf.float32) for s in shapes] for _ in range(count)]


def _values(variables):
  return [v.numpy().copy() for v in variables]


SHAPES = [(3, 3, 4, 16), (16,), (20, 12)]  # views (36, 16), dense, (20, 12) at rank 2


def test_mean_of_the_ranks_ps_is_the_mean_m_times_the_shared_q():
  rng = np.random.default_rng(0)
  replicas, grads = _replicas(3, SHAPES, rank=2), _grads(rng, 3, SHAPES)
  for r in replicas:  # residuals as a few steps would leave them, different on each rank
    for v in r.residuals:
      v.assign(rng.standard_normal(v.shape))
  assert replicas[0].views == ((36, 16), None, (20, 12))
  first = _mean([r.compute_p(g)[1] for r, g in zip(replicas, grads)])
  for i, j in ((0, 0), (2, 1)):
    mean_m = np.mean([np.reshape(g[i].numpy(), r.views[i]) + r.residuals[j].numpy() for r, g in zip(replicas, grads)],
                     0)
    want = mean_m @ powersgd.orthonormal(replicas[0].qs[j]).numpy()
    np.testing.assert_allclose(first[i].numpy(), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(first[1].numpy(), np.mean([g[1] for g in grads], 0), rtol=1e-6)


def test_update_plus_new_residual_is_gradient_plus_old_residual_on_each_rank():
  rng = np.random.default_rng(1)
  replicas = _replicas(3, SHAPES, rank=2)
  for _ in range(3):
    grads = _grads(rng, 3, SHAPES)
    old = [_values(r.residuals) for r in replicas]
    for r, g, o, (out, update) in zip(replicas, grads, old, _step(replicas, grads)):
      for i, j in ((0, 0), (2, 1)):
        np.testing.assert_allclose(np.reshape(out[i].numpy(), r.views[i]) + update.residuals[j].numpy(),
                                   np.reshape(g[i].numpy(), r.views[i]) + o[j], atol=1e-5)
      r.apply(update)
  assert np.abs(replicas[0].residuals[0].numpy()).max() > 0.1  # rank 2 of 16 columns leaves a lot out


def test_replicas_hold_the_same_qs_and_return_the_same_gradients():
  rng = np.random.default_rng(2)
  replicas = _replicas(4, SHAPES, rank=2)
  for _ in range(4):
    results = _step(replicas, _grads(rng, 4, SHAPES))
    for r, (_, update) in zip(replicas, results):
      r.apply(update)
    for out, _ in results[1:]:
      for a, b in zip(out, results[0][0]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
  for r in replicas[1:]:
    for a, b in zip(r.qs, replicas[0].qs):
      np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert not np.array_equal(replicas[0].qs[0].numpy(), PowerSGD(SHAPES, rank=2, seed=SEED).qs[0].numpy())


@pytest.mark.parametrize("true_rank", [1, 2])
def test_an_exactly_low_rank_mean_gradient_is_recovered(true_rank):
  # Each rank's gradient is the low-rank mean plus full-rank noise that cancels over ranks.
  rng = np.random.default_rng(3)
  shapes = [(30, 20), (20,)]
  mean = rng.standard_normal((30, true_rank)) @ rng.standard_normal((true_rank, 20))
  noise = rng.standard_normal((4, 30, 20))
  noise -= noise.mean(0)
  replicas = _replicas(4, shapes, rank=2)
  for _ in range(2):
    grads = [[tf.constant(mean + n, tf.float32), tf.constant(rng.standard_normal(20), tf.float32)] for n in noise]
    for r, (out, update) in zip(replicas, _step(replicas, grads)):
      np.testing.assert_allclose(out[0].numpy(), mean, atol=1e-4)
      r.apply(update)


def test_warm_start_converges_to_the_best_rank_r_approximation():
  # One subspace iteration per step: with the same gradient every step and no error feedback,
  # the update approaches the truncated SVD at the rate (sigma_3 / sigma_2)^2 = 1/16 a step.
  rng = np.random.default_rng(4)
  u, _ = np.linalg.qr(rng.standard_normal((24, 5)))
  v, _ = np.linalg.qr(rng.standard_normal((16, 5)))
  sigma = np.array([8, 4, 1, 0.5, 0.25])
  grad = tf.constant((u * sigma) @ v.T, tf.float32)
  best = (u[:, :2] * sigma[:2]) @ v[:, :2].T
  psgd = PowerSGD([(24, 16)], rank=2, error_feedback=False, seed=SEED)
  errors = []
  for _ in range(8):
    (out,), update = _step([psgd], [[grad]])[0]
    psgd.apply(update)
    errors.append(np.abs(out.numpy() - best).max())
  assert errors[0] > 1e-2 and errors[-1] < 1e-4


@pytest.mark.parametrize("error_feedback", [True, False])
def test_the_update_is_the_mean_m_projected_on_the_shared_p(error_feedback):
  rng = np.random.default_rng(5)
  replicas = _replicas(3, SHAPES, rank=2, error_feedback=error_feedback)
  assert len(replicas[0].residuals) == (2 if error_feedback else 0)
  for _ in range(2):
    grads = _grads(rng, 3, SHAPES)
    old = [_values(r.residuals) for r in replicas]
    ones = [r.compute_p(g) for r, g in zip(replicas, grads)]
    twos = [r.compute_q(ms, _mean([p for _, p in ones])) for r, (ms, _) in zip(replicas, ones)]
    for r, (out, update) in zip(replicas, _step(replicas, grads)):
      for i, j in ((0, 0), (2, 1)):
        mean_m = np.mean([np.reshape(g[i].numpy(), r.views[i]) + (o[j] if error_feedback else 0)
                          for g, o in zip(grads, old)], 0)
        p = twos[0][0][i].numpy()
        np.testing.assert_allclose(np.reshape(out[i].numpy(), r.views[i]), p @ p.T @ mean_m, atol=1e-5)
      assert len(update.residuals) == len(r.residuals)
      r.apply(update)


def test_dense_gradients_are_the_plain_mean_in_their_dtype():
  rng = np.random.default_rng(6)
  shapes = [(16,), (4, 4), (3, 3, 8, 16)]
  dtypes = [tf.float16, tf.float32, tf.bfloat16]
  replicas = _replicas(2, shapes, rank=1)
  assert replicas[0].views == (None, None, (72, 16))
  grads = [[tf.constant(rng.standard_normal(s), d) for s, d in zip(shapes, dtypes)] for _ in range(2)]
  out, _ = _step(replicas, grads)[0]
  assert [(o.shape, o.dtype) for o in out] == [(tf.TensorShape(s), d) for s, d in zip(shapes, dtypes)]
  for i in (0, 1):
    np.testing.assert_allclose(out[i].numpy(), (tf.cast(grads[0][i], tf.float32) + tf.cast(grads[1][i], tf.float32))
                               .numpy() / 2, rtol=1e-3)


def test_zero_gradients_give_zeros_and_no_nan():
  replicas = _replicas(2, SHAPES, rank=2)
  zeros = [[tf.zeros(s) for s in SHAPES] for _ in range(2)]
  for _ in range(2):
    for r, (out, update) in zip(replicas, _step(replicas, zeros)):
      assert all(np.all(o.numpy() == 0) for o in out)
      assert all(np.all(np.isfinite(t.numpy())) for t in update.qs + update.residuals)
      r.apply(update)


def test_one_step_makes_two_allreduce_calls_ps_with_dense_then_qs():
  calls = []

  def record(tensors):  # one rank: the mean is the tensor itself
    calls.append([(tuple(t.shape), t.dtype) for t in tensors])
    return list(tensors)
  psgd = PowerSGD(SHAPES, rank=2, wire=tf.float16)
  out, _ = psgd([tf.ones(s) for s in SHAPES], record)
  assert calls == [[((36, 2), tf.float16), ((16,), tf.float32), ((20, 2), tf.float16)],
                   [((16, 2), tf.float16), ((12, 2), tf.float16)]]
  assert [o.shape for o in out] == [tf.TensorShape(s) for s in SHAPES]


def test_a_skipped_step_leaves_the_state_inside_a_tf_function():
  psgd = PowerSGD(SHAPES, rank=2)
  grads = [tf.constant(np.random.default_rng(7).standard_normal(s), tf.float32) for s in SHAPES]

  @tf.function
  def train_step(commit):
    out, update = psgd(grads, list)  # one rank
    tf.cond(commit, lambda: psgd.apply(update), lambda: None)
    return out
  before = _values(psgd.variables)
  train_step(tf.constant(False))
  for a, b in zip(before, _values(psgd.variables)):
    np.testing.assert_array_equal(a, b)
  train_step(tf.constant(True))
  assert all(not np.array_equal(a, b) for a, b in zip(before, _values(psgd.variables)))


@pytest.mark.parametrize("scale", [1, 300])
def test_fp16_on_the_wire_is_close_to_fp32_and_keeps_state_fp32(scale):
  # scale 300: with the last step's Q left unnormalised, P = M Q would be of the order of
  # 300^2 * sqrt(16) from the second step on, past fp16's 65504; orth(Q) keeps P at M's scale.
  rng = np.random.default_rng(8)
  fp32, fp16 = _replicas(2, SHAPES, rank=2), _replicas(2, SHAPES, rank=2, wire=tf.float16)
  assert [p.dtype for p in fp16[0].compute_p([tf.zeros(s) for s in SHAPES])[1]] == [tf.float16, tf.float32, tf.float16]
  for _ in range(3):
    grads = [[g * scale for g in gs] for gs in _grads(rng, 2, SHAPES)]
    for (want, a), (got, b), r32, r16 in zip(_step(fp32, grads), _step(fp16, grads), fp32, fp16):
      for w, g in zip(want, got):
        assert g.dtype == tf.float32
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=2e-2 * np.abs(w.numpy()).max())
      r32.apply(a)
      r16.apply(b)
  assert all(v.dtype == tf.float32 for v in fp16[0].variables)


def test_averaging_the_residuals_changes_no_later_update():
  rng = np.random.default_rng(9)
  kept, averaged = _replicas(3, SHAPES, rank=2), _replicas(3, SHAPES, rank=2)
  for step in range(3):
    grads = _grads(rng, 3, SHAPES)
    if step == 2:
      means = _mean([[v.read_value() for v in r.residuals] for r in averaged])
      for r in averaged:
        r.average_residuals(lambda tensors: means)
      for r in averaged[1:]:
        for a, b in zip(r.residuals, averaged[0].residuals):
          np.testing.assert_array_equal(a.numpy(), b.numpy())
    results = [_step(replicas, grads) for replicas in (kept, averaged)]
    for a, b in zip(results[0][0][0], results[1][0][0]):
      np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
    for replicas, result in zip((kept, averaged), results):
      for r, (_, update) in zip(replicas, result):
        r.apply(update)


def test_checkpoint_round_trip(tmp_path):
  rng = np.random.default_rng(10)
  saved = PowerSGD(SHAPES, rank=2)
  for _ in range(2):
    (_, update), = _step([saved], _grads(rng, 1, SHAPES))
    saved.apply(update)
  path = tf.train.Checkpoint(powersgd=saved).write(str(tmp_path / "powersgd"))
  restored = PowerSGD(SHAPES, rank=2, seed=SEED + 1)
  tf.train.Checkpoint(powersgd=restored).read(path).assert_consumed()
  assert len(restored.variables) == 4
  for a, b in zip(saved.variables, restored.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_mask_sends_the_matrices_it_leaves_out_whole_and_keeps_their_q():
  # --compression=auto's choice: of the two planned matrices only the second is compressed.
  rng = np.random.default_rng(11)
  replicas = _replicas(3, SHAPES, rank=2, mask=(False, True, True))
  assert replicas[0].planned == ((36, 16), None, (20, 12)) and replicas[0].views == (None, None, (20, 12))
  assert len(replicas[0].qs) == len(replicas[0].residuals) == 2  # the plan's state, whatever the mask
  start = [_values(r.variables) for r in replicas]
  grads = _grads(rng, 3, SHAPES)
  for r, (out, update) in zip(replicas, _step(replicas, grads)):
    np.testing.assert_allclose(out[0].numpy(), np.mean([g[0] for g in grads], 0), rtol=1e-6, atol=1e-6)  # whole
    assert len(update.qs) == len(update.residuals) == 2  # every planned matrix's state
    r.apply(update)
  for r, before in zip(replicas, start):
    (q0, q2), (e0, e2) = r.qs, r.residuals
    np.testing.assert_array_equal(q0.numpy(), before[0])  # the matrix sent whole: its Q as it was, no residual
    assert not e0.numpy().any()
    assert not np.array_equal(q2.numpy(), before[1]) and np.abs(e2.numpy()).max() > 0
  with pytest.raises(ValueError, match="mask has 2 entries for 3 gradients"):
    PowerSGD(SHAPES, rank=2, mask=(True, True))


def test_a_matrix_no_longer_compressed_sends_its_residual_with_it_and_keeps_none():
  # --elastic with auto chooses again in each world, and the batch controller may choose the plain
  # exchange: what error feedback held back goes out with the next whole gradient, nothing lost.
  rng = np.random.default_rng(13)
  replicas = _replicas(2, SHAPES, rank=2)
  grads = _grads(rng, 2, SHAPES)
  for r, (_, update) in zip(replicas, _step(replicas, grads)):
    r.apply(update)
  residuals = [r.residuals[0].numpy().copy() for r in replicas]
  assert all(np.abs(e).max() > 0 for e in residuals)
  grads = _grads(rng, 2, SHAPES)
  for r in replicas:
    r.set_mask((False, False, True))
  for r, (out, update) in zip(replicas, _step(replicas, grads)):
    whole = np.mean([np.reshape(g[0], (36, 16)) + e for g, e in zip(grads, residuals)], 0)
    np.testing.assert_allclose(np.reshape(out[0].numpy(), (36, 16)), whole, rtol=1e-5, atol=1e-5)
    r.apply(update)
    assert not r.residuals[0].numpy().any()
  # The plain exchange's branch (training/step.py): every residual goes with its gradient, at the loss scale.
  r = replicas[0]
  kept = r.residuals[1].numpy().copy()
  g = [tf.constant(x) for x in _grads(rng, 1, SHAPES)[0]]
  sent, update = r.flushed(g, scale=tf.constant(4.0))
  np.testing.assert_allclose(np.reshape(sent[2].numpy(), (20, 12)), np.reshape(g[2].numpy(), (20, 12)) + 4 * kept,
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(sent[1].numpy(), g[1].numpy())  # a vector: as it was
  r.apply(update)
  assert not any(e.numpy().any() for e in r.residuals)


def test_a_checkpoint_restores_under_another_mask(tmp_path):
  # auto's choice can differ at a resume (its timings do): the state is the plan's, so it fits.
  rng = np.random.default_rng(12)
  saved = PowerSGD(SHAPES, rank=2, mask=(True, False, False))
  (_, update), = _step([saved], _grads(rng, 1, SHAPES))
  saved.apply(update)
  path = tf.train.Checkpoint(powersgd=saved).write(str(tmp_path / "powersgd"))
  restored = PowerSGD(SHAPES, rank=2, seed=SEED + 1, mask=(False, False, True))
  tf.train.Checkpoint(powersgd=restored).read(path).assert_consumed()
  for a, b in zip(saved.variables, restored.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
