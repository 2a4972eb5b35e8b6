"""train.py on several real ranks under horovodrun: training to a target, a bad flag on every rank,
a killed job resumed past a damaged checkpoint (the collectives themselves: test_checks.py)."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import MODEL, NO_GRACE, REPO, _env, horovodrun

pytestmark = pytest.mark.multiprocess


def summary_of(proc):
  """The final JSON line train.py prints on rank 0."""
  untagged = re.sub(r"\[\d+,\d+\]<stdout>:", "", proc.stdout)  # mpirun --tag-output
  found = re.findall(r"^(\{.*\})$", untagged, re.M)
  assert found, f"no summary line\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
  return json.loads(found[-1])


def train_args(model_dir, *extra):
  return ("python", "train.py", f"--model_dir={model_dir}", f"--model={MODEL}", "--log_every=5", *extra)


@pytest.fixture(scope="module")
def target_run(tmp_path_factory):
  """Two ranks to a target (a short run of what make train runs): (the launch, its --model_dir)."""
  model_dir = tmp_path_factory.mktemp("target")
  proc = horovodrun(2, *train_args(model_dir, "--epochs=4", "--batch_size=32", "--warmup_epochs=0.5", "--eval_every=5",
                                   "--target_top1=0.85", "--export=false"), check=True, timeout=400)
  return proc, model_dir


def test_a_short_run_lowers_the_loss_and_every_rank_stops_at_the_same_evaluation(target_run):
  # The loss falls, every rank leaves the loop after the same step (otherwise the weights differ, or the
  # final comparison, a collective, waits for a rank still training and the run never ends), the
  # checkpoint and summary are rank 0's. What each exit does is tests/training/test_loop.py's, in one process.
  proc, tmp_path = target_run
  losses = [float(x) for x in re.findall(r"step +\d+/\d+  loss ([0-9.]+)", proc.stderr)]
  assert len(losses) >= 4 and losses[-1] < 0.5 * losses[0], losses
  summary = summary_of(proc)
  step = summary["target_step"]
  assert summary["ranks"] == 2 and summary["global_batch"] == 64 and summary["replicas_identical"] is True
  assert summary["status"] == "reached" and summary["target_reached"] is True, summary
  assert step % (1497 // 64) % 5 == 0, summary  # --eval_every into an epoch, or an epoch end
  assert summary["steps"] == step < 4 * (1497 // 64), summary
  assert 0 < summary["time_to_target_seconds"] <= summary["wall_seconds"]
  # The time ledger (training/ledger.py): its parts sum to the wall, the steps among them, and the step
  # rate is read off the steps' part alone.
  time_block = summary["time"]
  assert sum(time_block["parts"].values()) == pytest.approx(time_block["wall_seconds"], rel=0.02)
  assert 0 < time_block["groups"]["steps"] < time_block["wall_seconds"] and time_block["groups"]["startup"] > 0
  assert summary["images_per_sec"] == time_block["images_per_step_second"] > summary["images_per_wall_second"]
  assert summary["final_top1"] >= 0.85 and 0 < summary["final_top1"] <= summary["final_top5"] <= 1
  tops = [float(t) for t in re.findall(r"eval top1 ([0-9.]+)  top5", proc.stderr)]
  assert tops[-1] >= 0.85 and all(t < 0.85 for t in tops[:-1]), tops  # the first evaluation that reached it
  assert re.search(rf"target reached: --target_top1=0.85 at step {step} \(epoch", proc.stderr), proc.stderr[-2000:]
  assert json.load(open(tmp_path / "summary.json")) == summary
  # --export=false: no SavedModel (training/persist/export.py's round trip is test_export.py's).
  assert os.path.exists(tmp_path / f"ckpt-{step}.index") and not os.path.exists(tmp_path / "export")
  assert "export" not in summary
  # The noise scale: each rank's gradient (32 images) against the exchanged mean (64).
  noise = summary["noise_scale"]
  assert (noise["b_small"], noise["b_big"], noise["steps"]) == (32, 64, step) and noise["b_simple"] > 0, noise
  assert noise["at_target"]["step"] == step and re.search(r"B_simple +\d+", proc.stderr), noise


def test_a_checkpoint_evaluated_on_1_and_3_ranks_gives_what_the_run_printed_at_its_step(target_run):
  # One model (BatchNorm's statistics averaged before each save and evaluation): the run's last
  # evaluation, the one that reached the target, is its checkpoint's on any number of ranks. With each
  # rank's own statistics the ranks held different models, and a 2-rank run's figure was a blend.
  # Fewer and more ranks than the run's 2, whose own evaluation on 2 ranks is the figure printed: an
  # --eval_only launch on 2 as well cost make test a launch (2 ranks' start-up and evaluation) and
  # showed nothing 1 and 3 do not (both must give the printed line exactly); 3, not 4: a rank's
  # start-up less, and 300 held-out images still dealt to more ranks than the run had.
  proc, model_dir = target_run
  step = summary_of(proc)["target_step"]
  printed = re.findall(r"(epoch +[\d.]+  eval top1 [\d.]+  top5 [\d.]+  loss [\d.]+)", proc.stderr)[-1]
  for ranks in (1, 3):
    # 600 s, a bound: with both cores busy (load 17) 4 ranks' imports alone took 177 s, and the
    # launch ran past the 300 s this had.
    evaluated = horovodrun(ranks, *train_args(model_dir, "--epochs=4", "--batch_size=32", "--eval_only"), check=True,
                           timeout=600)
    result = summary_of(evaluated)
    assert (result["status"], result["step"], result["ranks"], result["count"]) == ("evaluated", step, ranks, 300)
    assert re.findall(r"epoch +[\d.]+  eval top1 .*", evaluated.stderr) == [printed], (ranks, evaluated.stderr[-2000:])
    assert f"evaluating {model_dir}/ckpt-{step} (step {step}" in evaluated.stderr
  assert json.load(open(model_dir / "summary.json"))["target_step"] == step  # nothing written by an evaluation
  assert not os.path.exists(model_dir / f"ckpt-{step + 1}.index")


def test_a_run_that_met_its_target_started_again_says_so_and_trains_nothing(target_run):
  # It trained on to its next evaluation before, reported time_to_target_seconds on the restart's clock
  # and overwrote summary.json with images_per_sec null.
  proc, model_dir = target_run
  kept = (model_dir / "summary.json").read_text()
  step = json.loads(kept)["target_step"]
  again = horovodrun(2, *train_args(model_dir, "--epochs=4", "--batch_size=32", "--warmup_epochs=0.5", "--eval_every=5",
                                    "--target_top1=0.85", "--export=false"), check=True, timeout=300)
  (line,) = [l for l in again.stderr.splitlines() if "this run already" in l]
  assert re.search(rf"this run already reached its target at step {step} \(epoch [\d.]+\), [\d.]+ s after its "
                   r"start-up, held-out top1 0\.(8[5-9]|9)\d*; nothing trained, summary.json kept", line), line
  assert (model_dir / "summary.json").read_text() == kept and summary_of(again) == json.loads(kept)
  assert not re.search(r"step +\d+/\d+  loss", again.stderr) and "eval top1" not in again.stderr


def test_bad_flag_stops_every_rank_with_one_sentence(tmp_path):
  proc = horovodrun(2, *train_args(tmp_path, "--global_batch_size=63"), timeout=300, extra_env=NO_GRACE)
  assert proc.returncode != 0
  assert proc.stderr.count("error: --global_batch_size=63 does not divide by the 2 ranks") == 2, proc.stderr[-3000:]


def _wait_until_gone(marker, timeout=60):
  """Block until no process has `marker` in its command line."""
  deadline = time.time() + timeout
  while True:
    alive = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    if not alive:
      return
    assert time.time() < deadline, f"{len(alive)} ranks still running {timeout} s after horovodrun was killed"
    time.sleep(0.2)


def test_killed_run_resumes_past_a_damaged_newest_checkpoint(tmp_path):
  # The whole job SIGKILLed (no chance to stop cleanly), then the newest checkpoint's data cut to
  # half (a save cut short by a full disk, a copy cut short): the same command sets it aside,
  # resumes from the one before it and trains on. 6 epochs: resnet8's steps are quick,
  # and the ranks must not reach the end between the checkpoint the test waits for and the kill.
  epochs, per_epoch = 6, 1497 // 64
  args = train_args(tmp_path, f"--epochs={epochs}", "--checkpoint_every=5", "--warmup_epochs=0.5")
  cmd = ["horovodrun", "-np", "2", "-H", "localhost:2"] + [sys.executable if a == "python" else a for a in args]
  first = subprocess.Popen(cmd, cwd=REPO, env=dict(_env(), **NO_GRACE), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
  try:
    deadline = time.time() + 300
    while not os.path.exists(tmp_path / "ckpt-10.index"):
      assert first.poll() is None, "the run ended before it was killed"
      assert time.time() < deadline, "no checkpoint within 300 s"
      time.sleep(0.2)
  finally:
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
  # horovodrun runs mpirun from a middleman in its own session, which stops the ranks only once it
  # sees horovodrun gone; meanwhile they can save more checkpoints (CI resumed from ckpt-15 after
  # this test had read ckpt-10). Wait for every rank to be gone before reading what was saved.
  _wait_until_gone(str(tmp_path))
  with open(tmp_path / "checkpoint") as fh:
    saved = int(re.search(r'model_checkpoint_path: "ckpt-(\d+)"', fh.read()).group(1))
  assert 10 <= saved < epochs * per_epoch
  data = tmp_path / f"ckpt-{saved}.data-00000-of-00001"
  os.truncate(data, os.path.getsize(data) // 2)
  before = max(int(m.group(1)) for f in os.listdir(tmp_path) if (m := re.fullmatch(r"ckpt-(\d+)\.index", f))
               and int(m.group(1)) < saved)

  # The restart trains 5 steps past the checkpoint it resumed from: what it proves is the choice of
  # that checkpoint, not the rest of the run (which cost make test a minute), nor the export.
  second = horovodrun(2, *args, f"--max_steps={before + 5}", "--export=false", check=True, timeout=300)
  lines = re.findall(rf"checkpoint ckpt-{saved} is unreadable .*", second.stderr)
  assert len(lines) == 1 and lines[0].endswith(f"; kept as ckpt-{saved}.damaged.*; resuming from ckpt-{before}"), \
      second.stderr[-3000:]
  assert re.search(rf"resumed from .*ckpt-{before} at step {before}\b", second.stderr), second.stderr[-3000:]
  assert re.search(rf"training steps {before}\.\.{before + 5}\b", second.stderr)
  assert "Traceback" not in second.stderr and (tmp_path / f"ckpt-{saved}.damaged.data-00000-of-00001").exists()
  summary = summary_of(second)
  assert summary["steps"] == before + 5
  assert summary["replicas_identical"] is True
