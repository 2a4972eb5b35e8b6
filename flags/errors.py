"""The one exception a user's mistake becomes."""


class ConfigError(ValueError):
  """Bad flags, data or topology: one sentence that names the flag and the fix.

  Raised before any expensive work; train.py prints it on every rank and exits
  with status 2.
  """
