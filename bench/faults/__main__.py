"""`python -m bench.faults` (`make faults`): the table of faults and the command line; what the program
does and measures: bench/faults/__init__.py."""
import argparse
import os
import signal
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import bench.faults  # noqa: E402
from bench.faults import elastic, slurm, verdicts as v  # noqa: E402
from bench.faults.elastic_join import join_dies  # noqa: E402
from bench.faults.data import (  # noqa: E402
    DATA_ARGS, MISSING, data_root, missing_shard_measure, missing_shard_restore, missing_shard_resume,
    missing_shard_setup, remove_data)
from bench.faults.export import EXPORT_ARGS, EXPORT_TMPFS, export_measure, export_resume  # noqa: E402
from bench.faults.long_eval import (  # noqa: E402
    LONG_EVAL_ARGS, LONG_EVAL_COPIES, long_eval_measure, long_eval_program, long_eval_resume, long_eval_setup,
    sigterm_in_eval, stopped_in_eval)
from bench.faults.report import (  # noqa: E402
    failed_row, in_workdir, measured_at, merged, old_seconds, stamped, table, write_elastic, write_report)
from bench.faults.restarts import (  # noqa: E402
    ADASCALE_REQUEUE, EVAL_ONLY, HALF_EPOCHS, HALF_STOP_AT, half_ranks_after, half_ranks_before)
from bench.faults.run import (  # noqa: E402
    Fault, _signal, _signal_group, _signal_ranks, both, prior_run, remount, run_fault, tmpfs, truncate_newest)
from bench.harness.hosts import Hosts  # noqa: E402
from bench.harness.launches import per_rank_data_dir  # noqa: E402
from input.datasets import DIGITS  # noqa: E402  (metadata only: no TensorFlow in this process)
from progress import emit  # noqa: E402

FAULTS = [
    # The eight first: an interrupted run has measured those.
    Fault("sigkill-rank-mpi", "SIGKILL to rank 1", _signal(signal.SIGKILL, 1), verdict=v.rank_killed),
    Fault("sigkill-rank-gloo", "SIGKILL to rank 1", _signal(signal.SIGKILL, 1), gloo=True, verdict=v.rank_killed),
    Fault("sigterm-launcher-mpi", "SIGTERM to horovodrun's pid", _signal(signal.SIGTERM), verdict=v.stopped),
    Fault("sigint-launcher-mpi", "SIGINT to horovodrun's pid", _signal(signal.SIGINT), verdict=v.ignored),
    Fault("sigstop-rank-mpi", "SIGSTOP to rank 1 (a hung GPU or file system)", _signal(signal.SIGSTOP, 1),
          verdict=v.stalled(1)),
    Fault("truncated-checkpoint", "the newest checkpoint's data cut to half, then the same command",
          None, args=("--max_steps=25",), at_step=0, setup=both(prior_run(20), truncate_newest), verdict=v.damaged),
    Fault("disk-full", "--model_dir on a 6 MB tmpfs: the third checkpoint does not fit", None,
          at_step=0, setup=tmpfs("6m")[0], teardown=tmpfs("6m")[1], before_resume=remount("64m"), verdict=v.disk_full),
    Fault("diverge-fp32-1rank", "--base_lr=1e6, fp32, one rank", None,
          args=("--base_lr=1e6", "--warmup_epochs=0"), np_=1, at_step=0, setup=prior_run(20), verdict=v.diverged(20)),
    Fault("sigterm-launcher-gloo", "SIGTERM to horovodrun's pid", _signal(signal.SIGTERM), gloo=True,
          verdict=v.stopped),
    Fault("ctrl-c-mpi", "SIGINT to horovodrun's process group (a terminal's Ctrl-C)",
          _signal_group(signal.SIGINT), verdict=v.stopped),
    Fault("sigusr1-rank-gloo", "SIGUSR1 (Slurm's preemption notice) to rank 0", _signal(signal.SIGUSR1, 0),
          gloo=True, verdict=v.stopped),
    Fault("sigterm-rank-mpi", "SIGTERM to rank 1 only", _signal(signal.SIGTERM, 1), verdict=v.stopped),
    Fault("sigterm-all-ranks-mpi", "SIGTERM to both ranks (a pod stop, srun forwarding)",
          _signal_ranks(signal.SIGTERM, (0, 1)), verdict=v.stopped),
    Fault("sigstop-rank0-mpi", "SIGSTOP to rank 0 (the coordinator)", _signal(signal.SIGSTOP, 0),
          verdict=v.stalled(0)),
    Fault("diverge-fp32", "--base_lr=1e6, fp32", None, args=("--base_lr=1e6", "--warmup_epochs=0"), at_step=0,
          setup=prior_run(20), verdict=v.diverged(20)),
    Fault("diverge-fp16", "--base_lr=1e6, fp16 (the loss scale cannot recover)", None,
          args=("--base_lr=1e6", "--warmup_epochs=0", "--precision=fp16"), at_step=0, setup=prior_run(20),
          verdict=v.diverged(20)),
    # Issue 23: a run resumed on another shape, data that differ between hosts, a stop during a long
    # evaluation, an export that fails (and, in elastic.py, a joining host that dies in its set-up).
    Fault("resume-half-ranks", f"SIGTERM to horovodrun at step {HALF_STOP_AT} (epoch 1.30 at global batch 64, "
          f"--epochs={HALF_EPOCHS}), then the same command on 1 rank (global batch 32) to the end",
          _signal(signal.SIGTERM), args=(f"--epochs={HALF_EPOCHS}",), at_step=HALF_STOP_AT, same_command=True,
          resume_np=1, measure=half_ranks_before, measure_resume=half_ranks_after),
    Fault("missing-shard", f"rank 1's copy of --data_dir lacks {MISSING} (each rank its own copy, as two hosts); "
          "then the shard restored and the same command", None, args=(*DATA_ARGS, "--max_steps=5"), at_step=0,
          same_command=True, program=lambda model_dir: per_rank_data_dir(data_root(model_dir)),
          setup=missing_shard_setup, before_resume=missing_shard_restore, teardown=remove_data,
          measure=missing_shard_measure, measure_resume=missing_shard_resume),
    Fault("sigterm-long-eval", "SIGTERM to horovodrun's process group (mpirun: the ranks' SIGTERM 10 s later, SIGKILL "
          f"10 s after that) during the first epoch end's evaluation ({LONG_EVAL_COPIES * DIGITS.num_eval:,} held-out "
          "images, --eval_batch_size=1)",
          sigterm_in_eval, args=(*DATA_ARGS, *LONG_EVAL_ARGS), at_step=0, same_command=True,
          extra_env={"OMPI_MCA_odls_base_sigkill_timeout": "10"}, program=long_eval_program, gone_timeout=900,
          setup=long_eval_setup, teardown=remove_data, measure=long_eval_measure, measure_resume=long_eval_resume,
          verdict=stopped_in_eval),
    Fault("export-disk-full", f"--model_dir on a {EXPORT_TMPFS} tmpfs: the checkpoints fit, the SavedModel does not; "
          "then the space freed and the same command", None, args=EXPORT_ARGS, at_step=0, same_command=True,
          setup=tmpfs(EXPORT_TMPFS)[0], teardown=tmpfs(EXPORT_TMPFS)[1], before_resume=remount("64m"),
          measure=export_measure, measure_resume=export_resume),
    # Issue 39: what landed since (a requeue of AdaScale onto another node count, --eval_only on any ranks;
    # in slurm.py a notice during an evaluation, in elastic.py a lost host under the adaptive policy).
    Fault("adascale-requeue-1rank", inject=_signal(signal.SIGTERM), **ADASCALE_REQUEUE),
    Fault("eval-only-ranks", inject=None, **EVAL_ONLY),
]
ORDER = [f.name for f in FAULTS]


def elastic_faults(only: str, workdir: str, launches: int = elastic.LAUNCHES) -> tuple[list[dict], dict | None]:
  """The elastic rows chosen by --only (all when empty) on 2 emulated hosts, each lost-host row from
  `launches` launches (elastic.py), elastic-join-dies (elastic_join.py), and ResNet-50's commit (None
  if not run)."""
  chosen = [name for name in elastic.NAMES if not only or name in only.split(",")]
  if not chosen:
    return [], None
  hosts = Hosts(elastic.NAME, elastic.SUBNET, 2, os.path.join(workdir, "elastic-hosts.txt"))
  why = hosts.up()
  if why:
    emit(f"faults: elastic rows skipped: no emulated hosts ({why})")
    return [], None
  out = []
  try:
    for name in chosen:
      try:
        out.append(join_dies(hosts, workdir) if name == elastic.JOIN_DIES
                   else elastic.lose_and_join(hosts, workdir, name, launches))
      except Exception as e:  # noqa: BLE001  (a row that could not be measured says why)
        emit(f"faults: {name}: not measured: {str(e).splitlines()[0]}")
        out.append({"fault": name, "what": "not measured", "launcher": elastic.LAUNCHER,
                    "line": f"not measured: {str(e).splitlines()[0]}"})
  finally:
    hosts.down()
  return elastic.built_with(out), elastic.resnet50_commit_seconds() if set(chosen) & set(elastic.FAULTS) else None


def main(argv=None):
  parser = argparse.ArgumentParser(prog="python -m bench.faults", description=bench.faults.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--only", default="", help="comma-separated fault names (default: all)")
  parser.add_argument("--out_dir", default=os.path.join(REPO, "results"))
  parser.add_argument("--elastic_launches", type=int, default=elastic.LAUNCHES,
                      help="launches of each elastic lost-host row, its hangs counted (default: %(default)s)")
  args = parser.parse_args(argv)
  chosen = [f for f in FAULTS if not args.only or f.name in args.only.split(",")]
  others = list(slurm.NAMES) + list(elastic.NAMES)
  unknown = set(filter(None, args.only.split(","))) - {f.name for f in FAULTS} - set(others)
  if unknown:
    parser.error(f"unknown faults {sorted(unknown)}; choose from {', '.join([f.name for f in FAULTS] + others)}")
  start = time.time()
  rows = []
  commit = measured_at(REPO)  # git rev-parse HEAD, and whether the tree was dirty
  os.makedirs(args.out_dir, exist_ok=True)
  report = os.path.join(args.out_dir, "faults.json")
  if not args.only and os.path.exists(report):
    os.remove(report)  # a full run starts the report afresh
  with tempfile.TemporaryDirectory(prefix="faults-") as workdir:
    for fault in chosen:
      try:
        row = run_fault(fault, workdir)
      except Exception as e:  # noqa: BLE001  (one fault that could not be measured is a row, not the end)
        row = failed_row(fault, e)
      # The report grows row by row: an interrupted run keeps what it measured.
      rows, seconds = merged(stamped(in_workdir([row], workdir), commit), report, time.time() - start, ORDER)
      start = time.time()
      write_report(rows, args.out_dir, seconds, commit)
    slurm_rows, slurm_note = slurm.rows(args.only, workdir)  # Slurm on 2 emulated hosts (root)
    for row in slurm_rows:
      rows, seconds = merged(stamped(in_workdir([row], workdir), commit), report, time.time() - start, ORDER)
      start = time.time()
      write_report(rows, args.out_dir, seconds, commit)
    elastic_rows, resnet50 = elastic_faults(args.only, workdir, args.elastic_launches)  # 2 emulated hosts
    if elastic_rows:
      write_elastic(stamped(in_workdir(elastic_rows, workdir), commit), resnet50, args.out_dir)
      write_report(merged([], report, 0, ORDER)[0], args.out_dir, old_seconds(report), commit)
  if slurm_note:
    slurm.add_note(args.out_dir, slurm_note)
  emit(table(rows), sys.stdout)


if __name__ == "__main__":
  main()
