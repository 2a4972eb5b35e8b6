"""bench/faults/elastic.py's counting of lost-host launches, elastic_join.py's verdict and report.py's
table (pure: what launches returned in, the row and its table line out; the launches themselves are
make faults')."""
import sys

from bench.faults import elastic as faults_elastic, elastic_join, report as faults_report
from bench.harness.launches import Job

DIED = ("[1]<stderr>:[2026-12-05 08:41:07.512: E horovod/common/operations.cc:697] [0]: Horovod background loop "
        "uncaught exception: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer\n")
STALLED = ("[1]<stderr>:stalled: rank 0 on imcelf-h2 saw no progress for 310 s (limit 300 s) after step 31 (step); "
           "--elastic: the other ranks are not compared (a world change renumbers them); ending the job (exit 4); "
           "resume with the same command (newest checkpoint runs/x/ckpt-30)\n")


def finished(**over) -> dict:
  launch = {"outcome": "finished", "at": 25, "killed": 1, "seconds_to_training": 5.0, "steps_lost": [2],
            "seconds_to_join": 20.0, "world_change_s": 30.0, "reinit_s": 10.0, "worlds": [2, 1, 2], "commit_ms": 20.0,
            "step_ms": 100.0,
            "commit_per_step": 0.02, "exit_status": 0, "processes_left": 0, "final_top1": 0.97,
            "replicas_identical": True, "epochs": 4.0}
  return dict(launch, **over)


def failed(outcome: str, line: str) -> dict:
  return {"outcome": outcome, "at": 25, "killed": 1, "exit_status": 4 if outcome == "hang" else 1,
          "processes_left": 0, "line": line, "user_lines": []}


def test_a_hang_is_the_watchdog_after_horovods_loop_died_or_a_launch_past_its_bound():
  assert faults_elastic.hang(DIED + STALLED, ended=True, left=0)
  assert faults_elastic.hang("", ended=False, left=0)   # still running at its bound
  assert faults_elastic.hang("", ended=True, left=2)    # processes left past its bound
  assert not faults_elastic.hang(DIED, ended=True, left=0)  # the loop dies in every recovery: not a hang alone
  assert not faults_elastic.hang(STALLED + DIED, ended=True, left=0)  # a stall before the loss is another failure


def test_a_row_counts_its_launches_and_hangs_and_takes_medians_over_the_finished():
  runs = [finished(),
          finished(seconds_to_training=7.0, steps_lost=[4, 0], worlds=[2, 1, 1, 2], at=27, reinit_s=3.0),
          finished(seconds_to_training=6.0, final_top1=0.95, world_change_s=12.5, reinit_s=None),
          failed("hang", "the job ended (4) before a step"), failed("failed", "no step 25 within 600 s")]
  row = faults_elastic.aggregate("elastic-horovod", runs)
  assert (row["launches"], row["hangs"], row["failed"], row["finished"]) == (5, 1, 1, 3)
  assert row["seconds_to_training"] == 6.0 and row["final_top1"] == 0.97 and row["step_ms"] == 100.0
  # the survivor's pauses, from its ledger: medians over the launches whose summary had them
  assert row["world_change_s"] == 30.0 and row["reinit_s"] == 6.5
  assert row["steps_lost"] == [2] and row["steps_lost_max"] == 4  # the host's loss: the first of each launch
  assert row["worlds"] == [2, 1, 2] and row["worlds_seen"] == {"2 -> 1 -> 2": 2, "2 -> 1 -> 1 -> 2": 1}
  assert row["exit_status"] == 0 and row["replicas_identical"] and "step 25 (median)" in row["what"]
  assert [f["launch"] for f in row["failures"]] == [4, 5] and len(row["per_launch"]) == 5
  line = faults_report.elastic_table([row], None).splitlines()[2]
  assert "(5 launches: 1 hung, 1 failed otherwise; medians over the 3 that finished)" in line
  assert "| 2 (10) |" in line and "| 2 -> 1 -> 2 |" in line


def test_a_row_where_no_launch_finished_says_so():
  row = faults_elastic.aggregate("elastic-hybrid", [failed("hang", "x"), failed("hang", "y")])
  assert row["hangs"] == 2 and row["line"] == "not measured: no launch finished (every launch hung)"
  assert "not measured: no launch finished" in faults_report.elastic_table([row], None)


def test_a_row_is_kept_only_when_every_launch_finished_and_kept_its_promise():
  row = faults_elastic.aggregate("elastic-adaptive-powersgd",
                                 [finished(status="finished"), finished(status="finished")])
  assert row["kept"] and row["flags"] == " ".join(faults_elastic.ADAPTIVE) and row["allreduce"] == "horovod"
  assert row["measured"][0] == "2 of 2 launches finished (0 hung, 0 failed otherwise)"
  assert "--compression=powersgd" in row["what"] and "| kept: 2 of 2 launches finished" in faults_report.elastic_table(
      [row], None)
  lost = faults_elastic.aggregate("elastic-horovod", [finished(status="finished"),
                                                      finished(status="finished", steps_lost=[12])])
  assert not lost["kept"] and "launch 2: steps lost [12] (at most 10)" in lost["measured"][1]
  alone = faults_elastic.aggregate("elastic-horovod", [finished(status="finished", worlds=[2, 1])])
  assert not alone["kept"] and "worlds [2, 1] (want 2 -> 1 -> 2)" in alone["measured"][1]
  hung = faults_elastic.aggregate("elastic-horovod", [finished(status="finished"), failed("hang", "x")])
  assert not hung["kept"] and hung["measured"][0] == "1 of 2 launches finished (1 hung, 0 failed otherwise)"
  assert faults_elastic.launch_kept(finished(status="finished", replicas_identical=False)) == ["replicas differ"]


def test_a_joiner_that_died_in_its_set_up_is_kept_when_the_survivor_trained_on_alone():
  row = {"worlds": [2, 1, 1], "steps_lost": [3, 0], "status": "finished", "exit_status": 0, "processes_left": 0,
         "replicas_identical": True, "killed_in_setup": True}
  assert elastic_join.join_dies_kept(row)["kept"]
  assert not elastic_join.join_dies_kept(dict(row, worlds=[2, 1, 2]))["kept"]  # it joined: not the case
  assert not elastic_join.join_dies_kept(dict(row, killed_in_setup=False))["kept"]
  assert not elastic_join.join_dies_kept(dict(row, exit_status=4))["kept"]


def test_a_failed_launch_keeps_where_its_worlds_were():
  text = ("[0]<stderr>:20:35:01 world: 2 ranks on 2 hosts at step 0 (epoch 0, 0 of its examples trained)\n"
          "[0]<stderr>:epoch   0.50  update     25  loss 2.0\n"
          "[0]<stderr>:20:35:40 the world is changing (a rank lost or a host added); checkpoint m/ckpt-20 holds it\n"
          "[0]<stderr>:20:35:50 world: 1 ranks on 1 hosts at step 20 (epoch 0, 1280 of its examples trained)\n"
          "[0]<stderr>:20:35:50 batch: this world starts at K 2, compression powersgd (global batch 64)\n"
          "[0]<stderr>:epoch   1.10  update     50  loss 1.1\n" + STALLED)
  lines = faults_elastic.world_lines(text)
  assert [l.split(">:")[1][:14] for l in lines] == ["20:35:01 world", "20:35:40 the w", "20:35:50 world",
                                                     "20:35:50 batch", "epoch   1.10  "]


def test_a_failed_launchs_whole_output_is_kept_beside_the_row(tmp_path):
  # The row keeps a failed launch's last lines only, and its model_dir is removed after it.
  program = [sys.executable, "-c", "import sys; print('to stdout'); print('world: 2 ranks', file=sys.stderr); "
             "print('the end', file=sys.stderr); sys.exit(1)"]
  with Job(str(tmp_path / "model"), launcher=["env"], program=program) as job:
    job.wait_gone(60)
    path = faults_elastic.keep_log(job, "elastic-x-5", root=str(tmp_path))
  assert path == "runs/faults/elastic-x-5.log"
  text = (tmp_path / path).read_text()
  assert "exit 1\n--- stdout\nto stdout\n" in text and text.endswith("--- stderr\nworld: 2 ranks\nthe end\n")


def test_the_join_ahead_bench_takes_each_arms_medians_over_the_launches_that_kept_the_promise():
  from bench.faults import join_ahead
  kept = {"status": "finished"}
  launches = [finished(arm="ahead", return_s=5.0, return_reinit_s=1.0, started_ahead=True, **kept),
              finished(arm="ahead", return_s=7.0, return_reinit_s=2.0, started_ahead=True, **kept),
              finished(arm="stock", return_s=15.0, return_reinit_s=10.0, started_ahead=False, **kept),
              finished(arm="stock", return_s=99.0, worlds=[2, 1], **kept),  # the host never joined: not counted
              dict(failed("failed", "exit 1"), arm="stock")]
  arms = join_ahead.summarise(launches)
  assert arms["ahead"]["return_s"] == {"median": 6.0, "min": 5.0, "max": 7.0, "n": 2}
  assert arms["ahead"]["started_ahead"] == 2 and arms["stock"]["started_ahead"] == 0
  assert (arms["stock"]["launches"], arms["stock"]["finished"]) == (3, 1)
  assert arms["stock"]["return_reinit_s"]["median"] == 10.0 and "return_first_step_s" not in arms["stock"]
  table = join_ahead.markdown({"setup": {"commit": "abc", "cpu": "cpu", "cores": 2, "pairs": 2}, "arms": arms})
  assert "| the survivor's pause for the return (s) | 6.0 (5.0-7.0) | 15.0 (15.0-15.0) |" in table
  assert "| launches kept / made | 2 / 2 | 1 / 3 |" in table
  dirty = {"commit": "abc", "changed": ["train.py"], "cpu": "cpu", "cores": 2, "pairs": 2}
  assert join_ahead.markdown({"setup": dirty, "arms": arms}).count("Commit abc with train.py changed, 2 cores") == 1
