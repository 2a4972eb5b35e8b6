"""Data-parallel training of image classifiers with Horovod + TensorFlow.

Runbook (see README.md for more):

  # one process, the CPU-sized default: ResNet-20 on the embedded digits set
  python train.py --model_dir=runs/digits

  # two ranks on this host (what `make train` runs)
  horovodrun -np 2 python train.py --model_dir=runs/digits

  # several nodes, 4 ranks each
  horovodrun -np 16 -H node1:4,node2:4,node3:4,node4:4 python train.py \
      --model=resnet50 --dataset=synthetic --batch_size=64 --max_steps=200

  # every flag, documented
  python train.py --helpfull

  # time to accuracy: stop every rank at the first evaluation with held-out top-1 >= 0.95
  python train.py --target_top1=0.95 --eval_every=5

A run resumes from the newest checkpoint in --model_dir: restart the same
command after a crash or a preemption. Rank 0 alone logs, writes TensorBoard
scalars, checkpoints, summary.json and, at the end, a SavedModel to serve
(<model_dir>/export/); the final line on stdout is a JSON summary (final_top1,
final_top5, final_loss, images_per_sec, ranks, global_batch, time_to_target_seconds, ...).
"""
import dataclasses
import json
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
from comm.exchange import make_compression, make_gradient_exchange  # noqa: E402
from input import pipeline  # noqa: E402
from models import build_model  # noqa: E402
from optimizers import adascale, build_optimizer, precision, schedules  # noqa: E402
from progress import Progress, emit, eval_line, write_json_atomic  # noqa: E402
from training import batch_control, checkpoints, evaluation, export, hooks, modes, outcome, report, signals  # noqa: E402
from training import course as course_lib, loop as loop_lib  # noqa: E402
from training import step as step_lib, watchdog as watchdog_lib  # noqa: E402
from training.loop import Loop, NoProgress, Policy  # noqa: E402
from training.noise_scale import NoiseScale  # noqa: E402
from training.saving import Saver  # noqa: E402

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
  # A signal from here on asks for a stop after the step it arrives in
  # (training/signals.py): a preempted or cancelled job keeps its progress.
  stop_request = signals.StopRequest()
  stop_request.install()
  try:
    train(stop_request)
  except Exception as e:  # noqa: BLE001  (anything else is re-raised with its traceback)
    reason = sync.peer_failure(e)
    if reason is None:
      raise
    report.peer_lost(reason, stop_request, checkpoints.newest(FLAGS.model_dir) if FLAGS.model_dir else None)


def train(stop_request: signals.StopRequest):
  """The run, section by section below: every rank runs the same sequence."""
  world, config, mode, scanned, watchdog = setup(stop_request)
  log = mode.log  # lines on rank 0 (--elastic: rank 0 of the world of the moment)
  data = input_for(config, world, mode, scanned)
  model, optimizer, loss_scale = model_and_optimizer(config, data.info, log)
  # PowerSGD's residuals and Qs (None without it): checkpointed, broadcast and committed with the weights.
  # --compression=auto chooses here whether and where PowerSGD pays (comm/compression_choice.py), from a
  # probe and encode times agreed over ranks, so every rank makes the same choice.
  compression = make_compression(hvd, config.comm, world, model.trainable_variables, config.run.seed, log)
  powersgd = compression.powersgd
  step_var, saver = restore(config, world, mode, model, optimizer, loss_scale, powersgd, data)
  config = dataclasses.replace(config, comm=compression.config)  # auto resolved; config.json keeps it as given
  replicated = model.variables + optimizer.variables + [step_var]  # alike on every rank (BatchNorm's once agreed)
  variables = replicated + list(powersgd.variables if powersgd else [])
  # Horovod: BatchNorm's moving statistics averaged over ranks before each evaluation, save, commit and the
  # export (one small grouped allreduce): what is measured, saved and served is one model.
  statistics = sync.statistics_of(model)
  agree_statistics = lambda: sync.average_statistics(hvd, statistics)  # noqa: E731
  mode.start(variables)
  watchdog.progress(int(step_var), "setup", timed=False)
  eval_step = step_lib.make_eval_step(model)
  # Horovod: one allreduce of the sums [loss, top-1 hits, top-5 hits, count] over ranks, and before each
  # batch a small one that agrees a stop request (a notice during ImageNet's minutes of evaluation).
  evaluator = lambda data: evaluation.evaluator(  # noqa: E731
      eval_step, data, lambda sums: hvd.allreduce(sums, op=hvd.Sum, name="eval_totals"),
      agree=lambda codes: hvd.allreduce(codes, op=hvd.Max, name="eval_stop"), stop_code=lambda: stop_request.code)
  if config.run.eval_only:  # --eval_only: the checkpoint's held-out metrics, nothing trained or written
    return evaluate_checkpoint(config, world, mode, data, evaluator(data), saver, step_var, watchdog, stop_request)
  writers = {}  # rank 0's TensorBoard writer, made once
  noise = NoiseScale() if config.run.noise_scale else None  # B_simple, smoothed over steps and worlds
  # --batch_policy=adaptive: the goodput controller of the accumulation steps (rank 0 decides).
  controller = batch_control.Controller(
      config.data.batch_size, config.optim.base_batch, config.data.decide_every, noise, log=log,
      agree=lambda k: hvd.broadcast_object(k, root_rank=0, name="batch_k")) if config.data.adaptive else None

  # ---------------------------------------------------------- step, loop --
  def run_world(world, config, data, course) -> modes.WorldRun:
    """The loop in this world (--elastic: again in each new one) with its exchange and step; under
    --batch_policy=adaptive, stretch after stretch as the controller changes the accumulation steps."""
    if world.is_chief:
      saver.writer()
      writers.setdefault("tb", tf.summary.create_file_writer(os.path.join(config.run.model_dir, "tb")))
    if noise:  # the estimates of the checkpoint or commit this world starts from, alike on every rank
      noise.restore(course.position.noise)
    # hybrid probes the links here, unless --compression=auto did at start-up (its model is reused)
    exchange = make_gradient_exchange(hvd, config.comm, world, log, model=compression.cost)
    # The step users run and the benchmarks time (training/step.py): with --accumulation_steps=K, K
    # micro-batches per rank, then one exchange (the one place gradients cross ranks) and one update.
    # Horovod: the noise scale's per-rank squared norm averaged in one small allreduce (training/step.py).
    # Adaptive: one step for every K (any_k), so a change of K costs no retrace.
    adaptive = config.data.adaptive
    if adaptive:  # the world's first K: near the batch the run last trained at, then the controller's
      controller.new_world(world.size, config.data.k_range(world.size),
                           step_lib.time_exchange(exchange, model.trainable_variables))
      start = controller.start_k(config.data.accumulation_steps, course.position.global_batch)
      if start != config.data.accumulation_steps:
        log("batch: this world starts at K %d (global batch %d): the nearest to the global batch trained last "
            "(%d) within K %d..%d", start, start * config.data.batch_size * world.size,
            course.position.global_batch, *config.data.k_range(world.size))
      controller.stretch(start)
      controller.stretch(controller.first_choice(course.step))  # a line of its own if it moves K
      if controller.k != config.data.accumulation_steps:
        config, data = resized(config, world, course, controller.k)
    kind = hooks.Measuring.for_world(noise, world.size, config.data, log, keep=course.keep_noise)[0]
    train_step = step_lib.make_train_step(
        model, optimizer, exchange, loss_scale, data.info.num_classes, config.optim.label_smoothing,
        agree=sync.agree_max(hvd), accumulation_steps=config.data.accumulation_steps, noise=kind,
        average=lambda x: hvd.allreduce(x, op=hvd.Average), identical_norms=bool(config.optim.adascale_base),
        any_k=tf.TensorSpec([config.data.batch_size, *data.info.image_shape], compute_dtype(config)) if adaptive else None,
        # PowerSGD from --compression_start on, by the checkpointed step: the same on every rank.
        powersgd=powersgd, compressing=lambda: step_var >= config.comm.compression_start)
    timed = [0, 0.0]  # images and seconds of the stretches' timed steps
    while True:
      ending, progress = run_stretch(world, config, data, course, train_step)
      timed = [a + b for a, b in zip(timed, progress.timed())]
      if ending.cause != loop_lib.RESIZED:
        break
      controller.stretch(ending.resize_to)
      config, data = resized(config, world, course, ending.resize_to)
    return modes.WorldRun(world, config, ending, exchange.plan, round(timed[0] / timed[1], 1) if timed[1] else None)

  def run_stretch(world, config, data, course, train_step):
    """The loop at one batch: its LR schedule, the progress lines, the noise scale's sizes."""
    spe = data.steps_per_epoch
    gain = None
    if config.optim.adascale_base:  # the base batch's schedule read at tau, times r (optimizers/adascale.py)
      gain = adascale.Gain(config.optim.base_batch, config.data.global_batch, lambda: noise.b_simple)
      schedule = schedules.for_run(config.optim, gain.base_batch, config.run.epochs, course.per_epoch(spe))
      log("adascale: the schedule is written for base batch %d (LR peak %.4f, %d warmup and %d steps of it, %d an "
          "epoch); each update's LR is r x it at tau, and tau moves on by r, r from the noise scale between 1 and "
          "S = %.2f (now %.2f); --epochs counts base-batch epochs", gain.base_batch, schedule.peak_lr,
          schedule.warmup_steps, schedule.total_steps, course.per_epoch(spe), gain.scale, gain())
    else:
      schedule = schedules.for_run(config.optim, config.data.global_batch, config.run.epochs, spe)
      log("%s", schedules.describe(schedule, config.optim.optimizer, config.optim.base_lr, config.data.global_batch))
    _, measuring = hooks.Measuring.for_world(noise, world.size, config.data, log, keep=course.keep_noise)
    progress = Progress(world.is_chief, config.data.global_batch, config.data.step_batch, course.nominal_step(spe),
                        course.last_step(spe), course.per_epoch(spe), config.run.log_every, writers.get("tb") if world.is_chief else None,
                        noise=noise if measuring else None,
                        adascale=gain and (lambda: (gain(), gain.scale, course.position.tau,
                                                    course.position.images / data.info.num_train)))
    log("training %s %d..%d (%d per epoch, %.1f epochs)", "base-batch steps" if gain else "steps",
        course.nominal_step(spe), course.last_step(spe), course.per_epoch(spe),
        course.last_step(spe) / course.per_epoch(spe))
    evaluate = evaluator(data)
    adaptive = config.data.adaptive
    loop = Loop(course, data, step_lib.host_step(train_step), evaluate, save=lambda s: saver.save(s, course.position),
                schedule=schedule, stop_code=lambda: stop_request.code, policy=Policy.of(config),
                clock=lambda: time.time() - START, gain=gain, resize=controller.resize if adaptive else None,
                agree=agree_statistics, record=saver.record_evaluation,
                hooks=[hooks.StepVariable(step_var), hooks.Watching(watchdog), *filter(None, [measuring]),
                       *([controller] if adaptive else []), hooks.Reporting(progress, by_updates=gain is not None)])
    return loop.run(), progress

  def resized(config, world, course, k):
    """The config and input at K accumulation steps (the controller's choice); the course goes on
    at the new step batch (the epoch's rest dealt to it)."""
    start = time.perf_counter()
    watchdog.mark("resize")  # a dataset built and traced again: first-time work, then its own kind's limit
    new = dataclasses.replace(config, data=config.data.with_accumulation(k, world.size))
    data = input_for(new, world, mode, scanned)
    course.resized(new.data, getattr(data, "readers", 0))
    watchdog.progress(course.step, "resize", timed=False)
    controller.change_seconds += time.perf_counter() - start
    return new, data

  def rebuild(world):  # --elastic: a new world's config (the global batch follows the policy) and input
    new = flags.build_config(FLAGS, world)
    return new, input_for(new, world, mode, scanned)

  try:
    result = mode.run(run_world, config, data, int(step_var), saver=saver, rebuild=rebuild, watchdog=watchdog,
                      variables=variables + [loss_scale.scale, loss_scale.good_steps])
  except (flags.ConfigError, checkpoints.CheckpointError, NoProgress) as e:  # the checkpoints stay intact
    fail(str(e))
  agree_statistics()  # a diverged run's too: the check below covers every variable
  finish(result, model, replicated, saver, watchdog, stop_request, mode, data.info, noise, controller,
         compression.summary)


# ------------------------------------------------------------------ setup --
def setup(stop_request):
  """Horovod, the validated config, the mode, the paths and the watchdog, before any expensive work;
  a stop requested by then ends the run here (nothing trained, nothing to save)."""
  watchdog_lib.horovod_stall_defaults(FLAGS.stall_timeout)
  # Horovod: initialise once (comm.init); everything below knows its rank and
  # node from `world`, validated against --ranks_per_node on every rank.
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
  # scanned: what --data_dir holds, read once here and handed to the pipeline. One gather of every
  # rank's problem and of what it will read: hosts whose copies of the data differ stop here, before
  # config.json or a checkpoint is written (comm/sync.first_error; --elastic agrees in each world instead).
  problem, scanned = flags.check_paths(config)
  problem = mode.first_error(mode.launcher_problem() or problem, scanned)
  if problem:
    fail(problem)
  # A rank that stops making progress ends the job with a line naming it (training/watchdog.py).
  watchdog = watchdog_lib.Watchdog.started(world, config.run.model_dir, config.faults.stall_timeout,
                                           newest_checkpoint=lambda: checkpoints.newest(config.run.model_dir),
                                           peers=mode.watch_peers)
  mode.log("ranks %d (%d per node, %d nodes), %d threads per rank; batch %d per rank%s, global %d",
           world.size, world.local_size, world.cross_size, threads, config.data.batch_size,
           f" x {config.data.accumulation_steps} accumulation steps" if config.data.accumulation_steps > 1 else "",
           config.data.global_batch)
  # digits/fashion_mnist written once, before anyone reads; a stop asked meanwhile, agreed, ends the run
  stop = mode.prepare_input(config.data, stop_request.code)
  if stop:
    mode.log("%s", report.startup_stop_line(stop_request.reason, stop))
    watchdog.close()
    signals.leave(outcome.STOPPED, together=lambda: sync.barrier(hvd, "exit"))
  watchdog.progress(0, "setup", timed=False)
  return world, config, mode, scanned, watchdog


# ------------------------------------------------------------------ input --
def compute_dtype(config):
  """The model's compute dtype, the images' dtype (half the bytes in bf16/fp16)."""
  return keras.mixed_precision.Policy(precision.POLICIES[config.optim.precision]).compute_dtype


def input_for(config, world, mode, scanned):
  """This rank's input; images leave it in the model's compute dtype."""
  return pipeline.build(config.data, world, config.run.seed, dtype=compute_dtype(config), scanned=scanned,
                        elastic=mode.elastic_input)


# ------------------------------------------------------- model, optimizer --
def model_and_optimizer(config, info, log):
  """The network for the data's classes and image shape, its optimizer and the loss scale."""
  keras.utils.set_random_seed(config.run.seed)
  # Mixed precision (Jia et al.): layers compute in bf16/fp16, variables stay
  # fp32 master weights; the logits layer and BatchNorm statistics stay fp32.
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
  """The step variable and the saver, after rank 0 restored the newest checkpoint (if any; the mode
  shares it). training/saving.py: every save agrees on finite weights first; training/checkpoints.py:
  saves are atomic, a damaged newest checkpoint is set aside for the one before it."""
  step_var, saver = Saver.of_model(model, optimizer, config.run, mode.log, loss_scale=loss_scale,
                                   any_rank=lambda flag: sync.any_rank(hvd, flag, "nonfinite_state"),
                                   # Horovod: PowerSGD's residuals averaged in one grouped allreduce before a save.
                                   powersgd=powersgd, average=lambda tensors: hvd.grouped_allreduce(
                                       tensors, op=hvd.Average, name="powersgd_residuals"))
  if world.is_chief:
    export.remove_leftovers(config.run.model_dir, mode.log)
    try:
      if saver.writer().restore_newest() is not None:
        mode.restored(saver.newest, int(step_var), saver.restored_position(int(step_var)), config, data)
      elif config.run.eval_only:  # every checkpoint was unreadable (each set aside with a line)
        raise checkpoints.CheckpointError(f"--eval_only found no readable checkpoint in {config.run.model_dir}.")
    except checkpoints.CheckpointError as e:
      fail(str(e))
    if config.run.eval_only:  # the run's config.json stays the run's
      return step_var, saver
    write_json_atomic(os.path.join(config.run.model_dir, flags.CONFIG_FILE),
                      {"identity": flags.checkpoint_identity(config), "config": config.to_json()})
  return step_var, saver


# ------------------------------------------------------------- eval only --
def evaluate_checkpoint(config, world, mode, data, evaluate, saver, step_var, watchdog, stop_request):
  """--eval_only: the restored checkpoint's held-out metrics on this world's ranks, the run's eval line
  and one JSON line on rank 0. Its BatchNorm statistics are one model's (averaged before every save), so
  any number of ranks gives the figures the run printed at that step."""
  step = int(step_var)
  epochs = course_lib.epochs_as_trained(mode.position, config.run, config.data, data.info.num_train,
                                        config.optim.adascale_base)
  mode.log("evaluating %s (step %d, epoch %.2f) on %d ranks", saver.newest or "the newest checkpoint", step,
           epochs, world.size)
  watchdog.mark("eval")
  try:
    held = evaluate(lambda: watchdog.progress(step, "eval", timed=False))
  except evaluation.Stopped as stop:
    mode.log("stopped: %s during the evaluation; nothing was written (exit %d)",
             stop_request.reason or signals.name(stop.code), outcome.STOPPED)
    watchdog.close()
    signals.leave(outcome.STOPPED, together=lambda: sync.barrier(hvd, "exit"))
  if world.is_chief:
    emit(eval_line(epochs, held.top1, held.top5, held.loss))
    emit(json.dumps({"status": "evaluated", "checkpoint": saver.newest, "step": step, "epoch": round(epochs, 3),
                     "top1": held.top1, "top5": held.top5, "loss": held.loss, "count": held.count,
                     "ranks": world.size}), sys.stdout)
  watchdog.close()
  stop_request.close()


# ---------------------------------------------------------- summary, export --
def finish(result: modes.WorldRun, model, replicated, saver, watchdog, stop_request, mode, info, noise, controller,
           compression):
  """summary.json, the SavedModel and the last lines on rank 0; every rank exits with the run's status.
  replicated: every variable the ranks must hold alike (the model's, BatchNorm's agreed statistics
  included, the optimizer's and the step); compression: summary.json's `compression` entry
  (comm.exchange.Compression.summary)."""
  ending, world, config = result.ending, result.world, result.config
  identical = sync.replicas_identical(hvd, replicated)
  if not identical:
    logging.warning("ranks hold different weights after training: a rank diverged")
  serve = lambda: export_or_stop(model, info, config, mode, saver, watchdog, stop_request)  # noqa: E731
  if ending.cause == loop_lib.OVER:  # started again after it had ended: summary.json stays as it was
    if world.is_chief:
      finished_before(ending, config, mode, serve)
    watchdog.close()
    stop_request.close()
    return
  summary = report.summary(ending, config, world, info.name, plan=result.plan, images_per_sec=result.images_per_sec,
                           identical=identical, wall_seconds=time.time() - START,
                           extra={**mode.summary_keys(), "compression": compression,
                                  **report.noise_keys(noise, ending), **report.adascale_keys(ending, config, info),
                                  **({"batch_policy": controller.summary()} if controller else {})})
  # summary.json first: a failed export or a kill during it (minutes for ResNet-50) loses nothing else.
  if world.is_chief:
    write_json_atomic(os.path.join(config.run.model_dir, "summary.json"), summary)
  # A model users can serve: rank 0's weights and statistics (identical everywhere) with the evaluation
  # preprocessing inside (training/export.py); not for a stopped or diverged run.
  if world.is_chief and config.run.export and ending.status in (outcome.OK, outcome.TARGET_REACHED):
    summary.update(serve())
  if world.is_chief:  # summary.json again with the export's key, the stop/divergence/target line, the JSON line
    report.publish(summary, report.final_line(ending, stop_request.reason, saver.newest, config.evaluation),
                   config.run.model_dir)
  watchdog.close()
  stop_request.close()
  signals.leave(outcome.exit_status(ending.status), together=lambda: sync.barrier(hvd, "exit"))


def export_or_stop(model, info, config, mode, saver, watchdog, stop_request) -> dict:
  """Rank 0's SavedModel (training/export.py): summary.json's export keys; a stop requested during it
  ends the process at once with exit 75, summary.json and the checkpoint already written: the same
  command (a run that has ended) exports again."""
  watchdog.mark("export")  # tracing the serving function: first-time work, the start-up allowance
  keys = export.unless_stopped(lambda: export.for_run(model, info, config, mode.log, saver.newest),
                               lambda: stop_request.code)
  if keys is None:
    emit(report.export_stop_line(stop_request.reason, saver.newest))
    sys.stdout.flush()
    os._exit(outcome.STOPPED)  # the export's thread with it; what it half wrote goes at the next start
  return keys


def finished_before(ending, config, mode, serve) -> None:
  """Rank 0 of a run started again after it had ended: one line, the export if it is missing (a stop
  came during it), and the kept summary.json as the JSON line."""
  mode.log("%s", report.over_line(ending, config.evaluation))
  if config.run.export and not os.path.exists(os.path.join(config.run.model_dir, export.EXPORT_DIR)):
    serve()
  path = os.path.join(config.run.model_dir, "summary.json")
  if os.path.exists(path):
    with open(path) as fh:
      emit(json.dumps(json.load(fh)), sys.stdout)

if __name__ == "__main__":
  app.run(main)
