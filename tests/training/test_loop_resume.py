"""training/loop.py across a restart, in one process as test_loop.py: a completed evaluation is
recorded and not repeated, a run that had ended trains nothing, a stop during an evaluation ends the
run with its step saved and the evaluation runs again when it resumes."""
import dataclasses

from input.sharding import Generation
from test_loop import ONE, UNIT, Run, steps
from training.state import RunState
from training import course, loop
from training.ending import outcome
from training.loop import Policy


def resumed(first: Run, **kwargs) -> Run:
  """A run started again from where `first` ended (the position its checkpoint and records hold)."""
  return Run(the_course=course.Course(RunState.at(first.course.position), first.course.run, ONE, UNIT), **kwargs)


def test_a_completed_evaluation_is_recorded_and_not_repeated_after_a_resume():
  # Stopped at the epoch end after its evaluation completed but before the epoch counted as ended
  # (the first run here stops at step 4 of 8 and the second is told the first's position).
  first = Run(spe=4, epochs=2, stop_at=5)
  ending, events = first.run()
  assert events == steps(1, 2, 3, 4) + [("save", 4), ("eval", 4)] + steps(5) + [("save", 5)]
  assert first.records == [{"step": 4, "top1": 0.1, "top5": 0.9, "loss": 1.0, "count": 100, "seconds": 12.3,
                            "epoch": 1.0}]
  position = dataclasses.replace(first.course.position, epoch=0, current=Generation(1, 1, 4), images=4, step=4,
                                 evaluated=first.records[0])
  again = Run(spe=4, epochs=2, the_course=course.Course(RunState.at(position), first.course.run, ONE, UNIT))
  ending, events = again.run()
  assert events[:3] == [("save", 4), ("evaluated before", 4), ("step", 5)] and ending.cause == loop.FINISHED


def test_a_finished_run_started_again_trains_evaluates_and_saves_nothing():
  first = Run(spe=4, epochs=2)
  first.run()
  ending, events = resumed(first, spe=4, epochs=2).run()
  assert events == [] and (ending.status, ending.cause, ending.held.top1) == (outcome.OK, loop.OVER, 0.1)


def test_a_run_that_met_its_target_started_again_is_over_with_the_time_it_took_then():
  first = Run(spe=4, epochs=3, policy=Policy(eval_every=2, target_top1=0.5), top1=lambda s: 0.6 if s >= 6 else 0.1)
  first.run()
  again = resumed(first, spe=4, epochs=3, policy=Policy(eval_every=2, target_top1=0.5))
  again.loop.clock = lambda: 99.0  # the restart's clock: not what time to target reports
  ending, events = again.run()
  assert events == [] and (ending.status, ending.cause) == (outcome.TARGET_REACHED, loop.OVER)
  assert ending.reached == loop.Reached(seconds=12.3, step=6, epoch=1.5)
  # A higher target: the run trains on from there.
  ending, events = resumed(first, spe=4, epochs=3, policy=Policy(eval_every=2, target_top1=0.9)).run()
  assert events[0] == ("step", 7) and ending.cause == loop.FINISHED


def test_a_stop_during_an_evaluation_ends_the_run_saved_and_the_evaluation_runs_again_on_resume():
  first = Run(spe=4, epochs=2, stop_in_eval={4})
  ending, events = first.run()
  assert events == steps(1, 2, 3, 4) + [("save", 4), ("stopped in eval", 4)]
  assert (ending.status, ending.cause, ending.stop_code, ending.step) == (outcome.STOPPED, loop.SIGNAL, 10, 4)
  assert first.records == [] and first.course.position.epoch == 0  # the epoch's end not counted
  ending, events = resumed(first, spe=4, epochs=2).run()
  assert events[:3] == [("save", 4), ("eval", 4), ("step", 5)] and ending.cause == loop.FINISHED


def test_a_stop_during_a_mid_epoch_evaluation_evaluates_that_step_first_when_resumed():
  first = Run(spe=10, epochs=1, policy=Policy(eval_every=4), stop_in_eval={4})
  ending, events = first.run()
  assert events == steps(1, 2, 3, 4) + [("save", 4), ("stopped in eval", 4)] and ending.status == outcome.STOPPED
  ending, events = resumed(first, spe=10, epochs=1, policy=Policy(eval_every=4)).run()
  assert events[:2] == [("eval", 4), ("step", 5)] and ending.cause == loop.FINISHED


def test_a_stop_during_the_last_evaluation_of_a_finished_run():
  first = Run(spe=4, epochs=1, stop_in_eval={4})
  ending, _ = first.run()
  assert ending.status == outcome.STOPPED
  ending, events = resumed(first, spe=4, epochs=1).run()
  assert events == [("eval", 4)] and (ending.status, ending.cause) == (outcome.OK, loop.NOTHING_LEFT)
