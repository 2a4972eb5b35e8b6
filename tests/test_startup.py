"""What a rank's start-up loads: train.py imports TensorFlow without scikit-learn, which Keras 3
imports for its sklearn wrappers wherever it is installed (0.85 of the 4.6 CPU-s `import tensorflow`
took a rank here), and leaves it importable for the digits set's writer (input/digits.py)."""
import subprocess
import sys

from conftest import REPO, _env

PROBE = """
import sys
import train
print("sklearn loaded by train.py:", "sklearn" in sys.modules)
from sklearn.datasets import load_digits
print("digits:", load_digits().data.shape)
"""


def test_train_py_loads_tensorflow_without_scikit_learn_and_leaves_it_importable():
  done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.splitlines()[-2:] == ["sklearn loaded by train.py: False", "digits: (1797, 64)"], done.stdout
