"""bench/faults.py's pure parts: the report table and a partial run merged into the report."""
import json

from bench import faults

ROW = {"fault": "sigterm-launcher-mpi", "what": "SIGTERM to horovodrun's pid", "launcher": "horovodrun MPI, 2 ranks",
       "seconds_to_gone": 3.2, "exit_status": -15, "step_at_fault": 30, "last_step": 31, "checkpoint_step": 31,
       "processes_left": 0, "line": "stopped: the launcher's process 7 (sh) is gone at step 31 | x",
       "traceback": False, "steps_lost": 0, "resumed_from": 31, "resume_exit_status": 0}


def test_table_has_before_and_after():
  text = faults.table([ROW])
  header, rule, row = text.splitlines()
  assert header.count("|") == rule.count("|") == row.count("|") - 1 == 10  # the line's escaped | too
  assert faults.BEFORE["sigterm-launcher-mpi"] in row and "`stopped: the launcher" in row
  assert "| -15 | 3.2 | 0 | 31 / 31 (0) | resumed from 31, exit 0 |" in row
  fresh = dict(ROW, fault="diverge-bf16", resumed_from=None, traceback=True)
  assert "(new)" in faults.table([fresh]) and "(traceback)" in faults.table([fresh])
  assert "fresh start, exit 0" in faults.table([fresh])


def test_a_partial_run_replaces_its_rows_in_faults_order(tmp_path):
  path = tmp_path / "faults.json"
  old = [dict(ROW, fault="sigkill-rank-mpi"), dict(ROW, fault="diverge-fp32"), dict(ROW, fault="slurm-extra")]
  path.write_text(json.dumps({"rows": old, "wall_seconds": 100}))
  rows, seconds = faults.merged([dict(ROW, fault="diverge-fp32", exit_status=3),
                                 dict(ROW, fault="sigkill-rank-gloo")], str(path), 20)
  assert [r["fault"] for r in rows] == ["sigkill-rank-mpi", "sigkill-rank-gloo", "diverge-fp32", "slurm-extra"]
  assert rows[2]["exit_status"] == 3 and seconds == 120
  assert faults.merged([ROW], str(tmp_path / "none.json"), 5) == ([ROW], 5)
