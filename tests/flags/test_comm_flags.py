"""flags/comm.py: the flags of the gradient exchange, each bad value one ConfigError naming it."""
import pytest

from flags.config import ConfigError


def comm_flags(**overrides):
  """build() of flags/comm.py on every flag's default, with overrides."""
  import types

  from absl import flags as absl_flags

  from flags import train_flags as flags
  from flags import comm
  flags.define_flags()
  values = {name: absl_flags.FLAGS[name].default for name in
            ("allreduce", "fusion_threshold_mb", "compression", "ranks_per_node", "hybrid_cost")}
  return comm.build(types.SimpleNamespace(**{**values, **overrides}))


def test_comm_flags():
  assert comm_flags().allreduce == "horovod"
  assert comm_flags(hybrid_cost="300,5,300,1").hybrid_cost == "300,5,300,1"
  for overrides, needle in [({"fusion_threshold_mb": -1}, "--fusion_threshold_mb=-1"),
                            ({"hybrid_cost": "fast"}, "--hybrid_cost='fast'")]:
    with pytest.raises(ConfigError) as e:
      comm_flags(**overrides)
    assert needle in str(e.value)
