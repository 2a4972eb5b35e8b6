"""Data-parallel training of image classifiers with Horovod + TensorFlow. Runbook (README.md has more):

  python train.py --model_dir=runs/digits                      # one process: ResNet-20 on the digits set
  horovodrun -np 2 python train.py --model_dir=runs/digits     # two ranks here (what `make train` runs)
  horovodrun -np 16 -H node1:4,node2:4,node3:4,node4:4 python train.py \
      --model=resnet50 --dataset=synthetic --batch_size=64 --max_steps=200   # four nodes of 4 ranks
  python train.py --target_top1=0.95 --eval_every=5            # stop at the first held-out top-1 >= 0.95
  python train.py --helpfull                                   # every flag, documented

A run resumes from the newest checkpoint in --model_dir: restart the same command after a crash or a
preemption. Rank 0 alone logs and writes (checkpoints, TensorBoard, summary.json, the SavedModel in
<model_dir>/export/); the final line on stdout is a JSON summary. What a run is at any moment and how
it changes (worlds, the batch, the compression): training/shape.py.
"""
import dataclasses
import functools
import os
import sys
import time

START = time.time()

# Quiet TensorFlow's C++ start-up chatter (and the oneDNN notice), and hide scikit-learn while it loads: Keras 3
# imports it for wrappers unused here, 0.85 of a rank's 4.6 CPU-s import (4 runs each way); input/digits.py uses it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.modules["sklearn"] = None  # not imported yet: only the standard library is, above
import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags as absl_flags, logging  # noqa: E402

from flags import train_flags as flags  # noqa: E402  (define_flags, build_config, ...)
import comm.sync  # noqa: E402  (comm.init; comm.sync)
from comm.exchange import make_compression  # noqa: E402
from progress import emit, write_json_atomic  # noqa: E402
from training import assembly, evaluation, ledger as ledger_lib, loop, modes, shape, state as state_lib  # noqa: E402
from training import step as step_lib  # noqa: E402
from training.adaptive import noise_scale  # noqa: E402
from training.ending import closing, outcome, report, signals, watchdog as watchdog_lib  # noqa: E402
from training.persist import checkpoints, export, saving  # noqa: E402

del sys.modules["sklearn"]  # TensorFlow is loaded: an import of it from here on finds it
flags.define_flags()
FLAGS = absl_flags.FLAGS


def fail(message: str) -> None:
  """Stop this rank with one sentence on stderr and exit status 2 (every rank calls it)."""
  emit(f"error: {message}")
  sys.exit(outcome.BAD_INPUT)


def main(argv):
  """train(), and one line instead of a traceback when another rank dies under it (report.peer_lost)."""
  if len(argv) > 1:
    fail(f"unexpected arguments {argv[1:]}; flags take the form --name=value (see --helpfull).")
  stop_request = signals.StopRequest()  # a signal asks for a stop (training/ending/signals.py): progress is kept
  stop_request.install()
  try:
    train(stop_request)
  except Exception as e:  # noqa: BLE001  (anything else is re-raised with its traceback)
    if (reason := comm.sync.peer_failure(e)) is None:
      raise
    report.peer_lost(reason, stop_request, checkpoints.newest(FLAGS.model_dir) if FLAGS.model_dir else None)


def train(stop_request: signals.StopRequest):
  """The run, section by section: every rank runs the same sequence. The time ledger charges each
  section to its part of summary.json's time block (training/ledger.py)."""
  ledger = ledger_lib.Ledger(start=START, part="startup.imports")
  world, config, mode, scanned, watchdog = setup(stop_request, ledger)
  # ----------------------------------------------------------------- input --
  ledger.enter("startup.input")
  input_for = assembly.InputFor.of(config, scanned, mode.elastic_input)
  data = input_for(config, world)
  # ------------------------------------------- model, optimizer, exchange --
  ledger.enter("startup.model")
  model, optimizer, loss_scale = assembly.model_and_optimizer(config, data.info, mode.log)
  collectives = assembly.Collectives(hvd, model)
  # PowerSGD's state (checkpointed, broadcast, committed); auto's choice from a probe and agreed encode times.
  compression = make_compression(hvd, config.comm, world, model.trainable_variables, config.run.seed, mode.log,
                                 choose=not config.faults.elastic)  # --elastic: each world chooses (shape.py)
  powersgd = compression.powersgd
  # -------------------------------------------- state, restored or started --
  ledger.enter("startup.restore")  # and the state shared from rank 0 (mode.start)
  step_var, saver, position = restore(config, world, mode, model, optimizer, loss_scale, collectives, powersgd, data)
  replicated = model.variables + optimizer.variables + [step_var]  # alike on every rank (BatchNorm's once agreed)
  run_state = state_lib.RunState(hvd, replicated + list(powersgd.variables if powersgd else []) +
                                 [loss_scale.scale, loss_scale.good_steps], position)
  mode.start(run_state)
  resumed = int(step_var)  # a restart's time block counts from its own start (training/ledger.py)
  config = pinned(config, world, run_state.position.base_batch)  # AdaScale's base batch, as pinned, on every rank
  watchdog.progress(resumed, "setup", timed=False)
  evaluator = evaluation.over_ranks(hvd, step_lib.make_eval_step(model), stop_request.asked)
  if config.run.eval_only:  # --eval_only: the checkpoint's held-out metrics, nothing trained or written
    return closing.evaluate_checkpoint(hvd, config, world, mode, data, evaluator(data), saver, run_state.position,
                                       watchdog, stop_request, ledger)
  # --------------------------------------------------------------- the run --
  noise = noise_scale.NoiseScale() if config.run.noise_scale else None  # B_simple, smoothed over steps and worlds
  parts = shape.Parts(
      hvd=hvd, model=model, optimizer=optimizer, loss_scale=loss_scale, compression=compression, saver=saver,
      step_var=step_var, watchdog=watchdog, stop_request=stop_request, evaluator=evaluator, input_for=input_for,
      noise=noise, controller=shape.controller_for(config, noise, mode.log, decide=collectives.decide), log=mode.log,
      clock=ledger.wall, average_statistics=collectives.average_statistics, ledger=ledger,
      use_powersgd=tf.Variable(False, trainable=False) if powersgd else None,
      rechoose=assembly.Rechoose.of(config, hvd, model, mode.log))
  worlds = assembly.Worlds(parts, functools.partial(flags.build_config, FLAGS))
  try:
    result = mode.run(worlds.run_world, config, data, run_state, saver=saver, rebuild=worlds.rebuild, watchdog=watchdog,
                      ledger=ledger, before_commit=assembly.BeforeCommit(powersgd, collectives.average_residuals))
    ledger.during("checkpoint", saver.wait)  # the last one, written in the background, before the summary names it
  except (flags.ConfigError, checkpoints.CheckpointError, loop.NoProgress) as e:  # the checkpoints stay intact
    fail(str(e))
  # --------------------------------------------------------------- the end --
  ledger.during("statistics", parts.average_statistics)  # a diverged run's too: the check below covers every variable
  closing.finish(hvd, result, parts, replicated, mode, data.info, parts.compression.summary, resumed_step=resumed)


# ------------------------------------------------------------------ setup --
def setup(stop_request, ledger):
  """Horovod, the validated config, the mode, the paths and the watchdog, before any expensive work;
  a stop requested by then ends the run here (nothing trained, nothing to save)."""
  ledger.enter("startup.init")
  watchdog_lib.horovod_stall_defaults(FLAGS.stall_timeout)
  try:
    world = comm.init(hvd, FLAGS.ranks_per_node)  # Horovod, once: everything below knows its rank from `world`
    config = flags.build_config(FLAGS, world)  # pure: the same verdict on every rank
  except flags.ConfigError as e:
    fail(str(e))
  except comm.joining.RemovedBeforeJoining as e:  # started ahead for a host that left again: exit status 0
    sys.exit(emit(str(e)))  # (emit returns None)
  logging.set_verbosity(logging.WARNING)  # TensorFlow's INFO chatter (one per checkpoint save) off
  mode = modes.of(config, hvd, world)  # fixed or elastic: the one place --elastic is read
  threads = config.run.threads or world.threads_per_rank()
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  ledger.enter("startup.data")
  # scanned: what --data_dir holds, read once here. One gather of every rank's problem and of what it
  # will read: hosts whose copies of the data differ stop here, before anything is written.
  problem, scanned = flags.check_paths(config)
  if problem := mode.first_error(mode.launcher_problem() or problem, scanned):
    fail(problem)
  # A rank that stops making progress ends the job with a line naming it (training/ending/watchdog.py).
  newest = functools.partial(checkpoints.newest, config.run.model_dir)
  watchdog = watchdog_lib.Watchdog.started(world, config.run.model_dir, config.faults.stall_timeout,
                                           newest_checkpoint=newest, peers=mode.watch_peers)
  mode.log("ranks %d (%d per node, %d nodes), %d threads per rank; batch %d per rank%s, global %d",
           world.size, world.local_size, world.cross_size, threads, config.data.batch_size,
           f" x {config.data.accumulation_steps} accumulation steps" if config.data.accumulation_steps > 1 else "",
           config.data.global_batch)
  # digits/fashion_mnist written once, before anyone reads; a stop asked meanwhile, agreed, ends the run
  if stop := mode.prepare_input(config.data, stop_request.code):
    mode.log("%s", report.startup_stop_line(stop_request.reason, stop))
    watchdog.close()
    signals.leave(outcome.STOPPED, together=functools.partial(comm.sync.barrier, hvd, "exit"))
  watchdog.progress(0, "setup", timed=False)
  return world, config, mode, scanned, watchdog


# ------------------------------------------------------------- checkpoint --
def restore(config, world, mode, model, optimizer, loss_scale, collectives, powersgd, data):
  """The step variable, the saver and the position to start from, after rank 0 restored the newest
  checkpoint (if any) and pinned AdaScale's base batch (training/persist/saving.py and checkpoints.py:
  atomic, fault-proof); the other ranks' position is the initial one until the state is shared."""
  step_var, saver = saving.Saver.of_model(model, optimizer, config.run, mode.log, loss_scale=loss_scale,
                                          any_rank=collectives.any_rank, powersgd=powersgd,
                                          average=collectives.average_residuals)
  if not world.is_chief:
    return step_var, saver, state_lib.Position()
  export.remove_leftovers(config.run.model_dir, mode.log)
  try:
    found = saver.writer().restore_newest() is not None
    if not found and config.run.eval_only:  # every checkpoint was unreadable (each set aside with a line)
      raise checkpoints.CheckpointError(f"--eval_only found no readable checkpoint in {config.run.model_dir}.")
  except checkpoints.CheckpointError as e:
    fail(str(e))
  position = saver.restored_position(int(step_var)) if found else None
  base = config.optim.adascale_base and ((position and position.base_batch) or  # pinned at the first world
                                         flags.saved_base_batch(config.run.model_dir) or config.optim.base_batch)
  config = pinned(config, world, base)
  position = dataclasses.replace(position, base_batch=base) if position else None
  if found:  # the line that says where it resumes, at the pinned clock
    position = mode.restored(saver.newest, int(step_var), position, config, data)
  if not config.run.eval_only:  # --eval_only leaves the run's config.json as it is
    write_json_atomic(os.path.join(config.run.model_dir, flags.CONFIG_FILE),
                      {"identity": flags.checkpoint_identity(config), "config": config.to_json()})
  return step_var, saver, dataclasses.replace(position or state_lib.Position(), base_batch=base)


def pinned(config, world, base):
  """The config at AdaScale's base batch `base` as pinned at the run's first world (Position.base_batch)."""
  if not config.optim.adascale_base or not base or config.optim.base_batch_given or base == config.optim.base_batch:
    return config
  try:
    return flags.build_config(FLAGS, world, base_batch=base)
  except flags.ConfigError as e:  # a pinned B0 the flags do not admit on this world
    fail(str(e))


if __name__ == "__main__":
  app.run(main)
