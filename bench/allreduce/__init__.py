"""`make bench-comm`: the allreduce algorithms timed against each other (bench/allreduce/__main__.py)."""
