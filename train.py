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
import json
import os
import shutil
import signal
import statistics
import sys
import time
import types

START = time.time()

# Quiet TensorFlow's C++ start-up chatter (and the oneDNN notice) before it loads.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, logging  # noqa: E402
from absl import flags as absl_flags  # noqa: E402

from flags import train_flags as flags  # noqa: E402  (define_flags, build_config, ...)
from flags.config import Source  # noqa: E402
import comm  # noqa: E402
from comm import sync  # noqa: E402
from comm.exchange import make_gradient_exchange  # noqa: E402
from input import pipeline  # noqa: E402
from models import build_model  # noqa: E402
from optimizers import build_optimizer, precision, schedules  # noqa: E402
from progress import Progress, emit, logger, write_json_atomic  # noqa: E402
from training import checkpoints, elastic, evaluation, export, outcome, signals, watchdog as watchdog_lib  # noqa: E402
from training import course as course_lib  # noqa: E402
from training import step as step_lib  # noqa: E402

flags.define_flags()
FLAGS = absl_flags.FLAGS
PEER_GRACE_SECONDS = 3  # see main()


def fail(message: str) -> None:
  """Stop this rank with one sentence on stderr and exit status 2 (every rank calls it)."""
  emit(f"error: {message}")
  sys.exit(outcome.BAD_INPUT)


def horovod_stall_defaults(stall_timeout: float) -> None:
  """Horovod's stall inspector (rank 0's coordinator) warns, naming the ranks that have not
  submitted a tensor, well before our watchdog ends the job; its own shutdown stays off,
  since the watchdog's line names the culprit and its limit follows the step time."""
  if stall_timeout > 0:
    os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", str(int(max(5, min(60, stall_timeout / 2)))))


def main(argv):
  """train(), and one line instead of a traceback when another rank dies under it.

  A SIGKILLed Gloo peer left the survivor a Horovod traceback ("Horovod has been shut
  down ..."). The survivor waits for the launcher's SIGTERM, at most PEER_GRACE_SECONDS,
  before it speaks: when the peer ended on purpose (rank 0 failing a save on a full disk
  exits 2), that status reaches the launcher first and its line stays the first one (without
  the wait, the survivor's exit 5 came first); Gloo's horovodrun SIGKILLs 5 s after its SIGTERM.
  os._exit: Horovod's exit-time shutdown would wait on the dead peer's transport.
  """
  # A signal from here on asks for a stop after the step it arrives in
  # (training/signals.py): a preempted or cancelled job keeps its progress.
  stop_request = signals.StopRequest()
  stop_request.install()
  try:
    train(argv, stop_request)
  except Exception as e:  # noqa: BLE001  (anything else is re-raised with its traceback)
    reason = sync.peer_failure(e)
    if reason is None:
      raise
    deadline = time.time() + PEER_GRACE_SECONDS
    while not stop_request.code and time.time() < deadline:  # the launcher's SIGTERM ends the wait
      time.sleep(0.05)
    newest = tf.train.latest_checkpoint(FLAGS.model_dir) if FLAGS.model_dir else None
    emit(f"error: a collective failed: another rank died or became unreachable "
         f"({reason.split('. ')[0][:100]}); this rank stops too (exit {outcome.PEER_LOST}); "
         f"look for the first rank that ended in the launcher's output; resume with the same command "
         f"(newest checkpoint {newest or 'none'})")
    sys.stdout.flush()
    os._exit(outcome.PEER_LOST)


def train(argv, stop_request: signals.StopRequest):
  if len(argv) > 1:
    fail(f"unexpected arguments {argv[1:]}; flags take the form --name=value (see --helpfull).")

  # ---------------------------------------------------------------- setup --
  horovod_stall_defaults(FLAGS.stall_timeout)
  # Horovod: initialise once (comm.init); everything below knows its rank and
  # node from `world`, validated against --ranks_per_node on every rank.
  try:
    world = comm.init(hvd, FLAGS.ranks_per_node)
    config = flags.build_config(FLAGS, world)  # pure: the same verdict on every rank
  except flags.ConfigError as e:
    fail(str(e))
  elastic_run = config.faults.elastic
  if elastic_run and os.environ.get("HOROVOD_ELASTIC") != "1":
    fail("--elastic needs Horovod's elastic launcher: horovodrun --gloo -np N --min-np M "
         "--host-discovery-script S python train.py --elastic (see docs/faults.md), or drop --elastic.")
  threads = config.run.threads or world.threads_per_rank()
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  heartbeats = os.path.join(config.run.model_dir, "heartbeats")
  if world.is_chief:  # a previous run's heartbeats would name ranks of another job
    shutil.rmtree(heartbeats, ignore_errors=True)
  # Paths can differ between hosts: gather every rank's verdict so all stop together.
  # scanned: what --data_dir holds, read once here and handed to the pipeline.
  # --elastic: no collective before the elastic loop (a rank joining later would meet none
  # there and hang, horovod#2652): each rank judges its own paths.
  problem, scanned = flags.check_paths(config)
  if not elastic_run:
    problem = sync.first_error(hvd, problem)
  if problem:
    fail(problem)
  # A rank that stops making progress ends the job with a line naming it (training/watchdog.py).
  # --elastic: off; a world change renumbers the ranks the heartbeats are named by.
  watchdog = watchdog_lib.Watchdog(world.rank, world.size, 0 if elastic_run else config.faults.stall_timeout,
                                   heartbeats, newest_checkpoint=lambda: manager and manager.newest)
  watchdog.start()
  # Our lines on rank 0 only; TensorFlow's INFO chatter (one per checkpoint save) off.
  logging.set_verbosity(logging.WARNING)
  chief = {"now": world.is_chief}  # --elastic: rank 0 of a new world logs from then on
  log = logger(lambda: chief["now"])
  log("ranks %d (%d per node, %d nodes), %d threads per rank; batch %d per rank%s, global %d",
      world.size, world.local_size, world.cross_size, threads, config.data.batch_size,
      f" x {config.data.accumulation_steps} accumulation steps" if config.data.accumulation_steps > 1 else "",
      config.data.global_batch)

  # ---------------------------------------------------------------- input --
  pipeline.prepare(config.data, world, every_rank=elastic_run)
  if not elastic_run:
    sync.barrier(hvd, "input_ready")  # wait for the node's writer before anyone reads
  watchdog.progress(0, "setup", timed=False)
  # Images leave the pipeline in the model's compute dtype (half the bytes in bf16/fp16).
  compute_dtype = keras.mixed_precision.Policy(precision.POLICIES[config.optim.precision]).compute_dtype
  data = pipeline.build(config.data, world, config.run.seed, dtype=compute_dtype, scanned=scanned,
                        elastic=elastic_run)
  steps_per_epoch = data.steps_per_epoch

  # ---------------------------------------------------------------- model --
  keras.utils.set_random_seed(config.run.seed)
  # Mixed precision (Jia et al.): layers compute in bf16/fp16, variables stay
  # fp32 master weights; the logits layer and BatchNorm statistics stay fp32.
  keras.mixed_precision.set_global_policy(precision.POLICIES[config.optim.precision])
  info = data.info  # classes and image shape as found in --data_dir
  model = build_model(config.model.name, info.num_classes, info.image_shape,
                      zero_init_residual=config.model.zero_init_residual)
  log("model %s: %s trainable parameters, precision %s", config.model.name,
      f"{sum(int(tf.size(v)) for v in model.trainable_variables):,}", config.optim.precision)
  slow = None if tf.config.list_physical_devices("GPU") else precision.slow_on_cpu(
      config.optim.precision, precision.cpu_flags())
  if slow:  # a choice the user may have made for a GPU or an AMX machine: said, not refused
    log("warning: %s", slow)

  # ------------------------------------------------------------ optimizer --
  optimizer = build_optimizer(config.optim, model.trainable_variables)
  loss_scale = precision.for_precision(config.optim.precision)  # identity unless fp16

  def lr_schedule(config, steps_per_epoch):
    """The LR by step for this world's global batch (the linear scaling rule), logged."""
    schedule = schedules.from_epochs(
        base_lr=config.optim.base_lr, global_batch=config.data.global_batch,
        steps_per_epoch=steps_per_epoch, epochs=config.run.epochs,
        warmup_epochs=config.optim.warmup_epochs, warmup_start_lr=config.optim.warmup_start_lr,
        kind=config.optim.lr_schedule, decay_epochs=config.optim.decay_epochs)
    log("%s: LR peak %.4f (%.4f per 256 x global batch %d), %d warmup steps, %s decay over %d steps",
        config.optim.optimizer, schedule.peak_lr, config.optim.base_lr, config.data.global_batch,
        schedule.warmup_steps, schedule.kind, schedule.total_steps)
    return schedule

  # ----------------------------------------------------------- checkpoint --
  # The step lives in the checkpoint, so a restarted run continues the same
  # LR schedule and the same data order. Rank 0 restores, then broadcasts.
  # training/checkpoints.py: saves are atomic, a damaged newest checkpoint is set
  # aside for the one before it, and weights holding inf/NaN are never saved.
  step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
  manager = None  # rank 0's; the watchdog's line names its newest checkpoint
  position = elastic.Position()  # --elastic: where in the data the restored step is
  if world.is_chief:
    manager = checkpoints.Checkpoints(checkpoint, config.run.model_dir, config.run.keep_checkpoints, log)
    try:
      if manager.restore_newest() is not None:
        log("resumed from %s at step %d", manager.newest, int(step_var))
        if config.faults.elastic:
          position = elastic.read_position(config.run.model_dir, int(step_var), steps_per_epoch, log)
    except checkpoints.CheckpointError as e:
      fail(str(e))
    write_json_atomic(os.path.join(config.run.model_dir, flags.CONFIG_FILE),
                      {"identity": flags.checkpoint_identity(config), "config": config.to_json()})
  # Horovod: identical initial weights, BN statistics, optimizer slots and step everywhere
  # (--elastic: the state's sync, at the start of every world).
  variables = model.variables + optimizer.variables + [step_var]
  if not elastic_run:
    sync.broadcast_state(hvd, variables)
  watchdog.progress(int(step_var), "setup", timed=False)
  eval_step = step_lib.make_eval_step(model)
  writers = {}  # rank 0's TensorBoard writer, made by the first world this process is rank 0 in
  floating = [v for v in model.variables + optimizer.variables if tf.as_dtype(v.dtype).is_floating]
  reached = {}  # when a target was reached: seconds since START, step, epoch

  def train_world(world, config, data, course):
    """Train in this world until the run ends, or (--elastic) until the world changes: Horovod
    then raises out of a collective or a commit, and the next world calls this again."""
    nonlocal manager
    info, steps_per_epoch = data.info, data.steps_per_epoch
    chief["now"] = world.is_chief
    if world.is_chief and manager is None:  # --elastic: rank 0 of a new world was not rank 0
      manager = checkpoints.Checkpoints(checkpoint, config.run.model_dir, config.run.keep_checkpoints, log)
    if world.is_chief and not writers:
      writers["tb"] = tf.summary.create_file_writer(os.path.join(config.run.model_dir, "tb"))
    schedule = lr_schedule(config, steps_per_epoch)
    exchange = make_gradient_exchange(hvd, config.comm, world, log)  # hybrid probes the links here
    # The step users run, and the benchmarks time (training/step.py): with
    # --accumulation_steps=K, K micro-batches per rank, then one exchange and one update.
    train_step = step_lib.make_train_step(model, optimizer, exchange, loss_scale, info.num_classes,
                                          config.optim.label_smoothing, agree=sync.agree_max(hvd),
                                          accumulation_steps=config.data.accumulation_steps)
    step = course.step
    watchdog.progress(step, "setup", timed=False)
    progress = Progress(world.is_chief, config.data.global_batch, config.data.step_batch,
                        course.nominal_step(steps_per_epoch), course.last_step(steps_per_epoch),
                        steps_per_epoch, config.run.log_every, writers.get("tb") if world.is_chief else None)

    def save(step) -> bool:
      """Checkpoint at this step: every rank calls it at the same step, rank 0 writes (unless
      a checkpoint of this step exists). False, and nothing written, if any rank's weights,
      optimizer slots or BatchNorm statistics hold inf/NaN.

      The ranks agree on that first (one small allreduce): --base_lr=1e6 on digits blew up the
      BatchNorm moving variance while the loss stayed finite, and rank 0 refusing such a save
      alone would end it and leave the others failing in their next collective. A failed write
      (disk full) ends the run with one sentence; status 2 on rank 0 makes mpirun end the rest.
      """
      if sync.any_rank(hvd, not bool(precision.all_finite(floating)), "nonfinite_state"):
        return False
      if world.is_chief and manager and manager.newest != os.path.join(config.run.model_dir, f"ckpt-{step}"):
        watchdog.mark("checkpoint")
        try:
          if config.faults.elastic:  # where in the data this step is, beside its checkpoint
            elastic.write_position(config.run.model_dir, step, course.position)
          manager.save(step)
        except checkpoints.CheckpointError as e:
          fail(str(e))
        watchdog.progress(step, "checkpoint", timed=False)
      progress.resume()
      return True

    def evaluate(verdict):
      """The held-out metrics (global counts over ranks; None: no held-out split), reported on
      rank 0, and the verdict after them: a target reached ends the run on every rank alike."""
      dataset = data.eval()
      held = None
      shown = course.nominal_step(steps_per_epoch)
      if dataset is not None:
        watchdog.mark("eval")
        # Horovod: one allreduce of the sums [loss, top-1 hits, top-5 hits, count] over ranks.
        allreduce_sum = lambda sums: hvd.allreduce(sums, op=hvd.Sum, name="eval_totals")
        held = evaluation.held_out(eval_step, dataset, allreduce_sum,
                                   on_batch=lambda: watchdog.progress(course.step, "eval", timed=False))
        progress.evaluation(shown, held.top1, held.top5, held.loss)
      e = config.evaluation
      verdict = outcome.after_eval(held.top1 if held else None, held.top5 if held else None,
                                   e.target_top1, e.target_top5, verdict.skipped)
      if verdict.status == outcome.TARGET_REACHED:
        # MLPerf's time to train: from start-up (START, before the model is built) to the end of
        # the evaluation that reached the target, evaluations included.
        reached.update(seconds=round(time.time() - START, 1), step=course.step,
                       epoch=round(course.epochs(steps_per_epoch), 3))
      return held, verdict

    held = None       # the newest held-out metrics
    verdict = outcome.Verdict(outcome.OK, 0)
    nonfinite_state = False  # the divergence was in the weights, found at a checkpoint
    lr = schedule(course.nominal_step(steps_per_epoch))
    eval_every = config.evaluation.eval_every
    log("training steps %d..%d (%d per epoch, %.1f epochs)", course.nominal_step(steps_per_epoch),
        course.last_step(steps_per_epoch), steps_per_epoch, course.last_step(steps_per_epoch) / steps_per_epoch)
    nothing_left = course.finished(steps_per_epoch)
    while not course.finished(steps_per_epoch) and verdict.status == outcome.OK:
      epoch, batches = course.batches(data)
      watchdog.mark("input")
      exhausted = True  # the epoch's batches (this world's share of them) ran out
      for images, labels in batches:
        lr = schedule(course.nominal_step(steps_per_epoch))
        watchdog.mark("step")
        batch_loss, correct, finite, stop = train_step(images, labels, tf.constant(lr, tf.float32),
                                                       tf.constant(stop_request.code, tf.int32))
        # One host read per step, of verdicts identical on every rank: all ranks leave together.
        verdict = outcome.after_step(bool(finite), int(stop), verdict.skipped,
                                     config.optim.precision == "fp16", config.faults.max_skipped_steps)
        if verdict.status == outcome.DIVERGED:
          exhausted = False
          break  # the update was not applied: the weights are those after the step before
        course.after_step(world, config.data)
        step = course.step
        step_var.assign(step)
        watchdog.progress(step)
        progress.step(course.nominal_step(steps_per_epoch), batch_loss, correct, lr)
        if verdict.status != outcome.OK or course.finished(steps_per_epoch):
          exhausted = False
          break
        # Every eval_every steps into the epoch (epoch ends and the last step evaluate below): counted
        # from the epoch's start, a spacing that does not divide the epoch (937 steps, every 235) gives
        # no evaluation a step before the epoch end's.
        into_epoch = course.into_epoch(steps_per_epoch)
        if eval_every and into_epoch and into_epoch % eval_every == 0:
          held, verdict = evaluate(verdict)
          progress.resume()
          if verdict.status != outcome.OK:
            exhausted = False
            break
        watchdog.mark("input")
        if config.run.checkpoint_every and step % config.run.checkpoint_every == 0 and not save(step):
          nonfinite_state, exhausted = True, False
          break
        course.commit(step)  # --elastic: every --elastic_commit_every steps (a world change may interrupt)
      if verdict.status in (outcome.STOPPED, outcome.TARGET_REACHED) or nonfinite_state:
        nonfinite_state = nonfinite_state or not save(step)
      elif verdict.status == outcome.OK and (exhausted or course.finished(steps_per_epoch)):
        if exhausted:
          course.epoch_ended(epoch)
        held, verdict = evaluate(verdict)
        nonfinite_state = not save(step)
        if not nonfinite_state:
          course.commit(step, force=True)
      if nonfinite_state:
        verdict = outcome.Verdict(outcome.DIVERGED, verdict.skipped)
    stop_line = None
    if verdict.status == outcome.STOPPED:
      stop_line = (f"stopped: {stop_request.reason or signals.name(int(stop)) + ' on another rank'} at "
                   f"step {step} (epoch {course.epochs(steps_per_epoch):.2f}); checkpoint "
                   f"{manager.newest if manager else 'written by rank 0'}; run the same command "
                   f"to resume (exit {outcome.STOPPED})")
    elif verdict.status == outcome.DIVERGED:
      skipped = f", {verdict.skipped} overflow-skipped steps in a row" if verdict.skipped > 1 else ""
      what = (f"inf/NaN in the weights or BatchNorm statistics at step {step} (lr {lr:.5g}), found before "
              "checkpointing" if nonfinite_state else
              f"non-finite loss or gradient at step {step + 1} (lr {lr:.5g}{skipped}); the update was not applied")
      stop_line = (f"diverged: {what}; no checkpoint is written; newest good checkpoint "
                   f"{(manager and manager.newest) or 'none'}; lower --base_lr or lengthen "
                   f"--warmup_epochs (exit {outcome.DIVERGED})")
    if held is None and nothing_left:  # nothing left to train: still report
      held, verdict = evaluate(verdict)
    return types.SimpleNamespace(world=world, config=config, verdict=verdict, held=held, step=step,
                                 epochs=course.epochs(steps_per_epoch), stop_line=stop_line,
                                 plan=exchange.plan, images_per_sec=progress.images_per_sec())

  # ----------------------------------------------------------------- loop --
  if not elastic_run:
    result = train_world(world, config, data, course_lib.Steps(int(step_var), config.run))
  else:
    built = {world: (config, data)}  # the world's config and input, built once

    def one_world(state):
      """train_world in the world Horovod has now; after a change, its config and input."""
      now = comm.world(hvd, FLAGS.ranks_per_node)
      if now not in built:
        built.clear()
        try:
          new_config = flags.build_config(FLAGS, now)  # --global_batch_size that no longer divides: ends here
        except flags.ConfigError as e:
          fail(f"the world changed to {now.size} ranks: {e}")
        built[now] = (new_config, pipeline.build(new_config.data, now, new_config.run.seed, dtype=compute_dtype,
                                                 scanned=scanned, elastic=True))
      config_now, data_now = built[now]
      chief["now"] = now.is_chief  # rank 0 of this world logs
      worlds.append(now.size)
      state.position = state.position.world_changed()
      step_var.assign(state.position.step)
      lost = ""
      if len(state.steps_lost) > rollbacks["seen"]:  # a rank was lost: rolled back to the last commit
        rollbacks["seen"] = len(state.steps_lost)
        lost = f"; rolled back {state.steps_lost[-1]} steps to the last commit"
      log("world: %d ranks on %d hosts at step %d (epoch %d, %d of its examples trained%s); batch %d per rank, "
          "global %d", now.size, now.cross_size, state.position.step, state.position.epoch,
          sum(g.size * g.step_batch * g.steps for g in state.position.history), lost, config_now.data.batch_size,
          config_now.data.global_batch)
      course = course_lib.Elastic(state, config_now.faults.elastic_commit_every, config_now.run,
                                  data_now.info.num_train)
      result = train_world(now, config_now, data_now, course)
      result.elastic = {"worlds": worlds, "commits": state.commits, "steps_lost": state.steps_lost,
                        "commit_seconds_median": statistics.median(course.commit_seconds or [0.0])}
      return result

    def keep_commit():
      """Before the world re-forms: rank 0 (of the old world) checkpoints the committed state, so a
      job whose world never re-forms (fewer than --min-np ranks) resumes from it, and says so."""
      step = state.position.step
      if not (chief["now"] and manager):
        return
      try:
        if manager.newest != os.path.join(config.run.model_dir, f"ckpt-{step}"):
          elastic.write_position(config.run.model_dir, step, state.position)
          manager.save(step)
      except checkpoints.CheckpointError as e:
        log("the world is changing; the commit at step %d could not be checkpointed: %s", step, e)
        return
      log("the world is changing (a rank lost or a host added); checkpoint %s holds the commit at step %d; "
          "waiting for Horovod to form the new world (horovodrun waits --elastic-timeout for --min-np ranks)",
          manager.newest, step)

    worlds, rollbacks = [], {"seen": 0}
    # The loss scale too (fp16): a rank that joins must scale as the others do.
    state = elastic.TrainingState(hvd, variables + [loss_scale.scale, loss_scale.good_steps], position)
    result = elastic.run(hvd, one_world, before_reset=keep_commit)(state)

  # -------------------------------------------------------------- summary --
  world, config, verdict, held, step = result.world, result.config, result.verdict, result.held, result.step
  identical = sync.replicas_identical(hvd, model.trainable_variables)
  if not identical:
    logging.warning("ranks hold different weights after training: a rank diverged")
  summary = {
      "status": outcome.STATUS_WORDS[verdict.status],
      "final_top1": held.top1 if held else None, "final_top5": held.top5 if held else None,
      "final_loss": held.loss if held else None,
      "images_per_sec": result.images_per_sec,
      "ranks": world.size, "global_batch": config.data.global_batch,
      "per_rank_batch": config.data.batch_size, "accumulation_steps": config.data.accumulation_steps,
      "steps": step,
      "epochs": round(result.epochs, 3), "wall_seconds": round(time.time() - START, 1),
      "model": config.model.name, "dataset": info.name, "allreduce": config.comm.allreduce,
      "allreduce_plan": result.plan,
      "optimizer": config.optim.optimizer, "precision": config.optim.precision,
      "replicas_identical": identical,
  }
  if config.faults.elastic:  # how the worlds went: make faults' elastic rows read these
    summary["elastic"] = result.elastic
  if verdict.status in (outcome.STOPPED, outcome.DIVERGED):
    summary["stopped_at_step"] = step
  if config.evaluation.has_target:  # time to accuracy (MLPerf): whether, when, at which step
    summary.update(evaluation.target_summary(config.evaluation, reached))
  # -------------------------------------------------------------- export --
  # A model users can serve: rank 0's weights (identical everywhere) with the evaluation
  # preprocessing inside (training/export.py); not for a stopped or diverged run.
  if world.is_chief and config.run.export and verdict.status in (outcome.OK, outcome.TARGET_REACHED):
    if config.data.source is Source.SYNTHETIC:
      log("export skipped: synthetic batches have no image format to serve")
    else:
      watchdog.mark("export")  # tracing the serving function: first-time work, the start-up allowance
      summary["export"] = export.export(model, info, config.run.model_dir)
  if world.is_chief:
    write_json_atomic(os.path.join(config.run.model_dir, "summary.json"), summary)
    if verdict.status in (outcome.STOPPED, outcome.DIVERGED):
      emit(result.stop_line)
    elif config.evaluation.has_target:
      emit(evaluation.target_line(config.evaluation, reached, held, step, result.epochs))
    emit(json.dumps(summary), sys.stdout)
  watchdog.close()
  stop_request.close()
  status = outcome.exit_status(verdict.status)  # a target reached is a success
  if status != outcome.OK:
    # Leave together: with mpirun or Gloo's horovodrun, the first rank to exit
    # non-zero makes the launcher kill the rest, which must not catch rank 0
    # before its checkpoint and summary are written.
    sync.barrier(hvd, "exit")
    for sig in signals.STOP_SIGNALS:  # the launcher's clean-up signal is no longer a request
      signal.signal(sig, signal.SIG_IGN)
    sys.exit(status)


if __name__ == "__main__":
  app.run(main)
