"""A run around the training step: where it is, how it goes on, what it keeps and how it ends.

The rooms (a change belongs where its subject lives):

  state.py        where a run is: Position (the epoch, its generations, images, updates, tau) and
                  RunState, the variables and position every rank holds alike (a Horovod elastic State)
  course.py       the arithmetic on a position: the step the LR schedule is at, what is due, when it ends
  step.py         the traced train and eval steps (the exchange, accumulation, loss scaling)
  trainer.py      a world's trainer: its exchange, the step at each K (kept), the compression switch
  evaluation.py   the held-out evaluation over every rank's share
  loop.py         the loop at one shape: steps, evaluations, saves and commits in order; hooks.py
                  holds what it tells after each (progress, watchdog, noise scale, time ledger)
  shape.py        a world's run stretch after stretch, and the transitions that change its shape
  modes.py        one world (fixed) or worlds that change (--elastic, over elastic.py's loop)
  assembly.py     what train.py builds a run from: the model, the input, the named cross-rank callables
  ledger.py       where a run's wall time goes
  adaptive/       choosing the batch: the noise scale, the goodput model, the batch controller
  persist/        what outlives a process: saving, checkpoints (atomic), the SavedModel export
  ending/         how a run ends: outcomes and exit codes, stop signals, the stall watchdog, the
                  summary and its lines (report.py), and the closing sequence (closing.py)

Words, one meaning each:
  run          one invocation of train.py, from its start (or resume) to its exit
  world        the ranks Horovod started together; --elastic runs one world after another
  shape        a world, the accumulation steps K and the compression: what a stretch trains at
  stretch      the loop at one shape; a transition ends it (shape.py)
  generation   part of an epoch trained by one world at one step batch (input/sharding.Generation)
  position     where training is in the data (state.Position); the course reads it, the state holds it
  commit       an --elastic copy of the state to host memory, what a lost peer rolls back to
  nominal step the LR schedule's step: epochs trained in this world's steps (AdaScale: tau)
  agree        every rank reaches one verdict, a max over ranks (a stop code, inf/NaN weights, the data)
  decide       rank 0's choice broadcast to every rank (the batch controller's K and compression)
  average      a mean over ranks (BatchNorm's statistics before a save or evaluation; the gradients)
"""
