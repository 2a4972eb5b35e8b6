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
import os
import sys
import time

START = time.time()

# Quiet TensorFlow's C++ start-up chatter (and the oneDNN notice) before it loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, logging  # noqa: E402
from absl import flags as absl_flags  # noqa: E402

from flags import train_flags as flags  # noqa: E402  (define_flags, build_config, ...)
import comm  # noqa: E402
from comm import sync  # noqa: E402
from comm.exchange import choose_auto, make_compression  # noqa: E402
from input import pipeline  # noqa: E402
from models import build_model  # noqa: E402
from optimizers import build_optimizer, precision  # noqa: E402
from progress import emit, write_json_atomic  # noqa: E402
from training import evaluation, ledger as ledger_lib, loop, modes, shape, step as step_lib  # noqa: E402
from training.adaptive import noise_scale  # noqa: E402
from training.ending import closing, outcome, report, signals, watchdog as watchdog_lib  # noqa: E402
from training.persist import checkpoints, export, saving  # noqa: E402

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
    if (reason := sync.peer_failure(e)) is None:
      raise
    report.peer_lost(reason, stop_request, checkpoints.newest(FLAGS.model_dir) if FLAGS.model_dir else None)


def train(stop_request: signals.StopRequest):
  """The run, section by section below: every rank runs the same sequence. The time ledger charges
  each section to its part of summary.json's time block (training/ledger.py)."""
  ledger = ledger_lib.Ledger(start=START, part="startup.imports")
  world, config, mode, scanned, watchdog = setup(stop_request, ledger)
  ledger.enter("startup.input")
  log, dtype = mode.log, keras.mixed_precision.Policy(precision.POLICIES[config.optim.precision]).compute_dtype
  input_for = lambda config, world: pipeline.build(  # noqa: E731  (images in the compute dtype: half the bytes in bf16)
      config.data, world, config.run.seed, dtype=dtype, scanned=scanned, elastic=mode.elastic_input)
  data = input_for(config, world)
  ledger.enter("startup.model")
  model, optimizer, loss_scale = model_and_optimizer(config, data.info, log)
  # PowerSGD's state (checkpointed, broadcast, committed); auto's choice from a probe and agreed encode times.
  compression = make_compression(hvd, config.comm, world, model.trainable_variables, config.run.seed, log,
                                 choose=not config.faults.elastic)  # --elastic: each world chooses (shape.py)
  powersgd = compression.powersgd
  ledger.enter("startup.restore")  # and the broadcast of the state (mode.start)
  step_var, saver = restore(config, world, mode, model, optimizer, loss_scale, powersgd, data)
  replicated = model.variables + optimizer.variables + [step_var]  # alike on every rank (BatchNorm's once agreed)
  state = replicated + list(powersgd.variables if powersgd else [])  # what the ranks start from and commit
  mode.start(state)
  resumed = int(step_var)  # a restart's time block counts from its own start (training/ledger.py)
  config = pinned(config, world, mode.position.base_batch)  # AdaScale's base batch, as pinned, on every rank
  watchdog.progress(int(step_var), "setup", timed=False)
  # Horovod: the evaluation's sums in one allreduce over ranks, and a stop agreed before each batch.
  evaluator = evaluation.over_ranks(hvd, step_lib.make_eval_step(model), lambda: stop_request.code)
  if config.run.eval_only:  # --eval_only: the checkpoint's held-out metrics, nothing trained or written
    return closing.evaluate_checkpoint(hvd, config, world, mode, data, evaluator(data), saver, int(step_var),
                                      watchdog, stop_request, ledger)
  noise = noise_scale.NoiseScale() if config.run.noise_scale else None  # B_simple, smoothed over steps and worlds
  parts = shape.Parts(
      hvd, model, optimizer, loss_scale, compression, saver, step_var, watchdog, stop_request, noise,
      shape.controller_for(config, noise, log, agree=lambda v: hvd.broadcast_object(v, root_rank=0, name="choice")),
      # Horovod: BatchNorm's moving statistics averaged over ranks (one small grouped allreduce) before each
      # evaluation, save, commit and the export: what is measured, saved and served is one model.
      evaluator, agree=lambda: sync.average_statistics(hvd, sync.statistics_of(model)), input_for=input_for, log=log,
      clock=lambda: time.time() - START, use_powersgd=tf.Variable(False, trainable=False) if powersgd else None,
      rechoose=(lambda w: choose_auto(parts.compression, hvd, w, model.trainable_variables, log))
      if config.comm.compression == "auto" else None, ledger=ledger)
  worlds = []  # --elastic: the loop runs once per world (training/modes.py), the shape's transitions in each

  def run_world(world, config, data, course):
    worlds.append(world)
    return shape.Run(parts, world, config, data, course, later=len(worlds) > 1).train()

  def rebuild(world, position, later):  # --elastic: a new world's config (the global batch follows the policy)
    new = flags.build_config(FLAGS, world, base_batch=position.base_batch, later_world=later)
    return new, input_for(new, world)

  try:
    result = mode.run(run_world, config, data, int(step_var), saver=saver, rebuild=rebuild, watchdog=watchdog,
                      variables=state + [loss_scale.scale, loss_scale.good_steps], ledger=ledger,
                      # Horovod: PowerSGD's residuals averaged (a grouped allreduce) before each elastic commit.
                      before_commit=lambda: powersgd and powersgd.average_residuals(saver.average))
  except (flags.ConfigError, checkpoints.CheckpointError, loop.NoProgress) as e:  # the checkpoints stay intact
    fail(str(e))
  ledger.during("agree", parts.agree)  # a diverged run's too: the check below covers every variable
  closing.finish(hvd, result, parts, replicated, mode, data.info, parts.compression.summary, resumed_step=resumed)


# ------------------------------------------------------------------ setup --
def setup(stop_request, ledger):
  """Horovod, the validated config, the mode, the paths and the watchdog, before any expensive work;
  a stop requested by then ends the run here (nothing trained, nothing to save)."""
  ledger.enter("startup.init")
  watchdog_lib.horovod_stall_defaults(FLAGS.stall_timeout)
  # Horovod: initialise once (comm.init); everything below knows its rank and node from `world`.
  try:
    world = comm.init(hvd, FLAGS.ranks_per_node)
    config = flags.build_config(FLAGS, world)  # pure: the same verdict on every rank
  except flags.ConfigError as e:
    fail(str(e))
  logging.set_verbosity(logging.WARNING)  # TensorFlow's INFO chatter (one per checkpoint save) off
  mode = modes.of(config, hvd, world)  # fixed or elastic: the one place --elastic is read
  threads = config.run.threads or world.threads_per_rank()
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  ledger.enter("startup.data")
  # scanned: what --data_dir holds, read once here. One gather of every rank's problem and of what it
  # will read: hosts whose copies of the data differ stop here, before anything is written.
  problem, scanned = flags.check_paths(config)
  problem = mode.first_error(mode.launcher_problem() or problem, scanned)
  if problem:
    fail(problem)
  # A rank that stops making progress ends the job with a line naming it (training/ending/watchdog.py).
  watchdog = watchdog_lib.Watchdog.started(world, config.run.model_dir, config.faults.stall_timeout,
                                           newest_checkpoint=lambda: checkpoints.newest(config.run.model_dir),
                                           peers=mode.watch_peers)
  mode.log("ranks %d (%d per node, %d nodes), %d threads per rank; batch %d per rank%s, global %d",
           world.size, world.local_size, world.cross_size, threads, config.data.batch_size,
           f" x {config.data.accumulation_steps} accumulation steps" if config.data.accumulation_steps > 1 else "",
           config.data.global_batch)
  # digits/fashion_mnist written once, before anyone reads; a stop asked meanwhile, agreed, ends the run
  if stop := mode.prepare_input(config.data, stop_request.code):
    mode.log("%s", report.startup_stop_line(stop_request.reason, stop))
    watchdog.close()
    signals.leave(outcome.STOPPED, together=lambda: sync.barrier(hvd, "exit"))
  watchdog.progress(0, "setup", timed=False)
  return world, config, mode, scanned, watchdog


# ------------------------------------------------------- model, optimizer --
def model_and_optimizer(config, info, log):
  """The network for the data's classes and image shape, its optimizer and the loss scale."""
  keras.utils.set_random_seed(config.run.seed)
  # Mixed precision (Jia et al.): bf16/fp16 layers, fp32 master weights, logits and BatchNorm statistics.
  keras.mixed_precision.set_global_policy(precision.POLICIES[config.optim.precision])
  model = build_model(config.model.name, info.num_classes, info.image_shape,
                      zero_init_residual=config.model.zero_init_residual)
  log("model %s: %s trainable parameters, precision %s", config.model.name,
      f"{sum(int(tf.size(v)) for v in model.trainable_variables):,}", config.optim.precision)
  if not tf.config.list_physical_devices("GPU") and (slow := precision.slow_on_cpu(config.optim.precision,
                                                                                  precision.cpu_flags())):
    log("warning: %s", slow)  # a choice the user may have made for a GPU or an AMX machine: said, not refused
  optimizer = build_optimizer(config.optim, model.trainable_variables)
  return model, optimizer, precision.for_precision(config.optim.precision)  # loss scale: identity unless fp16


# ------------------------------------------------------------- checkpoint --
def restore(config, world, mode, model, optimizer, loss_scale, powersgd, data):
  """The step variable and the saver, after rank 0 restored the newest checkpoint (if any; the mode shares
  it) and pinned AdaScale's base batch (training/persist/saving.py, training/persist/checkpoints.py: atomic, fault-proof)."""
  step_var, saver = saving.Saver.of_model(model, optimizer, config.run, mode.log, loss_scale=loss_scale,
                                          any_rank=lambda flag: sync.any_rank(hvd, flag, "nonfinite_state"),
                                          # Horovod: PowerSGD's residuals averaged (one grouped allreduce) before a save.
                                          powersgd=powersgd, average=lambda tensors: hvd.grouped_allreduce(
                                              tensors, op=hvd.Average, name="powersgd_residuals"))
  if not world.is_chief:
    return step_var, saver
  export.remove_leftovers(config.run.model_dir, mode.log)
  try:
    found = saver.writer().restore_newest() is not None
    if not found and config.run.eval_only:  # every checkpoint was unreadable (each set aside with a line)
      raise checkpoints.CheckpointError(f"--eval_only found no readable checkpoint in {config.run.model_dir}.")
  except checkpoints.CheckpointError as e:
    fail(str(e))
  position = saver.restored_position(int(step_var)) if found else None
  base = config.optim.adascale_base and ((position or mode.position).base_batch or  # pinned at the first world
                                         flags.saved_base_batch(config.run.model_dir) or config.optim.base_batch)
  config = pinned(config, world, base)
  if found:  # the line that says where it resumes, at the pinned clock
    mode.restored(saver.newest, int(step_var), position and dataclasses.replace(position, base_batch=base), config,
                  data)
  mode.position = dataclasses.replace(mode.position, base_batch=base)
  if not config.run.eval_only:  # --eval_only leaves the run's config.json as it is
    write_json_atomic(os.path.join(config.run.model_dir, flags.CONFIG_FILE),
                      {"identity": flags.checkpoint_identity(config), "config": config.to_json()})
  return step_var, saver


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
