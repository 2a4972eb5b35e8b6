"""What a run says when it ends: the stop and divergence sentences and summary.json, from the
loop's Ending (training/loop.py). Pure: test_faults, test_slurm and make faults parse these lines.
"""
import dataclasses
import json
import os
import sys

from progress import emit, write_json_atomic
from training import evaluation, loop
from training.ending import outcome, signals

PEER_GRACE_SECONDS = 3  # see peer_lost


def stop_line(reason: str, code: int, step: int, epochs: float, checkpoint: str | None) -> str:
  """The line of a run stopped by a signal. reason: this rank's own (empty when the request came
  from another rank: the agreed code names it); checkpoint: the one written at the stop."""
  why = reason or f"{signals.name(code)} on another rank"
  return (f"stopped: {why} at step {step} (epoch {epochs:.2f}); checkpoint {checkpoint or 'written by rank 0'}; "
          f"run the same command to resume (exit {outcome.STOPPED})")


def over_line(ending: loop.Ending, targets) -> str:
  """The line of a run started again after it had ended (loop.OVER): what it ended with, that
  nothing was trained and summary.json is kept, and what would train on."""
  held = ending.held
  metrics = f"held-out top1 {held.top1:.4f}" if held else "no held-out split"
  if ending.reached:
    return (f"this run already reached its target at step {ending.step} (epoch {ending.epochs:.2f}), "
            f"{ending.reached.seconds:.1f} s after its start-up, {metrics}; nothing trained, summary.json kept "
            "(a higher --target_top1/--target_top5 trains on)")
  return (f"this run already finished at step {ending.step} (epoch {ending.epochs:.2f}), {metrics}; nothing "
          "trained, summary.json kept (more --epochs or --max_steps trains on)")


def startup_stop_line(reason: str, code: int) -> str:
  """The line of a run stopped before its first step (a notice during start-up's data checks)."""
  why = reason or f"{signals.name(code)} on another rank"
  return (f"stopped: {why} during start-up; nothing was trained or written; run the same command to resume "
          f"(exit {outcome.STOPPED})")


def export_stop_line(reason: str, newest: str | None) -> str:
  """The line of a run stopped during its export (after its summary.json and checkpoint were written)."""
  return (f"stopped: {reason or 'a stop request'} during the export; checkpoint {newest or 'none'} and "
          f"summary.json are kept, and the same command exports (exit {outcome.STOPPED})")


def divergence_line(cause: str, step: int, lr: float, skipped: int, newest: str | None) -> str:
  """The line of a diverged run. cause: loop.NONFINITE_STEP (the step's loss or gradient; its
  update was not applied) or loop.NONFINITE_WEIGHTS (found before a checkpoint); newest: the
  newest good checkpoint."""
  if cause == loop.NONFINITE_WEIGHTS:
    what = (f"inf/NaN in the weights or BatchNorm statistics at step {step} (lr {lr:.5g}), "
            "found before checkpointing")
  else:
    row = f", {skipped} overflow-skipped steps in a row" if skipped > 1 else ""
    what = f"non-finite loss or gradient at step {step + 1} (lr {lr:.5g}{row}); the update was not applied"
  return (f"diverged: {what}; no checkpoint is written; newest good checkpoint {newest or 'none'}; "
          f"lower --base_lr or lengthen --warmup_epochs (exit {outcome.DIVERGED})")


def peer_lost_line(reason: str, newest: str | None) -> str:
  """The line of a rank whose collective failed under it (comm.sync.peer_failure's reason)."""
  return (f"error: a collective failed: another rank died or became unreachable ({reason.split('. ')[0][:100]}); "
          f"this rank stops too (exit {outcome.PEER_LOST}); look for the first rank that ended in the launcher's "
          f"output; resume with the same command (newest checkpoint {newest or 'none'})")


def peer_lost(reason: str, stop_request, newest: str | None) -> None:
  """End this rank after a collective failed under it (comm.sync.peer_failure's reason): one line,
  exit PEER_LOST, instead of a Horovod traceback ("Horovod has been shut down ...").

  It waits for the launcher's SIGTERM first, at most PEER_GRACE_SECONDS: when the peer ended on
  purpose (rank 0 failing a save on a full disk exits 2), that status reaches the launcher first
  and its line stays the first one (without the wait, the survivor's exit 5 came first); Gloo's
  horovodrun SIGKILLs 5 s after its SIGTERM. os._exit: Horovod's exit-time shutdown would wait on
  the dead peer's transport.
  """
  stop_request.wait(PEER_GRACE_SECONDS)
  emit(peer_lost_line(reason, newest))
  sys.stdout.flush()
  os._exit(outcome.PEER_LOST)


def final_line(ending: loop.Ending, reason: str, newest: str | None, targets) -> str | None:
  """The line before the summary: why it stopped or diverged, or (with a target) whether the
  target was reached; None for a plain finished run. targets: the run's EvalConfig."""
  if ending.status == outcome.STOPPED:
    return stop_line(reason, ending.stop_code, ending.step, ending.epochs, newest)
  if ending.status == outcome.DIVERGED:
    return divergence_line(ending.cause, ending.step, ending.lr, ending.skipped, newest)
  if targets.has_target:
    return evaluation.target_line(targets, reached(ending), ending.held, ending.step, ending.epochs)
  return None


def publish(summary: dict, line: str | None, model_dir: str) -> None:
  """Rank 0's last words: <model_dir>/summary.json, the line before it (if any) on stderr, the
  summary as one JSON line on stdout (what scripts read)."""
  write_json_atomic(os.path.join(model_dir, "summary.json"), summary)
  if line:
    emit(line)
  emit(json.dumps(summary), sys.stdout)


def reached(ending: loop.Ending) -> dict:
  """When the target was met ({} if not)."""
  return dataclasses.asdict(ending.reached) if ending.reached else {}


def summary(ending: loop.Ending, config, world, dataset: str, *, plan, images_per_sec, identical: bool,
            wall_seconds: float, extra: dict) -> dict:
  """summary.json (and the JSON line on stdout): how the run ended and what it ran.
  config/world: the last world's (--elastic: the batch may have changed); extra: more keys."""
  held = ending.held
  out = {
      "status": outcome.STATUS_WORDS[ending.status],
      "final_top1": held.top1 if held else None, "final_top5": held.top5 if held else None,
      "final_loss": held.loss if held else None,
      "images_per_sec": images_per_sec,
      "ranks": world.size, "global_batch": config.data.global_batch,
      "per_rank_batch": config.data.batch_size, "accumulation_steps": config.data.accumulation_steps,
      "steps": ending.step, "epochs": round(ending.epochs, 3), "images_trained": ending.images,
      "wall_seconds": round(wall_seconds, 1),
      "model": config.model.name, "dataset": dataset, "allreduce": config.comm.allreduce,
      "allreduce_plan": plan, "optimizer": config.optim.optimizer, "precision": config.optim.precision,
      "replicas_identical": identical,
      **extra,
  }
  if ending.status in (outcome.STOPPED, outcome.DIVERGED):
    out["stopped_at_step"] = ending.step
  if config.evaluation.has_target:  # time to accuracy (MLPerf): whether, when, at which step
    out.update(evaluation.target_summary(config.evaluation, reached(ending)))
  return out


def time_keys(time_block: dict) -> dict:
  """summary.json's `time` (training/ledger.block) and the keys read off it: wall_seconds;
  images_per_sec, the step rate (images a second of the steps group: an epoch's start, evaluations,
  checkpoints and a first trace left out); images_per_wall_second, images over the whole wall."""
  return {"wall_seconds": round(time_block["wall_seconds"], 1), "images_per_sec": time_block["images_per_step_second"],
          "images_per_wall_second": time_block["images_per_wall_second"], "time": time_block}


def noise_keys(noise, ending: loop.Ending) -> dict:
  """summary.json's noise_scale (training/noise_scale.NoiseScale.summary): the estimates at the
  end, and at the target when it was reached (the run ends there, so the two are the same
  step); {} when not asked for or never measured (one rank without accumulation)."""
  if noise is None or not noise.steps:
    return {}
  reached = ending.reached if ending.status == outcome.TARGET_REACHED else None
  return {"noise_scale": noise.summary(at_target=noise.snapshot(reached.step) if reached else None)}


def adascale_keys(ending: loop.Ending, config, info) -> dict:
  """summary.json's adascale (--lr_scaling=adascale): the base batch, the last world's scale S and
  the last step's gain r, tau, and both clocks in passes over the training split: the base-batch
  epochs the schedule counted (tau x B0) and the data trained (images_trained). The summary's
  `epochs` is the schedule's in whole batches of each world (a batch's remainder of the split
  dropped), so it can exceed base_epochs by that remainder."""
  if ending.gain is None:
    return {}
  base = config.optim.base_batch
  return {"adascale": {"base_batch": base, "scale": config.data.global_batch / base, "gain": ending.gain,
                       "tau": ending.tau, "base_epochs": round(ending.tau * base / info.num_train, 3),
                       "data_epochs": round(ending.images / info.num_train, 3)}}
