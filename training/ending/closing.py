"""How a run ends on its ranks: summary.json, the SavedModel, the last lines and the exit status
(finish); a run started again after it had ended (finished_before); --eval_only's evaluation of a
checkpoint (evaluate_checkpoint). Every rank calls these; rank 0 alone writes and prints.

What ends before: the stop/divergence/target sentences and summary.json's keys are
training/ending/report.py's (pure); the SavedModel is training/persist/export.py's.
"""
import json
import os
import sys

from absl import logging

from comm import sync
from progress import emit, eval_line, write_json_atomic
from training import course as course_lib, evaluation, ledger as ledger_lib, loop as loop_lib
from training.persist import export
from training.ending import outcome
from training.ending import report, signals


def finish(hvd, result, parts, replicated, mode, info, compression, resumed_step: int = 0) -> None:
  """summary.json, the SavedModel and the last lines on rank 0; every rank exits with the run's
  status. result: modes.WorldRun; parts: training/shape.Parts; replicated: every variable the ranks
  must hold alike (the model's, BatchNorm's agreed statistics included, the optimizer's and the
  step); compression: summary.json's `compression` entry (comm.exchange.Compression.summary);
  resumed_step: the step this process started from (its time block says it has its own clock)."""
  ending, world, config = result.ending, result.world, result.config
  p = parts
  p.ledger.enter("finish")
  identical = sync.replicas_identical(hvd, replicated)
  # Horovod: every rank's ledger to every rank (one allgather), for the slowest rank's parts.
  ranks = hvd.allgather_object(p.ledger.now(), name="time_ledger") if world.size > 1 else []
  if not identical:
    logging.warning("ranks hold different weights after training: a rank diverged")
  serve = lambda: export_or_stop(p.model, info, config, mode, p.saver, p.watchdog, p.stop_request)  # noqa: E731
  if ending.cause == loop_lib.OVER:  # started again after it had ended: summary.json stays as it was
    if world.is_chief:
      finished_before(ending, config, mode, serve)
    p.watchdog.close()
    p.stop_request.close()
    return
  timing = lambda: ledger_lib.block(p.ledger.now(), p.ledger.wall(), p.ledger.images,  # noqa: E731
                                   p.ledger.step_images, ranks, resumed_step, changes=p.ledger.changes)
  first = timing()
  summary = report.summary(ending, config, world, info.name, plan=result.plan,
                           images_per_sec=first["images_per_step_second"], identical=identical,
                           wall_seconds=first["wall_seconds"],
                           extra={**report.time_keys(first), **mode.summary_keys(), "compression": compression,
                                  **report.noise_keys(p.noise, ending), **report.adascale_keys(ending, config, info),
                                  **({"batch_policy": p.controller.summary()} if p.controller else {})})
  # summary.json first: a failed export or a kill during it (minutes for ResNet-50) loses nothing else.
  if world.is_chief:
    write_json_atomic(os.path.join(config.run.model_dir, "summary.json"), summary)
  # A model users can serve: rank 0's weights and statistics (identical everywhere) with the evaluation
  # preprocessing inside (training/persist/export.py); not for a stopped or diverged run.
  if world.is_chief and config.run.export and ending.status in (outcome.OK, outcome.TARGET_REACHED):
    summary.update(p.ledger.during("export", serve))
  if world.is_chief:  # summary.json again with the export's key and the whole time, the last lines, the JSON line
    summary.update(report.time_keys(timing()))
    emit(ledger_lib.line(summary["time"]))
    report.publish(summary, report.final_line(ending, p.stop_request.reason, p.saver.newest, config.evaluation),
                   config.run.model_dir)
  p.watchdog.close()
  p.stop_request.close()
  signals.leave(outcome.exit_status(ending.status), together=lambda: sync.barrier(hvd, "exit"))


def export_or_stop(model, info, config, mode, saver, watchdog, stop_request) -> dict:
  """Rank 0's SavedModel (training/persist/export.py): summary.json's export keys; a stop requested during it
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


def evaluate_checkpoint(hvd, config, world, mode, data, evaluate, saver, position, watchdog, stop_request,
                        ledger) -> None:
  """--eval_only: the restored checkpoint's held-out metrics on this world's ranks, the run's eval line
  and one JSON line on rank 0 (with its time block: training/ledger.py). Its BatchNorm statistics are
  one model's (averaged before every save), so any number of ranks gives the figures the run printed
  at that step."""
  step = position.step  # the restored checkpoint's (training/state.Position, shared from rank 0)
  epochs = course_lib.epochs_as_trained(position, config.run, config.data, data.info.num_train,
                                        config.optim.adascale_base)
  mode.log("evaluating %s (step %d, epoch %.2f) on %d ranks", saver.newest or "the newest checkpoint", step,
           epochs, world.size)
  watchdog.mark("eval")
  ledger.enter("evaluation")
  try:
    held = evaluate(lambda: watchdog.progress(step, "eval", timed=False))
  except evaluation.Stopped as stop:
    mode.log("stopped: %s during the evaluation; nothing was written (exit %d)",
             stop_request.reason or signals.name(stop.code), outcome.STOPPED)
    watchdog.close()
    signals.leave(outcome.STOPPED, together=lambda: sync.barrier(hvd, "exit"))
  ledger.enter("finish")
  if world.is_chief:
    timing = ledger_lib.block(ledger.now(), ledger.wall(), 0, 0)
    emit(eval_line(epochs, held.top1, held.top5, held.loss))
    emit(ledger_lib.line(timing))
    emit(json.dumps({"status": "evaluated", "checkpoint": saver.newest, "step": step, "epoch": round(epochs, 3),
                     "top1": held.top1, "top5": held.top5, "loss": held.loss, "count": held.count,
                     "ranks": world.size, "time": timing}), sys.stdout)
  watchdog.close()
  stop_request.close()
