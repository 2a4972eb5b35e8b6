"""Flags of train.py, and the floor plan of the project's imports.

A module imports only modules on a lower floor, or of its own package on its
own floor; nothing imports upward, and no import hides inside a function to
dodge a loop (tests/test_import_graph.py checks both, from this table):

  floor 6  train.py, bench/          anything below
  floor 5  flags/* (definitions,     the flag definitions and their checks, which need the
           checks: train_flags, ...) libraries below (World, the cost model, sources.scan, MODELS)
  floor 4  training/                 the train and eval steps
  floor 3  input/                    the pipelines (World: where this rank reads)
  floor 2  comm/                     everything between ranks
  floor 1  models/, optimizers/      networks, optimizers, schedules, precision
  floor 0  flags/config.py,          settings and ConfigError; progress lines. Standard
           flags/__init__.py,        library and third-party packages only
           progress.py

flags/config.py is on the ground floor so that comm/, input/ and optimizers/
can take their settings without importing the definitions above them; this
file imports nothing, because importing flags.config runs it first.
"""
