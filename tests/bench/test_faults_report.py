"""bench/faults/'s pure parts: the report table (report.py) and a partial run merged into the report, a
row's measurements merged (run.py), the progress lines a restart's row reads (restarts.py), and every
row's verdict from what it measured (verdicts.py, long_eval.py, export.py, restarts.py): kept on a
fixture row, not kept when one promise breaks."""
import json
import subprocess

from bench.faults import __main__ as faults, elastic as faults_elastic, export, long_eval, report as faults_report
from bench.faults import restarts as faults_restarts, run as faults_run, verdicts as faults_verdicts

ROW = {"fault": "sigterm-launcher-mpi", "what": "SIGTERM to horovodrun's pid", "launcher": "horovodrun MPI, 2 ranks",
       "seconds_to_gone": 3.2, "exit_status": -15, "step_at_fault": 30, "last_step": 31, "checkpoint_step": 31,
       "processes_left": 0, "line": "stopped: the launcher's process 7 (sh) is gone at step 31 | x",
       "traceback": False, "steps_lost": 0, "resumed_from": 31, "resume_exit_status": 0}


def test_table_has_before_and_after():
  text = faults_report.table([ROW])
  header, rule, row = text.splitlines()
  assert header.count("|") == rule.count("|") == row.count("|") - 1 == 11  # the line's escaped | too
  assert faults_report.BEFORE["sigterm-launcher-mpi"] in row and "`stopped: the launcher" in row
  assert "| -15 | 3.2 | 0 | 31 / 31 (0) | resumed from 31, exit 0 |  |" in row  # no promise of its own
  fresh = dict(ROW, fault="diverge-bf16", resumed_from=None, traceback=True)
  assert "(new)" in faults_report.table([fresh]) and "(traceback)" in faults_report.table([fresh])
  assert "fresh start, exit 0" in faults_report.table([fresh])


def test_a_row_with_a_promise_says_whether_it_was_kept_and_what_it_measured():
  kept = dict(ROW, fault="export-disk-full", kept=True, measured=["summary.json written", "export_error | in it"])
  row = faults_report.table([kept]).splitlines()[2]
  assert faults_report.BEFORE["export-disk-full"] in row
  assert row.endswith("| kept: summary.json written; export_error \\| in it |")
  broken = dict(kept, kept=False)
  assert faults_report.table([broken]).splitlines()[2].endswith(
      "| **not kept**: summary.json written; export_error \\| in it |")
  assert faults_report.promise(dict(ROW, kept=True)) == "kept" and faults_report.promise(ROW) == ""


def test_measurements_merge_and_a_broken_part_breaks_the_promise():
  row = dict(ROW)
  faults_run.merge_measured(row, {"measured": ["first"], "kept": True, "before": {"epoch": 1.35}})
  faults_run.merge_measured(row, {"measured": ["second"], "kept": False})
  faults_run.merge_measured(row, {"measured": ["third"], "kept": True})
  faults_run.merge_measured(row, None)
  assert row["measured"] == ["first", "second", "third"] and row["kept"] is False and row["before"] == {"epoch": 1.35}


def test_the_issue_23_rows_are_known_and_have_a_before():
  names = [f.name for f in faults.FAULTS]
  for name in ("resume-half-ranks", "missing-shard", "sigterm-long-eval", "export-disk-full"):
    assert name in names and name in faults_report.BEFORE
  assert "elastic-join-dies" in faults_elastic.NAMES and "elastic-join-dies" in faults_report.BEFORE
  half = next(f for f in faults.FAULTS if f.name == "resume-half-ranks")
  assert half.resume_np == 1 and half.same_command and "the restart on 1 rank" in faults_run.launcher_of(half)
  # A digits epoch trains the images of its whole global batches, the same at 64 and at 32.
  assert faults_restarts._epoch_images(64) == faults_restarts._epoch_images(32) == 1472


def test_progress_lines_are_read_for_the_epoch_and_the_lr():
  text = ("[1,0]<stderr>:epoch   1.35  step     31/92  loss 1.2345  top1 0.500  lr 0.13043  B_simple     115"
          "    1673.9 img/s  eta 0:00:10\n"
          "[1,0]<stderr>:epoch   1.37  step     63/184  loss 1.2000  top1 0.520  lr 0.06739    900.0 img/s"
          "  eta 0:00:20\n")
  assert faults_restarts._progress(text) == [(1.35, 31, 0.13043), (1.37, 63, 0.06739)]


def test_the_elastic_table_shows_a_joiner_that_died_in_its_set_up():
  row = {"fault": "elastic-join-dies", "what": "its new rank killed in its set-up", "allreduce": "horovod",
         "seconds_to_training": 7.9, "steps_lost": [3, 0], "commit_every": 10, "seconds_to_join": None,
         "worlds": [2, 1, 1], "commit_ms": 16.8, "step_ms": 44.7, "commit_per_step": 0.0375, "exit_status": 0,
         "processes_left": 0, "final_top1": 0.9833, "replicas_identical": True, "killed_in_setup": True}
  header, rule, line = faults_report.elastic_table([row], None, faults_report.BEFORE).splitlines()
  assert header.count("|") == rule.count("|") == line.count("|") == 15
  assert faults_report.BEFORE["elastic-join-dies"] in line and "| never: killed in its set-up |" in line
  assert "| 3, 0 (10) |" in line and "| 2 -> 1 -> 1 |" in line
  late = faults_report.elastic_table([dict(row, killed_in_setup=False)], None).splitlines()[2]
  assert "not the case measured" in late and "| (new) |" in late
  joined = faults_report.elastic_table([dict(row, fault="elastic-horovod", seconds_to_join=23.4)], None).splitlines()[2]
  assert "| 23.4 |" in joined


def test_a_partial_run_replaces_its_rows_in_faults_order(tmp_path):
  path = tmp_path / "faults.json"
  old = [dict(ROW, fault="sigkill-rank-mpi"), dict(ROW, fault="diverge-fp32"), dict(ROW, fault="slurm-extra")]
  path.write_text(json.dumps({"rows": old, "wall_seconds": 100}))
  rows, seconds = faults_report.merged([dict(ROW, fault="diverge-fp32", exit_status=3),
                                        dict(ROW, fault="sigkill-rank-gloo")], str(path), 20, faults.ORDER)
  assert [r["fault"] for r in rows] == ["sigkill-rank-mpi", "sigkill-rank-gloo", "diverge-fp32", "slurm-extra"]
  assert rows[2]["exit_status"] == 3 and seconds == 120
  assert faults_report.merged([ROW], str(tmp_path / "none.json"), 5, faults.ORDER) == ([ROW], 5)


# ------------------------------------------------- every row's verdict, from its columns (pure) --
STOP = ("stopped: SIGTERM received at step 15 (epoch 0.65); checkpoint /tmp/f/ckpt-15; run the same command to "
        "resume (exit 75)")


def test_every_fault_states_a_promise_it_measures():
  for f in faults.FAULTS:
    assert f.verdict or f.measure or f.measure_resume or f.restart, f.name


def test_the_ranks_exit_statuses_are_read_from_either_launcher():
  mpirun = ("mpirun detected that one or more processes exited with non-zero status, thus causing\nthe job to be "
            "terminated. The first process to do so was:\n\n  Process name: [[5924,1],0]\n  Exit code:    75\n")
  gloo = "Process 0 exit with status code 75.\nProcess 1 exit with status code 5.\n"
  assert faults_run.rank_exits(mpirun) == [75] and faults_run.rank_exits(gloo) == [75, 5]
  assert faults_run.rank_exits("epoch 1.0 step 3/9") == []


def test_a_stop_is_kept_with_its_checkpoint_at_the_step_and_the_ranks_75():
  row = dict(ROW, line=STOP, last_step=15, checkpoint_step=15, resumed_from=15, rank_exits=[75])
  kept = faults_verdicts.stopped(row)
  assert kept["kept"] and "`stopped:` line at step 15 with ckpt-15" in kept["measured"][0]
  assert not faults_verdicts.stopped(dict(row, last_step=16))["kept"]  # a step lost
  assert not faults_verdicts.stopped(dict(row, rank_exits=[1]))["kept"]
  assert not faults_verdicts.stopped(dict(row, resumed_from=10))["kept"]
  assert not faults_verdicts.stopped(dict(row, line="(nothing after the fault)"))["kept"]


def test_a_killed_rank_a_stall_a_damaged_checkpoint_a_full_disk_and_a_divergence_are_judged():
  killed = dict(ROW, launcher="horovodrun MPI, 2 ranks", exit_status=137, steps_lost=3, checkpoint_step=10,
                resumed_from=10, line="mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9")
  assert faults_verdicts.rank_killed(killed)["kept"]
  assert not faults_verdicts.rank_killed(dict(killed, steps_lost=6))["kept"]
  gloo = dict(killed, launcher="horovodrun Gloo, 2 ranks", exit_status=1,
              line="error: a collective failed: another rank died (Horovod has been shut down); this rank stops too "
                   "(exit 5); look for the first rank that ended")
  assert faults_verdicts.rank_killed(gloo)["kept"]
  assert not faults_verdicts.rank_killed(dict(gloo, traceback=True))["kept"]
  stall = dict(killed, exit_status=4, line="stalled: rank 0 on vm saw no progress for 30 s (limit 30 s) after step 12 "
               "(step); rank 1 on vm (pid 29432) last heard 31 s ago at step 5 (step): stopped or dead; ending the job")
  assert faults_verdicts.stalled(1)(stall)["kept"] and not faults_verdicts.stalled(0)(stall)["kept"]
  damaged = dict(ROW, exit_status=0, line="checkpoint ckpt-20 is unreadable (Read less bytes than requested); kept as "
                 "ckpt-20.damaged.*; resuming from ckpt-15")
  assert faults_verdicts.damaged(damaged)["kept"] and not faults_verdicts.damaged(dict(damaged, exit_status=1))["kept"]
  full = dict(ROW, exit_status=2, checkpoint_step=10, resumed_from=10,
              line="error: cannot save checkpoint ckpt-15 in /m (No space left on device): it needs about 2 bytes")
  assert faults_verdicts.disk_full(full)["kept"] and not faults_verdicts.disk_full(dict(full, exit_status=1))["kept"]
  nan = dict(ROW, exit_status=3, checkpoint_step=20, resumed_from=20, false_divergence_warning=False,
             line="diverged: non-finite loss or gradient at step 24 (lr 1e5); the update was not applied; no "
                  "checkpoint is written; newest good checkpoint /m/ckpt-20; lower --base_lr (exit 3)")
  assert faults_verdicts.diverged(20)(nan)["kept"]
  assert not faults_verdicts.diverged(20)(dict(nan, checkpoint_step=25))["kept"]
  assert not faults_verdicts.diverged(20)(dict(nan, false_divergence_warning=True))["kept"]
  ignored = dict(ROW, exit_status=0, summary_status="finished", line="epoch 12.00 eval top1 0.99")
  assert faults_verdicts.ignored(ignored)["kept"] and not faults_verdicts.ignored(dict(ignored, line=STOP))["kept"]


def test_a_stop_during_the_evaluation_is_kept_between_its_batches_before_the_sigkill():
  row = dict(ROW, line=STOP.replace("15 (epoch 0.65)", "23 (epoch 1.00)").replace("ckpt-15", "ckpt-23"),
             checkpoint_step=23, seconds_to_summary=1.4, seconds_to_ranks_gone=11.2, evaluated_in_run=False,
             rank_exits=[], summary_status="stopped")
  assert long_eval.stopped_in_eval(row)["kept"]
  assert not long_eval.stopped_in_eval(dict(row, seconds_to_ranks_gone=20.1))["kept"]  # SIGKILLed in it
  assert not long_eval.stopped_in_eval(dict(row, summary_status="finished"))["kept"]
  assert not long_eval.stopped_in_eval(dict(row, rank_exits=[137]))["kept"]
  assert not long_eval.stopped_in_eval(dict(row, seconds_to_summary=None))["kept"]
  assert not long_eval.stopped_in_eval(dict(row, evaluated_in_run=True))["kept"]
  assert not long_eval.stopped_in_eval(dict(row, checkpoint_step=20))["kept"]


def test_a_finished_run_started_again_says_so_trains_nothing_and_exports():
  over = ("[1,0]<stderr>:20:01:02 this run already finished at step 10 (epoch 0.43), held-out top1 0.3867; nothing "
          "trained, summary.json kept (more --epochs or --max_steps trains on)\n")
  assert export.finished_again(over, 10, True, True)["kept"]
  assert not export.finished_again(over, 10, False, True)["kept"]  # summary.json rewritten
  assert not export.finished_again(over, 10, True, False)["kept"]  # not exported
  assert not export.finished_again(over + "epoch   0.48  step     11/600  loss 2.1", 10, True, True)["kept"]
  assert not export.finished_again("", 10, True, True)["kept"]


def test_an_adascale_requeue_resumes_at_the_stops_tau_with_base_batch_32():
  before = {"step": 32, "epoch": 1.11, "tau": 51.0, "base_batch": 32}
  text = ("resumed from /m/ckpt-32 at step 32: epoch 1.11, 2,048 images trained (AdaScale: tau 51.0 base-batch steps)\n"
          "epoch   1.15  update     33  loss 1.6  top1 0.5  lr 0.08\n")
  summary = {"status": "finished", "epochs": 3.0, "adascale": {"base_batch": 32}}
  assert faults_restarts.adascale_resumed(text, summary, before)["kept"]
  # The resume line read tau at the unpinned base batch (64 a rank on 1 rank): epoch 2.22 for 1.11.
  assert not faults_restarts.adascale_resumed(text.replace("epoch 1.11,", "epoch 2.22,"), summary, before)["kept"]
  assert not faults_restarts.adascale_resumed(text, dict(summary, adascale={"base_batch": 64}), before)["kept"]
  assert not faults_restarts.adascale_resumed(text.replace("tau 51.0", "tau 25.5"), summary, before)["kept"]


def test_eval_only_on_any_ranks_prints_the_runs_line():
  line = "epoch   1.30  eval top1 0.4067  top5 0.8967  loss 1.7012"
  same = faults_restarts.eval_only_verdict(line, 30, {1: (0, [line], 30), 2: (0, [line], 30)})
  assert same["kept"] and same["measured"] == ["--eval_only on 1 rank: the same line (step 30)",
                                               "--eval_only on 2 ranks: the same line (step 30)"]
  other = line.replace("0.4067", "0.4100")
  assert not faults_restarts.eval_only_verdict(line, 30, {1: (0, [line], 30), 2: (0, [other], 30)})["kept"]
  assert not faults_restarts.eval_only_verdict(None, 30, {1: (0, [line], 30)})["kept"]


def test_the_report_says_the_commit_and_the_rows_of_other_commits():
  commit = {"sha": "a" * 40, "dirty": True, "changed": ["Makefile"]}
  rows = faults_report.stamped([dict(ROW)], commit) + [dict(ROW, fault="old"), dict(ROW, fault="b", commit={
      "sha": "b" * 40, "dirty": False})]
  note = faults_report.commit_note(rows, commit)
  assert note.startswith("Measured at commit `aaaaaaaaaaaa`, with uncommitted changes to 1 tracked file (Makefile).")
  assert "old (unrecorded)" in note and "b (bbbbbbbbbbbb)" in note and "sigterm-launcher-mpi" not in note
  assert faults_report.commit_note(rows[:1], dict(commit, dirty=False, changed=[])).endswith(
      "Rows kept from an earlier run at another commit or tree: sigterm-launcher-mpi (aaaaaaaaaaaa, dirty).")
  assert faults_report.row_commits(rows) == ("sigterm-launcher-mpi at `aaaaaaaaaaaa` (dirty tree); old at an "
                                             "unrecorded commit; b at `bbbbbbbbbbbb`")


def test_the_rows_name_their_temporary_directory_workdir_not_the_machines():
  row = dict(ROW, line="stopped: SIGTERM received at step 16; checkpoint /tmp/faults-x1/sigterm-launcher-mpi/ckpt-16",
             measured=["restart's line: resumed from /tmp/faults-x1/a/ckpt-46"],
             per_launch=[{"dir": ("/tmp/faults-x1/b",)}])
  (out,) = faults_report.in_workdir([row], "/tmp/faults-x1")
  assert out["line"].endswith("checkpoint $WORKDIR/sigterm-launcher-mpi/ckpt-16")
  assert out["measured"] == ["restart's line: resumed from $WORKDIR/a/ckpt-46"]
  assert out["per_launch"] == [{"dir": ["$WORKDIR/b"]}] and out["exit_status"] == ROW["exit_status"]



def test_the_commit_is_dirty_for_changed_code_not_for_written_results(tmp_path):
  def git(*args):
    subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
  git("init", "-q")
  (tmp_path / "results").mkdir()
  (tmp_path / "results" / "faults.md").write_text("before\n")
  (tmp_path / "train.py").write_text("print()\n")
  git("add", ".")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
  (tmp_path / "results" / "faults.md").write_text("after a row\n")  # an --only run before this one
  assert faults_report.measured_at(str(tmp_path))["dirty"] is False
  (tmp_path / "train.py").write_text("print(1)\n")
  assert faults_report.measured_at(str(tmp_path))["changed"] == ["train.py"]
