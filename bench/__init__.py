"""Benchmarks and studies of train.py: one folder per program, run as `python -m bench.NAME` by its
make target (docs/benchmarks.md lists them and what each writes under results/), and harness/, what
the programs share: launches of train.py and the emulated hosts they run on, a real Slurm, runs kept
for --reuse, train.py's own training step, sample JPEGs.

A program imports the harness and its own modules, and of another program only a library module
tests/test_import_graph.py's BENCH_LIBRARIES names; no module here is over 300 lines.
"""
