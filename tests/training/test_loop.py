"""training/loop.py in one process: a fake step, data, evaluation and save drive the real Loop
through every exit, and each test asserts the exact sequence of steps, evaluations, saves and
commits (what a launch of train.py would take a minute to show, here in milliseconds)."""
import types

import pytest

from training import course, evaluation, hooks, loop
from training.ending import outcome, report
from input.sharding import Generation
from training.state import Position, RunState
from training.evaluation import HeldOut
from training.loop import Loop, Policy, Work
from training.step import StepOut


class Data:
  """steps_per_epoch batches an epoch; `short` maps an epoch to the batches it really has."""

  def __init__(self, steps_per_epoch, short=None, num_train=None):
    self.steps_per_epoch, self.short = steps_per_epoch, short or {}
    self.info = types.SimpleNamespace(num_train=num_train or steps_per_epoch)

  def train_epoch(self, epoch, first_step=0, count=None, plan=None):
    first = plan if plan is not None else first_step
    have = self.short.get(epoch, self.steps_per_epoch)
    n = max(0, have - first)
    return [((epoch, first + i), None) for i in range(n if count is None else min(n, count))]

  def elastic_plan(self, epoch, generations):
    return sum(g.steps for g in generations)  # the steps this epoch has had: the fake deals the rest


ONE = types.SimpleNamespace(size=1)
UNIT = types.SimpleNamespace(step_batch=1, global_batch=1)  # one image a step: images count steps


def fixed(start, spe, epochs, max_steps=0):
  """A fixed run's course at step `start` (one world, one image a step)."""
  epoch, offset = divmod(start, spe)
  position = Position(epoch=epoch, current=Generation(1, 1, offset) if offset else None, images=start, step=start)
  return course.Course(RunState.at(position), types.SimpleNamespace(epochs=epochs, max_steps=max_steps), ONE, UNIT)


class Run:
  """A fake world around the real Loop: what it did, in order, in `events`.

  nonfinite: steps (1-based, the step being taken) whose update is not applied; stop_at: the
  step whose agreement returns a stop (another rank's request, signal 15); stop_now: this
  rank's own request from the start; top1: step -> held-out top-1; bad_saves: steps whose
  weights hold inf/NaN.
  """

  def __init__(self, spe=4, epochs=2.0, max_steps=0, start=0, policy=Policy(), nonfinite=(), stop_at=None,
               stop_now=0, top1=lambda step: 0.1, bad_saves=(), data=None, the_course=None, max_evals=50,
               resize=None, averaging=False, stop_in_eval=()):
    self.stop_in_eval, self.records = set(stop_in_eval), []
    self.events, self.nonfinite, self.stop_at, self.top1 = [], set(nonfinite), stop_at, top1
    self.bad_saves, self.code, self.max_evals = set(bad_saves), stop_now, max_evals
    self.data = data or Data(spe)
    self.course = the_course or fixed(start, spe, epochs, max_steps)
    self.hook = Recorder(self.events)
    work = Work(evaluate=self.evaluate, save=self.save, schedule=lambda s: 0.5 + s, stop_code=lambda: self.code,
                clock=lambda: 12.34, resize=resize, record=lambda step, record: self.records.append(record),
                average_statistics=(lambda: self.events.append(("average", self.course.step))) if averaging
                else (lambda: None))
    self.loop = Loop(self.course, self.data, self.step, work=work, policy=policy, hooks=[self.hook])

  def step(self, images, labels, lr, stop):
    taking = self.course.step + 1
    agreed = 15 if taking == self.stop_at else stop
    return StepOut(loss=1.0, correct=2.0, finite=taking not in self.nonfinite, stop=agreed, sq_small=0.0, sq_big=0.0)

  def evaluate(self, on_batch):
    if len([e for e in self.events if e[0] == "eval"]) >= self.max_evals:
      raise RuntimeError("the loop evaluated without end")
    on_batch()
    step = self.course.step
    if step in self.stop_in_eval:  # a stop agreed between its batches (training/evaluation.py)
      self.events.append(("stopped in eval", step))
      raise evaluation.Stopped(10)
    return HeldOut(top1=self.top1(step), top5=0.9, loss=1.0, count=100)

  def save(self, step):
    return step not in self.bad_saves

  def run(self):
    ending = self.loop.run()
    return ending, [e for e in self.events if e[0] != "before"]


class Recorder(hooks.Hook):
  def __init__(self, events):
    self.events = events

  def before(self, phase, step):
    self.events.append(("before", phase, step))

  def after_step(self, step, nominal, out, lr):
    self.events.append(("step", step))

  def after_eval(self, step, nominal, held):
    self.events.append(("eval", step))

  def after_save(self, step):
    self.events.append(("save", step))

  def after_commit(self, step):
    self.events.append(("commit", step))

  def evaluated_before(self, step, nominal, held):
    self.events.append(("evaluated before", step))


def steps(*numbers):
  return [("step", n) for n in numbers]


def test_a_run_trains_to_its_end_evaluating_and_saving_at_each_epoch_end():
  ending, events = Run(spe=4, epochs=2).run()
  assert events == steps(1, 2, 3, 4) + [("save", 4), ("eval", 4)] + steps(5, 6, 7, 8) + [("save", 8), ("eval", 8)]
  assert (ending.status, ending.cause, ending.step, ending.epochs) == (outcome.OK, loop.FINISHED, 8, 2.0)
  assert ending.held.top1 == 0.1 and ending.lr == 0.5 + 7 and ending.reached is None


def test_eval_every_epochs_evaluates_every_nth_epoch_end_and_the_runs_end_saving_at_each():
  # MLPerf's reference evaluates every 4 epochs: 5 epochs of 2 steps at N = 2 evaluate after epochs
  # 2 and 4 and at the run's end (epoch 5), and save at every epoch's end.
  _, events = Run(spe=2, epochs=5, policy=Policy(eval_every_epochs=2)).run()
  assert [e for e in events if e[0] == "save"] == [("save", s) for s in (2, 4, 6, 8, 10)]
  assert [e for e in events if e[0] == "eval"] == [("eval", s) for s in (4, 8, 10)]


def test_evaluations_count_steps_into_the_epoch_when_the_spacing_does_not_divide_it():
  # 10 steps an epoch, every 4: at 4 and 8 into each epoch, and at its end (none at 12 = 2 into epoch 1).
  ending, events = Run(spe=10, epochs=2, policy=Policy(eval_every=4)).run()
  assert [e for e in events if e[0] == "eval"] == [("eval", s) for s in (4, 8, 10, 14, 18, 20)]
  # Each evaluation saved first: a stop during one loses nothing (the loop's docstring).
  assert [e for e in events if e[0] == "save"] == [("save", s) for s in (4, 8, 10, 14, 18, 20)]


def test_an_evaluation_due_within_half_an_interval_of_an_evaluated_epoch_end_is_left_to_it():
  # 10 steps an epoch, every 3: the one due at 9 is 1 step before the end's (make slow-links evaluated
  # 2 steps apart at every epoch end); where the epoch's end does not evaluate, it stays.
  _, events = Run(spe=10, epochs=2, policy=Policy(eval_every=3)).run()
  assert [e for e in events if e[0] == "eval"] == [("eval", s) for s in (3, 6, 10, 13, 16, 20)]
  _, events = Run(spe=10, epochs=2, policy=Policy(eval_every=3, eval_every_epochs=2)).run()
  assert [e for e in events if e[0] == "eval"] == [("eval", s) for s in (3, 6, 9, 13, 16, 20)]


def test_an_evaluation_on_a_checkpoint_every_step_comes_after_its_save():
  # A SIGTERM during a mid-epoch evaluation (ImageNet's take minutes) must find its step saved.
  _, events = Run(spe=10, epochs=1, policy=Policy(eval_every=4, checkpoint_every=4)).run()
  assert events[:6] == steps(1, 2, 3, 4) + [("save", 4), ("eval", 4)]


def test_checkpoint_every_counts_the_runs_steps_and_max_steps_ends_mid_epoch():
  ending, events = Run(spe=4, epochs=9, max_steps=6, policy=Policy(checkpoint_every=3)).run()
  assert events == (steps(1, 2, 3) + [("save", 3), ("step", 4), ("save", 4), ("eval", 4)] + steps(5, 6)
                    + [("save", 6), ("eval", 6)])
  assert (ending.cause, ending.step) == (loop.FINISHED, 6)


def test_every_batch_is_read_under_the_input_phase_even_after_a_save():
  # The watchdog names the phase a rank is stuck in: a reader stuck after a checkpoint is 'input';
  # the first batch of a new epoch is 'epoch' (its iterator runs out, the next is built).
  r = Run(spe=4, epochs=2, policy=Policy(checkpoint_every=3))
  r.run()
  marks = [e for e in r.events if e[0] == "before" or e[0] == "step"]
  for i, event in enumerate(marks):
    if event[:2] == ("before", "step"):
      want = "epoch" if event[2] == 4 else "input"
      assert marks[i - 1][:2] == ("before", want), marks[max(0, i - 3):i + 1]
  # After the epoch's last step, the iterator running out is 'epoch' work too, before the save.
  assert ("step", 4) in marks and marks[marks.index(("step", 4)) + 1] == ("before", "epoch", 4)


def test_a_target_met_mid_epoch_ends_the_run_there_saved_before_its_evaluation():
  run = Run(spe=4, epochs=3, policy=Policy(eval_every=2, target_top1=0.5), top1=lambda s: 0.6 if s >= 6 else 0.1)
  ending, events = run.run()
  assert events == (steps(1, 2) + [("save", 2), ("eval", 2)] + steps(3, 4) + [("save", 4), ("eval", 4)] + steps(5, 6)
                    + [("save", 6), ("eval", 6)])
  assert (ending.status, ending.cause, ending.step) == (outcome.TARGET_REACHED, loop.TARGET, 6)
  assert ending.reached == loop.Reached(seconds=12.3, step=6, epoch=1.5) and ending.held.top1 == 0.6


def test_a_target_met_at_an_epoch_end():
  ending, events = Run(spe=4, epochs=3, policy=Policy(target_top1=0.5), top1=lambda s: 0.6 if s >= 8 else 0.1).run()
  # Saved before the evaluation that met it, and not saved (nor agreed on) again on the way out.
  assert events == steps(1, 2, 3, 4) + [("save", 4), ("eval", 4)] + steps(5, 6, 7, 8) + [("save", 8), ("eval", 8)]
  assert (ending.status, ending.step, ending.reached.step) == (outcome.TARGET_REACHED, 8, 8)


def test_a_target_met_at_the_last_evaluation_is_reached():
  ending, events = Run(spe=4, epochs=1, policy=Policy(target_top1=0.5), top1=lambda s: 0.6).run()
  assert events == steps(1, 2, 3, 4) + [("save", 4), ("eval", 4)]
  assert (ending.status, ending.cause) == (outcome.TARGET_REACHED, loop.TARGET)


def test_a_stop_after_a_step_saves_that_step_and_nothing_else():
  ending, events = Run(spe=4, epochs=2, stop_at=3).run()
  assert events == steps(1, 2, 3) + [("save", 3)]
  assert (ending.status, ending.cause, ending.step, ending.stop_code) == (outcome.STOPPED, loop.SIGNAL, 3, 15)


def test_a_stop_requested_before_the_first_step_is_agreed_in_it():
  # The request is passed to the first step, whose agreement returns it: the run stops after step 1.
  ending, events = Run(spe=4, epochs=2, stop_now=10).run()
  assert events == steps(1) + [("save", 1)]
  assert (ending.status, ending.step, ending.stop_code) == (outcome.STOPPED, 1, 10)


def test_a_stop_requested_during_an_evaluation_stops_after_the_next_step():
  run = Run(spe=4, epochs=2)
  run.loop.evaluate_fn = lambda on_batch: (setattr(run, "code", 2), run.evaluate(on_batch))[1]
  ending, events = run.run()
  assert events == steps(1, 2, 3, 4) + [("save", 4), ("eval", 4), ("step", 5), ("save", 5)]
  assert (ending.status, ending.step, ending.stop_code) == (outcome.STOPPED, 5, 2)


def test_a_stop_at_the_last_step_is_a_finished_run():
  # Nothing is left to resume: the final evaluation and save (and the export) as any finished run.
  ending, events = Run(spe=4, epochs=2, stop_at=8).run()
  assert events[-3:] == [("step", 8), ("save", 8), ("eval", 8)]
  assert (ending.status, ending.cause, ending.step) == (outcome.OK, loop.FINISHED, 8)


def test_an_fp32_non_finite_step_ends_the_run_with_the_weights_of_the_step_before():
  ending, events = Run(spe=4, epochs=2, nonfinite={6}).run()
  assert events == steps(1, 2, 3, 4) + [("save", 4), ("eval", 4), ("step", 5)]
  assert (ending.status, ending.cause, ending.step, ending.lr) == (outcome.DIVERGED, loop.NONFINITE_STEP, 5, 5.5)


@pytest.mark.parametrize("bad, want_status, want_events", [
    ({3, 4}, outcome.OK, steps(1, 2, 3, 4) + [("save", 4), ("eval", 4)]),   # 2 skipped in a row: go on
    ({2, 3, 4}, outcome.DIVERGED, steps(1, 2, 3)),                          # the 3rd in a row: diverged
    ({4, 5, 6}, outcome.DIVERGED, steps(1, 2, 3, 4) + [("save", 4), ("eval", 4), ("step", 5)]),  # counted across an evaluation
])
def test_fp16_overflows_skip_steps_until_the_limit(bad, want_status, want_events):
  ending, events = Run(spe=4, epochs=2, max_steps=4 if bad == {3, 4} else 0, nonfinite=bad,
                       policy=Policy(fp16=True, max_skipped=3)).run()
  assert (ending.status, events) == (want_status, want_events)
  if want_status == outcome.DIVERGED:
    assert (ending.cause, ending.skipped, ending.step) == (loop.NONFINITE_STEP, 3, max(bad) - 1)


@pytest.mark.parametrize("policy, stop_at, top1, want_events", [
    (Policy(), None, 0.1, steps(1, 2, 3, 4) + [("save", 4)]),                                    # an epoch end
    (Policy(checkpoint_every=2), None, 0.1, steps(1, 2) + [("save", 2)] + steps(3, 4) + [("save", 4)]),  # periodic
    (Policy(), 3, 0.1, steps(1, 2, 3) + [("save", 3)]),                                           # at a stop
    (Policy(eval_every=2, target_top1=0.5), None, 0.9, steps(1, 2) + [("save", 2)]),  # before an evaluation
])
def test_inf_or_nan_weights_found_at_a_save_end_the_run_as_a_divergence(policy, stop_at, top1, want_events):
  bad = {want_events[-1][1]}
  ending, events = Run(spe=4, epochs=3, policy=policy, stop_at=stop_at, top1=lambda s: top1, bad_saves=bad).run()
  assert events == want_events
  assert (ending.status, ending.cause, ending.step) == (outcome.DIVERGED, loop.NONFINITE_WEIGHTS, want_events[-1][1])


def test_a_target_met_then_inf_weights_at_its_save_is_not_reported_as_reached():
  run = Run(spe=4, epochs=3, policy=Policy(eval_every=2, target_top1=0.5), top1=lambda s: 0.9, bad_saves={2})
  ending, _ = run.run()
  keys = report.summary(ending, SUMMARY_CONFIG, WORLD, "digits", plan=[], images_per_sec=None, identical=True,
                        wall_seconds=1.0, extra={})
  assert keys["status"] == "diverged" and keys["target_reached"] is False and keys["time_to_target_seconds"] is None
  assert report.final_line(ending, "", None, SUMMARY_CONFIG.evaluation).startswith("diverged: inf/NaN in the weights")


def test_a_run_with_nothing_left_to_train_evaluates_and_saves_nothing():
  ending, events = Run(spe=4, epochs=2, start=8).run()
  assert events == [("eval", 8)]
  assert (ending.status, ending.cause, ending.step) == (outcome.OK, loop.NOTHING_LEFT, 8)


def test_an_epoch_that_gives_no_batch_ends_the_run_with_a_sentence():
  # Epoch 1 has none of its 4 batches (records lost): the pass finds nothing at step 4, and must
  # not end epoch after epoch with no step, evaluating and saving step 4 each time.
  run = Run(spe=4, epochs=3, data=Data(4, short={1: 0}))
  with pytest.raises(loop.NoProgress, match=r"^epoch 1 gave no batch at step 4 of 12, "):
    run.run()
  assert [e for e in run.events if e[0] == "eval"] == [("eval", 4)]


def test_a_short_epoch_ends_early_and_the_next_goes_on():
  # Epoch 1 gives 2 of its 4 batches: it ends there (saved, evaluated) and epoch 2 trains from its start.
  ending, events = Run(spe=4, epochs=3, data=Data(4, short={1: 2})).run()
  assert [e for e in events if e[0] == "eval"] == [("eval", 4), ("eval", 6), ("eval", 10)]
  assert (ending.cause, ending.step, ending.epochs) == (loop.FINISHED, 10, 3.0)


class FakeState:
  """What a committing course.Course reads of a RunState."""

  def __init__(self):
    self.position, self.saves, self.checks = Position(), 0, 0

  def save(self):
    self.saves += 1

  def check_host_updates(self):
    self.checks += 1


def elastic_course(state, commit_every=3, epochs=2.0, max_steps=0):
  return course.Course(state, types.SimpleNamespace(epochs=epochs, max_steps=max_steps), ONE, UNIT,
                       commit_every=commit_every)


def test_the_statistics_are_averaged_once_before_each_step_is_saved_evaluated_or_committed():
  # One model (comm.sync.average_statistics) before whatever measures, saves or commits it: once a step.
  _, events = Run(spe=4, epochs=1, policy=Policy(eval_every=2), averaging=True).run()
  assert events == steps(1, 2) + [("average", 2), ("save", 2), ("eval", 2)] + steps(3, 4) + [
      ("average", 4), ("save", 4), ("eval", 4)]
  _, events = Run(data=Data(4, num_train=32), the_course=elastic_course(FakeState()), averaging=True).run()
  assert events[:9] == steps(1, 2, 3) + [("average", 3), ("commit", 3), ("step", 4), ("average", 4), ("save", 4),
                                         ("eval", 4)]
  assert events[9:11] == [("commit", 4), ("step", 5)]  # the epoch end's commit reuses the averaging


def test_elastic_commits_every_n_steps_and_at_each_checkpoint():
  state = FakeState()
  ending, events = Run(data=Data(4, num_train=32), the_course=elastic_course(state)).run()
  assert events == (steps(1, 2, 3) + [("commit", 3), ("step", 4), ("save", 4), ("eval", 4), ("commit", 4)]
                    + steps(5, 6) + [("commit", 6)] + steps(7, 8) + [("save", 8), ("eval", 8), ("commit", 8)])
  assert state.saves == 4 and ending.epochs == 2.0 and ending.step == 8 and ending.images == 8
  # The run's final commit asks Horovod for no world change (one would start a world with nothing to train).
  assert state.checks == 3


def test_a_checkpoint_every_save_is_an_elastic_commit():
  state = FakeState()
  _, events = Run(data=Data(4), policy=Policy(checkpoint_every=2), the_course=elastic_course(state, 3, 1.0)).run()
  assert events == (steps(1, 2) + [("save", 2), ("commit", 2), ("step", 3), ("commit", 3), ("step", 4),
                                   ("save", 4), ("eval", 4), ("commit", 4)])


def test_an_eval_every_that_divides_the_epoch_evaluates_its_end_once_whatever_the_course():
  for the_course in (None, elastic_course(FakeState())):
    _, events = Run(spe=4, epochs=2, policy=Policy(eval_every=2), the_course=the_course).run()
    assert [e for e in events if e[0] == "eval"] == [("eval", 2), ("eval", 4), ("eval", 6), ("eval", 8)]


def test_a_run_stopped_at_an_epochs_last_step_evaluates_that_epoch_when_it_resumes():
  first = Run(spe=4, epochs=2, stop_at=4)
  ending, events = first.run()
  assert events == steps(1, 2, 3, 4) + [("save", 4)] and ending.status == outcome.STOPPED
  again = Run(spe=4, epochs=2, the_course=course.Course(RunState.at(first.course.position), first.course.run, ONE, UNIT))
  ending, events = again.run()
  assert events == [("save", 4), ("eval", 4)] + steps(5, 6, 7, 8) + [("save", 8), ("eval", 8)]
  assert (ending.cause, ending.images) == (loop.FINISHED, 8)


def test_a_finished_run_started_again_reports_a_target_its_evaluation_meets():
  ending, events = Run(spe=4, epochs=2, start=8, policy=Policy(target_top1=0.5), top1=lambda s: 0.6).run()
  assert events == [("eval", 8)]
  assert (ending.status, ending.cause, ending.reached.step) == (outcome.TARGET_REACHED, loop.TARGET, 8)


def test_due_is_one_predicate_for_evaluations_and_checkpoints():
  assert [s for s in range(0, 13) if loop.due(s, 4)] == [4, 8, 12]
  assert not any(loop.due(s, 0) for s in range(10))


WORLD = types.SimpleNamespace(size=2)
SUMMARY_CONFIG = types.SimpleNamespace(
    data=types.SimpleNamespace(global_batch=64, batch_size=32, accumulation_steps=1),
    model=types.SimpleNamespace(name="resnet8"), comm=types.SimpleNamespace(allreduce="horovod"),
    optim=types.SimpleNamespace(optimizer="sgd", precision="fp32"),
    evaluation=types.SimpleNamespace(has_target=True, target_top1=0.5, target_top5=0.0))


def test_an_epoch_end_on_a_checkpoint_every_step_saves_once():
  # Each save agrees on finite weights across ranks (an allreduce): the epoch end's save is the one.
  _, events = Run(spe=4, epochs=2, policy=Policy(checkpoint_every=2)).run()
  assert [e for e in events if e[0] == "save"] == [("save", 2), ("save", 4), ("save", 6), ("save", 8)]


def test_a_batch_change_ends_the_stretch_after_its_step_with_nothing_saved():
  # --batch_policy=adaptive: the controller chose K=3 after step 2; train.py goes on in this process.
  asked = []
  ending, events = Run(spe=4, epochs=2, resize=lambda step: asked.append(step) or (3 if step == 2 else None)).run()
  assert events == steps(1, 2)
  assert (ending.status, ending.cause, ending.resize_to, ending.step) == (outcome.OK, loop.RESIZED, 3, 2)
  assert asked == [1, 2]


def test_no_batch_change_at_an_epochs_last_step_its_end_comes_first():
  asked = []
  ending, events = Run(spe=2, epochs=1, resize=lambda step: asked.append(step) or (3 if step == 2 else None)).run()
  assert asked == [1] and ending.cause == loop.FINISHED  # step 2 ends the epoch: not asked there



def test_where_the_batch_can_change_evaluations_are_spaced_in_images():
  # --batch_policy=adaptive: --eval_every counts the flags' batch's steps, so K = 2 does not space the
  # evaluations out. 3 images a step here, every 4 images: after steps 2 (6), 3 (9) and 4 (12) of 10.
  the_course = course.Course(RunState.at(Position()), types.SimpleNamespace(epochs=1, max_steps=0), ONE,
                             types.SimpleNamespace(step_batch=3, global_batch=3))
  _, events = Run(spe=10, epochs=1, policy=Policy(eval_every=4, eval_images=4), the_course=the_course,
                  data=Data(10, num_train=30)).run()
  assert [e for e in events if e[0] == "eval"][:4] == [("eval", s) for s in (2, 3, 4, 6)]
