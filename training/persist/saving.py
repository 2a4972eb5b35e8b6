"""The one save path of a run: every rank calls save(step), the ranks agree that the weights
are finite, rank 0 writes (once per step), the position in the data inside the checkpoint, and
each completed evaluation's figures beside it (eval-N.json).

The position lives in the checkpoint (a string variable holding its JSON), so the two are one
file set that appears at once (training/persist/checkpoints.py: the index last) and a kill can
never pair one world's position with another's weights. Older checkpoints keep theirs beside them
in position-N.json, which is still read (training/state.read_legacy).

The loop's checkpoints (training/loop.py) and the elastic commit kept before a world
re-forms (training/modes.py) both come here; finiteness is judged once, here, not again
by training/persist/checkpoints.py.
"""
import dataclasses
import glob
import json
import os
import re

import tensorflow as tf

from optimizers import precision
from progress import write_json_atomic
from training import state as state_lib
from training.persist import checkpoints


class Saver:
  """Rank 0's checkpoints behind one save() that every rank calls at the same step.

  checkpoint: the tf.train.Checkpoint of the run; floating: the variables whose inf/NaN refuse
  a save (weights, optimizer slots, BatchNorm statistics); any_rank(flag) -> whether flag is
  true on any rank (comm.sync.any_rank over Horovod; None: one process decides alone).
  """

  def __init__(self, checkpoint, directory: str, keep: int, log, floating, any_rank=None, optional=(),
               powersgd=None, average=None, background: bool = False):
    self.checkpoint, self.directory, self.keep, self.log = checkpoint, directory, keep, log
    self.background = background  # checkpoints.Checkpoints writes in the background
    # The position, inside the checkpoint; absent from checkpoints written before (read from their file).
    self.position = tf.Variable("", dtype=tf.string, trainable=False, name="position")
    checkpoint.position = self.position
    self.optional = tuple(optional) + (checkpoints.OptionalPart("position", ""),)  # checkpoints.OptionalPart's
    self.floating, self.any_rank = list(floating), any_rank
    self.powersgd, self.average = powersgd, average
    self.manager = None  # rank 0's checkpoints.Checkpoints, made by writer()

  @classmethod
  def of_model(cls, model, optimizer, run, log, any_rank=None, loss_scale=None, powersgd=None, average=None):
    """(the step variable, a Saver of model, optimizer and step): run is flags.config's RunConfig.
    The step lives in the checkpoint, so a restarted run continues the same LR schedule and data order.
    loss_scale: fp16's DynamicLossScale, checkpointed too (a resumed run restarting at 2^15 could
    count its first overflow-skipped steps as a divergence); not in fp32/bf16 checkpoints, so an
    fp16 run resumed from one of those (or from an fp16 one written before the scale was kept)
    restores the rest and says the scale starts again.

    powersgd: --compression=powersgd's comm.powersgd.PowerSGD, whose Qs and residuals are
    checkpointed too, under a name that holds its rank: a checkpoint without them (another
    --compression, or another --powersgd_rank, whose shapes differ) restores the rest and says the
    state starts afresh. average(tensors) -> their means over ranks (Horovod; None: one process):
    each save first averages the residuals on every rank (comm/powersgd.py: no later update
    changes), so rank 0's checkpoint, which every rank resumes from, is every rank's."""
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    parts = dict(model=model, optimizer=optimizer, step=step)
    optional = []
    if loss_scale is not None and loss_scale.enabled:
      optional.append(checkpoints.OptionalPart(
          "loss_scale", f"the fp16 loss scale starts again at {float(loss_scale.scale):g}: {{checkpoint}} holds "
          "none (it was written at another --precision, or before the scale was kept)"))
      parts["loss_scale"] = tf.train.Checkpoint(scale=loss_scale.scale, good_steps=loss_scale.good_steps)
    floating = [v for v in model.variables + optimizer.variables if tf.as_dtype(v.dtype).is_floating]
    if powersgd is not None:
      name = f"powersgd_rank{powersgd.rank}"
      optional.append(checkpoints.OptionalPart(
          name, f"PowerSGD's residuals start at zero and its Qs afresh: {{checkpoint}} holds none at rank "
          f"{powersgd.rank} (it was written without --compression=powersgd, or at another --powersgd_rank)"))
      parts[name] = powersgd
      floating += powersgd.variables  # a NaN residual would poison every step after a resume
    checkpoint = tf.train.Checkpoint(**parts)
    return step, cls(checkpoint, run.model_dir, run.keep_checkpoints, log, floating, any_rank, optional,
                     powersgd, average, background=run.background_checkpoints)

  def writer(self) -> checkpoints.Checkpoints:
    """Become the rank that writes: rank 0 at start-up, and (--elastic) rank 0 of a new world."""
    if self.manager is None:
      self.manager = checkpoints.Checkpoints(self.checkpoint, self.directory, self.keep, self.log, self.optional,
                                             background=self.background)
    return self.manager

  def wait(self) -> None:
    """Return once the checkpoint rank 0 is writing in the background is in the directory (before a
    summary names it, the export reads it, or the world re-forms); its CheckpointError if it failed."""
    if self.manager is not None:
      self.manager.wait()

  @property
  def newest(self) -> str | None:
    """The newest good checkpoint this rank wrote or restored (None: not the writer, or none)."""
    return self.manager.newest if self.manager else None

  def save(self, step: int, position: "state_lib.Position | None" = None, agree: bool = True) -> bool:
    """Checkpoint `step`, with its position: False, and nothing written, if some rank's weights hold inf/NaN.

    agree: the ranks agree on that first (one small allreduce): --base_lr=1e6 on digits blew
    up the BatchNorm moving variance while the loss stayed finite, and rank 0 refusing such a
    save alone would end it and leave the others failing in their next collective. agree=False
    (a world that is breaking up: no collective can be trusted) judges this rank's alone.
    A checkpoint of this step already written is not written again. A failed write (disk full)
    raises checkpoints.CheckpointError. PowerSGD's residuals are averaged over ranks first (a
    collective, so only when agree; without it rank 0 writes its own).
    """
    bad = not bool(precision.all_finite(self.floating))
    if agree and self.any_rank is not None:
      bad = self.any_rank(bad)
    if bad:
      return False
    if self.powersgd is not None and agree and self.average is not None:  # every rank, before rank 0 writes
      self.powersgd.average_residuals(self.average)
    if self.manager and self.manager.newest != os.path.join(self.directory, f"{checkpoints.PREFIX}-{step}"):
      self.position.assign(json.dumps(position.to_json()) if position is not None else "")
      _remove(self._evaluated_path(step))  # another checkpoint N: an older one's figures are not its
      self.manager.save(step, variables=())  # judged above, on every rank
      self._sweep()
    return True

  def restored_position(self, step: int) -> "state_lib.Position | None":
    """The position of the checkpoint just restored (step: its number), with the evaluation completed
    at it if one was (eval-N.json); None for a checkpoint written before positions were kept."""
    text = self.position.numpy().decode()
    position = state_lib.Position.from_json(json.loads(text)) if text else state_lib.read_legacy(self.directory, step)
    if position is None:
      return None
    record = self._read_evaluated(step)
    return dataclasses.replace(position, evaluated=record) if record and not position.evaluated else position

  def record_evaluation(self, step: int, record: dict) -> None:
    """Rank 0 (the writer): eval-N.json, the figures of the evaluation completed at checkpoint N
    (written after it: a kill first only repeats the evaluation). A full disk loses the record,
    not the run: the evaluation is repeated after a resume."""
    if not self.manager or not os.path.exists(os.path.join(self.directory, f"{checkpoints.PREFIX}-{step}.index")):
      return
    try:
      write_json_atomic(self._evaluated_path(step), record)
    except OSError as e:
      self.log("the evaluation at step %d is not recorded (%s); a resume evaluates it again", step,
               checkpoints.short_reason(e))

  def _evaluated_path(self, step: int) -> str:
    return os.path.join(self.directory, f"eval-{step}.json")

  def _read_evaluated(self, step: int) -> dict | None:
    try:
      with open(self._evaluated_path(step)) as fh:
        record = json.load(fh)
    except (OSError, ValueError):
      return None
    return record if record.get("step") == step else None

  def _sweep(self) -> None:
    """The records of checkpoints no longer kept go with them (and the position files of older ones)."""
    kept = {n for n in checkpoints.on_disk(self.directory)}
    for path in glob.glob(os.path.join(self.directory, "eval-*.json")) + state_lib.legacy_files(self.directory):
      number = re.search(r"-(\d+)\.json$", path)
      if number and int(number.group(1)) not in kept:
        _remove(path)


def _remove(path: str) -> None:
  try:
    os.remove(path)
  except OSError:
    pass
