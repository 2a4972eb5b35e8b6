"""The training step and what keeps a long run alive around it."""
