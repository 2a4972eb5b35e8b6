"""`make adaptive`: AdaScale and the adaptive batch against fixed batches (bench/adaptive/__main__.py)."""
