"""Every flag of train.py, defined here and turned once into a frozen Config
(flags/config.py), then checked against the filesystem.

The rest of the code receives the Config (or plain values from it) and never
reads absl's FLAGS, so every module works as a library and in tests.
"""
import glob
import json
import os

from absl import flags as absl_flags

from comm.topology import World
from flags import comm, data, evaluation, faults, model, optim, run
from flags.config import Config, ConfigError  # noqa: F401  (ConfigError: what callers catch)
from input import sources

_SECTIONS = (run, data, model, optim, comm, faults, evaluation)


def define_flags() -> None:
  """Define every flag once (idempotent per process)."""
  if "model_dir" in absl_flags.FLAGS:
    return
  for section in _SECTIONS:
    section.define()


def build_config(f, world: World, base_batch: int = 0, later_world: bool = False) -> Config:
  """Validate parsed flags into a Config; raises ConfigError naming the flag and the fix.

  Pure: looks at the flags and the world only, so every rank reaches the same
  verdict without talking to the others. base_batch: AdaScale's B0 as the run pinned it at its
  first world (its position's; 0: not pinned yet), which a default --base_batch (the per-rank batch,
  which --global_batch_size makes depend on the ranks) follows, so a requeue onto another node
  count or a new elastic world reads the same clock; later_world: an elastic world after the
  first, which goes on where a first world's flags would be refused (data.build).
  """
  data_config = data.build(f, world, later_world)
  run_config, comm_config = run.build(f), comm.build(f)
  optim_config = optim.build(f, data_config.batch_size, pinned=base_batch)
  faults_config = faults.build(f)
  if not run_config.eval_only:  # what the noise scale needs to train; an evaluation on 1 rank needs none of it
    _check_adascale(optim_config, run_config, data_config, world, resumed=bool(base_batch) or later_world)
  if run_config.eval_only:
    if faults_config.elastic:
      raise ConfigError("--eval_only evaluates a checkpoint in one fixed world; drop --elastic (and launch "
                        "with plain horovodrun or mpirun).")
    if data_config.dataset.num_eval == 0 and not data_config.dataset.on_disk:
      raise ConfigError(f"--eval_only needs a held-out split, and --dataset={data_config.dataset.name} has none; "
                        "evaluate a run of a data set with one.")
  return Config(run=run_config, data=data_config, model=model.build(f),
                optim=optim_config, comm=comm_config, faults=faults_config,
                evaluation=evaluation.build(f, data_config.dataset), world=world)


def _check_adascale(optim_config, run_config, data_config, world: World, resumed: bool = False) -> None:
  """AdaScale's gain comes from the noise scale: without it the LR would stay the base batch's.
  resumed: a run that has trained (a requeue, a later elastic world), whose estimates it goes on from
  where one rank without accumulation cannot measure them (the run says so)."""
  if data_config.adaptive and not optim_config.adascale_base:
    raise ConfigError("--batch_policy=adaptive changes the global batch during the run, which only AdaScale's "
                      "LR follows (the linear rule would jump the LR at each change); add --lr_scaling=adascale.")
  if not optim_config.adascale_base or (data_config.global_batch == optim_config.base_batch
                                        and not data_config.adaptive):
    return
  if not run_config.noise_scale:
    raise ConfigError("--lr_scaling=adascale takes its gain from the gradient noise scale; drop "
                      "--noise_scale=false.")
  if world.size == 1 and data_config.accumulation_steps == 1 and not data_config.adaptive and not resumed:
    raise ConfigError(f"--lr_scaling=adascale at global batch {data_config.global_batch} (base batch "
                      f"{optim_config.base_batch}) needs the noise scale, which one rank measures only with "
                      "--accumulation_steps >= 2; add it, or launch 2+ ranks.")


def check_paths(config: Config) -> tuple[str | None, sources.Scanned | None]:
  """(problem, scanned): the filesystem checks of this rank, data present and
  model_dir writable, as one sentence or None; and what --data_dir holds for a
  scanned source (flags.data.check), to hand to input.pipeline.build so the
  files are read once.

  Every rank reads its own data, so each checks its data_dir; only rank 0
  writes to model_dir, so only rank 0 checks it.
  """
  d = config.data
  if d.data_dir and not d.create_data_dir and not os.path.isdir(d.data_dir):
    return (f"--data_dir={d.data_dir} does not exist on this host; point it at the "
            f"{d.dataset.name} files, or omit it to use the default place."), None
  problem, scanned = data.check(d, config.world)
  if problem:
    return problem, None
  if config.world.is_chief:
    if config.run.eval_only and not glob.glob(os.path.join(config.run.model_dir, "ckpt-*.index")):
      return (f"--eval_only found no checkpoint in --model_dir={config.run.model_dir}; point it at a run's "
              "directory, or train first."), None
    problem = _unwritable(config.run.model_dir)
    if problem:
      return (f"--model_dir={config.run.model_dir} is not writable ({problem}); "
              "choose a directory you can write, e.g. --model_dir=runs/exp1."), None
    problem = _incompatible_checkpoint(config)
    if problem:
      return problem, None
  return None, scanned


def _unwritable(path: str) -> str | None:
  try:
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, f".write-probe-{os.getpid()}")
    with open(probe, "w") as fh:
      fh.write("ok")
    os.remove(probe)
  except OSError as e:
    return e.strerror or str(e)
  return None


CONFIG_FILE = "config.json"
# What an identity key absent from an older config.json stood for: runs before --lr_scaling were
# of the linear rule. A key neither here nor in the file is taken as unchanged.
IDENTITY_BEFORE_KEPT = {"lr_scaling": "linear"}


def checkpoint_identity(config: Config) -> dict[str, str]:
  """The settings a checkpoint cannot survive a change of: its variables would not match, or its
  position would mean another schedule (AdaScale's clock counts steps of its base batch; a linear
  run has none)."""
  identity = {"model": config.model.name, "dataset": config.data.dataset.name,
              "optimizer": config.optim.optimizer, "lr_scaling": config.optim.lr_scaling}
  if config.optim.adascale_base:
    identity["base_batch"] = config.optim.base_batch
  return identity


def saved_base_batch(model_dir: str) -> int:
  """The base batch config.json's identity holds (0: none): where a run written before its position
  kept the pinned base batch pinned it."""
  path = os.path.join(model_dir, CONFIG_FILE)
  if not os.path.exists(path):
    return 0
  with open(path) as fh:
    return int(json.load(fh).get("identity", {}).get("base_batch", 0))


def _incompatible_checkpoint(config: Config) -> str | None:
  """A message if model_dir holds a run whose variables differ from this one's."""
  path = os.path.join(config.run.model_dir, CONFIG_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as fh:
    saved = json.load(fh).get("identity", {})
  for flag, new in checkpoint_identity(config).items():
    if flag == "base_batch" and not config.optim.base_batch_given:  # the run's own is taken (train.py pins it)
      continue
    old = saved.get(flag, IDENTITY_BEFORE_KEPT.get(flag, new))
    if old != new:
      return (f"--model_dir={config.run.model_dir} holds a checkpoint trained with "
              f"--{flag}={old}, not {new}; use a new --model_dir "
              "(the old checkpoint is left untouched).")
  return None
