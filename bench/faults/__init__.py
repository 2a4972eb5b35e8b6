"""Faults against real launches: `make faults` (writes results/faults.{md,json}).

  python -m bench.faults               # every fault below, MPI and Gloo, 2 ranks on digits
  python -m bench.faults --only sigterm-launcher-mpi,sigstop-rank-gloo

Each fault starts train.py under horovodrun (2 ranks, digits, a checkpoint
every 5 steps: run.BASE_ARGS) in a session of its own, waits until training
runs, does the fault (a signal to the launcher or to one rank, a truncated
checkpoint, a full disk, a diverging LR), and measures: the time from the
fault to the last process of the job gone, the exit status, the step at the
fault against the step of the newest checkpoint (steps lost), the processes
left behind (every pid the job ever had is tracked: a launcher that dies
leaves its children re-parented, out of reach of a process-tree walk), and
the line the user saw. Then the same command again, which must resume.
The multi-process tests (tests/multiprocess/test_faults.py) assert the same properties
through bench/harness/launches.py's Job; only this program reports times.

Every row ends with a verdict, kept or not, computed from what it measured against what
docs/faults.md promises for it; results/faults.json records the commit each row was measured at
(git rev-parse HEAD, and whether the tree was dirty), and the report says it.

One program, one folder:
  __main__.py  the table of faults and the command line
  run.py       a row's launch under horovodrun, its fault, what it measured, the same command again
  verdicts.py  the verdicts of the rows whose promise is their columns
  restarts.py  the rows that judge a restart (on half the ranks, AdaScale requeued on 1 rank,
               --eval_only on any ranks)
  data.py      the digits records issue 23's rows read, and a shard missing on one host
  long_eval.py a stop during a long evaluation
  export.py    an export that does not fit
  slurm.py     the Slurm rows (a real Slurm on 2 emulated hosts)
  elastic.py   the elastic rows: a host lost and back, counted over many launches
  elastic_join.py  elastic-join-dies: the host back, its rank killed in its set-up
  report.py    results/faults.{md,json} and results/faults_elastic.json, the elastic rows' table
"""
