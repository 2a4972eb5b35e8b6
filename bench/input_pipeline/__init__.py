"""`make bench-input`: the input pipeline on real JPEGs against the decoder limit (bench/input_pipeline/__main__.py)."""
