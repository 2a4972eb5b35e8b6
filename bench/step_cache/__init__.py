"""`make bench-step-cache`: the adaptive run's step at K against the fixed step at K (bench/step_cache/__main__.py)."""
