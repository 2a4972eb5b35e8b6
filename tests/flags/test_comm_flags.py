"""flags/comm.py: the flags of the gradient exchange, each bad value one ConfigError naming it."""
import pytest

from flags.config import CommConfig, ConfigError


def comm_flags(**overrides):
  """build() of flags/comm.py on every flag's default, with overrides."""
  import types

  from absl import flags as absl_flags

  from flags import train_flags as flags
  from flags import comm
  flags.define_flags()
  values = {name: absl_flags.FLAGS[name].default for name in
            ("allreduce", "fusion_threshold_mb", "compression", "ranks_per_node", "hybrid_cost", "powersgd_rank",
             "powersgd_wire", "compression_start", "powersgd_error_feedback")}
  return comm.build(types.SimpleNamespace(**{**values, **overrides}))


def test_comm_flags():
  assert comm_flags().allreduce == "horovod"
  assert comm_flags(hybrid_cost="300,5,300,1").hybrid_cost == "300,5,300,1"
  for overrides, needle in [({"fusion_threshold_mb": -1}, "--fusion_threshold_mb=-1"),
                            ({"hybrid_cost": "fast"}, "--hybrid_cost='fast'")]:
    with pytest.raises(ConfigError) as e:
      comm_flags(**overrides)
    assert needle in str(e.value)


def test_the_defaults_are_the_configs():
  # CommConfig's defaults (what the benchmarks and checks build by hand) are the flags' own.
  assert comm_flags() == CommConfig()


@pytest.mark.parametrize("overrides, rank, wire, start", [
    ({"compression": "powersgd"}, 4, "none", 1000),  # PyTorch's start_powerSGD_iter
    ({"compression": "powersgd", "powersgd_rank": 1, "compression_start": 0}, 1, "none", 0),
    ({"compression": "powersgd", "powersgd_wire": "fp16", "allreduce": "hier"}, 4, "fp16", 1000),
    # auto reads PowerSGD's flags too; what it sends whole travels as under none (comm.exchange.make_compression)
    ({"compression": "auto", "powersgd_wire": "fp16", "powersgd_rank": 2}, 2, "none", 1000),
])
def test_powersgd_flags(overrides, rank, wire, start):
  config = comm_flags(**overrides)
  assert (config.compression, config.powersgd_rank, config.wire, config.compression_start) == (
      overrides["compression"], rank, wire, start)
  assert config.powersgd_error_feedback


def test_powersgd_without_error_feedback_keeps_no_residuals():
  from comm.exchange import make_powersgd
  import tensorflow as tf
  config = comm_flags(compression="powersgd", powersgd_error_feedback=False)
  compressor = make_powersgd(config, [tf.Variable(tf.zeros((64, 32))), tf.Variable(tf.zeros(32))], seed=0)
  assert not config.powersgd_error_feedback and compressor.residuals == [] and len(compressor.qs) == 1


@pytest.mark.parametrize("compression, wire, want", [
    ("none", "fp32", "none"), ("fp16", "fp32", "fp16"), ("powersgd", "fp32", "none"), ("powersgd", "fp16", "fp16"),
    ("auto", "fp16", "none"),
])
def test_what_float32_travels_as(compression, wire, want):
  assert CommConfig(compression=compression, powersgd_wire=wire).wire == want


@pytest.mark.parametrize("overrides, needle", [
    ({"compression": "powersgd", "powersgd_rank": 0}, "--powersgd_rank=0"),
    ({"compression": "powersgd", "compression_start": -1}, "--compression_start=-1"),
    ({"powersgd_wire": "fp16"}, "--powersgd_wire=fp16"),  # would change nothing without powersgd
    ({"compression": "fp16", "powersgd_wire": "fp16"}, "--compression=powersgd"),
    ({"powersgd_error_feedback": False}, "--powersgd_error_feedback=false"),
])
def test_bad_powersgd_flags(overrides, needle):
  with pytest.raises(ConfigError) as e:
    comm_flags(**overrides)
  assert needle in str(e.value) and str(e.value).endswith(".") and "\n" not in str(e.value)
