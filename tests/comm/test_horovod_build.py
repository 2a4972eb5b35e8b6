"""comm/horovod_build.py: the marker scripts/setup.sh writes into the installed horovod package
after a patched build, read back by patch_marker() (on a package made here, and on the installed
one), and kept with each elastic row of make faults (bench/faults/elastic.built_with)."""
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from bench.faults import elastic as faults_elastic
from comm import horovod_build
from conftest import REPO


def package(tmp_path, library: bytes = b"\x7fELF built") -> str:
  root = tmp_path / "horovod"
  (root / "tensorflow").mkdir(parents=True)
  (root / "tensorflow" / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(library)
  return str(root)


def patch(tmp_path, text: str = "the patch\n") -> str:
  path = tmp_path / "tensor_queue.patch"
  path.write_text(text)
  return str(path)


def test_the_marker_setup_writes_reads_back_as_the_patch_sha256(tmp_path):
  pkg, p = package(tmp_path), patch(tmp_path)
  text = horovod_build.marker_text(pkg, p)
  patch_sha, lib_sha = hashlib.sha256(b"the patch\n").hexdigest(), hashlib.sha256(b"\x7fELF built").hexdigest()
  assert text == (f"{patch_sha} {p}\n"
                  f"{lib_sha} tensorflow/mpi_lib.cpython-311-x86_64-linux-gnu.so\n")
  with open(os.path.join(pkg, horovod_build.MARKER_FILE), "w") as fh:
    fh.write(text)
  assert horovod_build.patch_marker(pkg) == patch_sha


def test_no_marker_a_garbled_one_or_a_library_replaced_since_is_none(tmp_path):
  pkg, p = package(tmp_path), patch(tmp_path)
  assert horovod_build.patch_marker(pkg) is None  # built without the patch, or before markers
  marker = os.path.join(pkg, horovod_build.MARKER_FILE)
  with open(marker, "w") as fh:
    fh.write("not a marker\n")
  assert horovod_build.patch_marker(pkg) is None
  with open(marker, "w") as fh:
    fh.write(horovod_build.marker_text(pkg, p))
  with open(os.path.join(pkg, "tensorflow", "mpi_lib.cpython-311-x86_64-linux-gnu.so"), "wb") as fh:
    fh.write(b"\x7fELF pip's own wheel")  # pip replaced the library, and left the marker it did not install
  assert horovod_build.patch_marker(pkg) is None
  os.remove(os.path.join(pkg, "tensorflow", "mpi_lib.cpython-311-x86_64-linux-gnu.so"))
  assert horovod_build.patch_marker(pkg) is None


def test_setup_writes_and_checks_the_marker_through_this_module():
  with open(os.path.join(REPO, "scripts", "setup.sh")) as fh:
    setup = fh.read()
  assert f"PATCH_MARKER={horovod_build.MARKER_FILE}\n" in setup
  assert f"HOROVOD_PATCH={horovod_build.PATCH}\n" in setup
  assert re.search(r'patch_marker\(\) \{\n  "\$PY" -m comm\.horovod_build marker-text "\$HOROVOD_PATCH"\n\}', setup)


def test_the_installed_horovod_is_built_with_this_checkouts_patch():
  if horovod_build.package_dir() is None:
    pytest.skip("no horovod installed")
  with open(os.path.join(REPO, horovod_build.PATCH), "rb") as fh:
    want = hashlib.sha256(fh.read()).hexdigest()
  done = subprocess.run([sys.executable, "-m", "comm.horovod_build", "patch-marker"], cwd=REPO,
                        capture_output=True, text=True, timeout=60)
  assert done.returncode == 0, done.stderr
  assert done.stdout.strip() == horovod_build.patch_marker() == want, (
      f"the installed Horovod's patch marker is {done.stdout.strip()}, not this checkout's "
      f"{horovod_build.PATCH} ({want}): run make setup")


def test_the_elastic_rows_keep_the_build_they_were_measured_on(monkeypatch):
  monkeypatch.setattr(faults_elastic, "patch_marker", lambda: "a" * 64)
  rows = [{"fault": "elastic-horovod", "kept": True}, {"fault": "elastic-join-dies", "what": "not measured"}]
  assert faults_elastic.built_with(rows) == [dict(r, horovod_patch="a" * 64) for r in rows]
  monkeypatch.setattr(faults_elastic, "patch_marker", lambda: None)  # an unmarked build says so: null
  assert [r["horovod_patch"] for r in faults_elastic.built_with(rows)] == [None, None]


def test_horovodrun_keeps_a_build_checks_answer_while_the_files_are_the_same(tmp_path, monkeypatch):
  # scripts/horovod/built_checks.patch, which make setup applies to the installed package: horovodrun
  # asked "built with MPI?" by importing TensorFlow in a new process at every launch (4-5 s).
  util = pytest.importorskip("horovod.common.util")
  if not hasattr(util, "_built_checks_file"):
    pytest.fail("the installed Horovod lacks scripts/horovod/built_checks.patch: run make setup")
  path, key = util._built_checks_file("tensorflow")
  assert path.endswith(os.path.join("horovod", "tensorflow", ".built_checks.json")), path
  assert key[0][0].startswith("mpi_lib") and key[-1][0] == "__init__.py", key  # the library, then TensorFlow
  kept, files, asked = tmp_path / "kept.json", {"key": [["lib.so", 1, 1]]}, []
  monkeypatch.setattr(util, "_built_checks_file", lambda ext: (str(kept), files["key"]))
  monkeypatch.setattr(util, "_ask_extension", lambda ext, fn, desc, verbose: asked.append(desc) or fn(ext))
  check = util._check_extension_lambda
  assert check("tensorflow", lambda ext: True, "built with X", False) is True
  assert check("tensorflow", lambda ext: False, "built with X", False) is True  # kept: not asked
  assert check("tensorflow", lambda ext: False, "built with Y", False) is False
  assert asked == ["built with X", "built with Y"]
  files["key"] = [["lib.so", 2, 1]]  # rebuilt: asked again, the older answers dropped
  assert check("tensorflow", lambda ext: False, "built with X", False) is False
  assert check("tensorflow", lambda ext: None, "built with Z", False) is None  # did not load: not kept
  assert check("tensorflow", lambda ext: True, "running with GPU", False) is True  # not a build check
  assert check("tensorflow", lambda ext: False, "running with GPU", False) is False
  assert json.loads(kept.read_text()) == {"key": [["lib.so", 2, 1]], "results": {"built with X": False}}
  assert asked == ["built with X", "built with Y", "built with X", "built with Z", "running with GPU",
                   "running with GPU"]


def test_the_elastic_driver_runs_the_discovery_script_without_a_middleman(monkeypatch):
  # scripts/horovod/discovery.patch: safe_shell_exec spawned a Python interpreter (~0.3 s of CPU) for
  # each call, and the driver calls the script every second.
  discovery = pytest.importorskip("horovod.runner.elastic.discovery")

  def middleman(*args, **kwargs):
    raise AssertionError("the discovery script went through safe_shell_exec: run make setup")
  monkeypatch.setattr(discovery.safe_shell_exec, "execute", middleman)
  found = discovery.HostDiscoveryScript("echo h1:2; echo h2; echo", 1).find_available_hosts_and_slots()
  assert found == {"h1": 2, "h2": 1}
  with pytest.raises(RuntimeError, match="Failed to execute discovery script: exit 3. Exit code: 3"):
    discovery.HostDiscoveryScript("exit 3", 1).find_available_hosts_and_slots()
