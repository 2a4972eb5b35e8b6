"""make bench-overhead: where train.py's wall time goes outside its steps (training/ledger.py's time
block of each launch), for the runs users start first, each the median of its launches."""
