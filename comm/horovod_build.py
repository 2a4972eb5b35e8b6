"""Which build of Horovod this interpreter imports: the marker of the project's patch.

scripts/setup.sh builds Horovod 0.28.1 with scripts/horovod/tensor_queue.patch (docs/setup.md) and
then writes MARKER_FILE into the installed horovod package, the text marker_text() gives: the
patch's sha256 and path, then the sha256 of the TensorFlow library that build made. setup.sh
compares that file with marker_text() to tell a build of this patch from an unpatched one, one of
another version of the patch, or one pip replaced since (pip leaves the file, which it did not
install, but not the library). patch_marker() reads it back for results that say which build they
were measured on (bench/faults_elastic.py's rows: horovod_patch). From the repository's root:

  python -m comm.horovod_build marker-text [PATCH]   # what setup.sh writes and checks
  python -m comm.horovod_build patch-marker          # patch_marker(), or "none"

Nothing here imports Horovod or TensorFlow: the package is found, not loaded.
"""
import glob
import hashlib
import importlib.util
import os
import sys

MARKER_FILE = "imagenet_minutes_patch.sha256"
PATCH = "scripts/horovod/tensor_queue.patch"
LIBRARY = os.path.join("tensorflow", "mpi_lib*.so")


def package_dir() -> str | None:
  """The directory of the horovod package this interpreter would import, or None."""
  spec = importlib.util.find_spec("horovod")
  if spec is None or not spec.submodule_search_locations:
    return None
  return list(spec.submodule_search_locations)[0]


def sha256(path: str) -> str:
  with open(path, "rb") as fh:
    return hashlib.file_digest(fh, "sha256").hexdigest()


def library(package: str) -> str:
  """Horovod's TensorFlow library in the package (FileNotFoundError: none, or not one)."""
  found = glob.glob(os.path.join(package, LIBRARY))
  if len(found) != 1:
    raise FileNotFoundError(f"{os.path.join(package, LIBRARY)}: {len(found)} files")
  return found[0]


def marker_text(package: str, patch: str = PATCH) -> str:
  """The marker of a build of `patch` whose package is `package` (as setup.sh writes it)."""
  lib = library(package)
  return f"{sha256(patch)} {patch}\n{sha256(lib)} {os.path.relpath(lib, package)}\n"


def patch_marker(package: str | None = None) -> str | None:
  """The sha256 of scripts/horovod/tensor_queue.patch as the installed Horovod was built with it.
  None: no Horovod, no marker (a build without the patch, or from before markers), a marker this
  function cannot read, or a TensorFlow library that is not the one the marker names (replaced
  since). package: the horovod package's directory (default: the one this interpreter imports)."""
  package = package or package_dir()
  if package is None:
    return None
  try:
    with open(os.path.join(package, MARKER_FILE)) as fh:
      (patch_sha, _), (lib_sha, lib_name) = (line.split(" ", 1) for line in fh.read().splitlines())
    lib = library(package)
    if lib_sha != sha256(lib) or lib_name != os.path.relpath(lib, package):
      return None
  except (OSError, ValueError):
    return None
  return patch_sha


def main(argv: list[str]) -> int:
  if argv[:1] == ["marker-text"] and len(argv) <= 2:
    package = package_dir()
    if package is None:
      print("no horovod package", file=sys.stderr)
      return 1
    sys.stdout.write(marker_text(package, *argv[1:]))
    return 0
  if argv == ["patch-marker"]:
    print(patch_marker() or "none")
    return 0
  print("usage: python -m comm.horovod_build marker-text [PATCH] | patch-marker", file=sys.stderr)
  return 2


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
