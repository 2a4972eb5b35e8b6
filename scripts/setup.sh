#!/usr/bin/env bash
# make setup: apt packages, .venv, pinned Python packages, Horovod 0.28.1 built
# with TensorFlow + MPI + Gloo from its sdist with the project's patch
# (scripts/horovod/tensor_queue.patch: Horovod's elastic race, docs/setup.md),
# its launcher's build checks kept in a file (scripts/horovod/built_checks.patch), its
# elastic driver's discovery script run without a Python middleman (scripts/horovod/discovery.patch)
# and a returning host's process started ahead of the workers' reset (scripts/horovod/join_ahead.patch),
# and the project's image kernel (scripts/build_ops.sh). Idempotent: when the
# stamp matches the inputs and the build check passes it returns in seconds.
#
# GPU=1 (make setup-gpu): TensorFlow with CUDA (tensorflow[and-cuda], which
# brings CUDA, cuDNN and NCCL as pip wheels) and Horovod with
# HOROVOD_GPU_OPERATIONS=NCCL; needs an NVIDIA driver and nvcc on PATH.
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL=2
cd "$(dirname "$0")/.."

VENV=.venv
PY=$VENV/bin/python
HOROVOD_VERSION=0.28.1
STAMP=$VENV/.setup-stamp
# The sdist is downloaded, extracted and patched here (inside .venv: git-ignored).
HOROVOD_SRC=$VENV/src
HOROVOD_PATCH=scripts/horovod/tensor_queue.patch
# Python only, applied to the installed package after the build (no rebuild for them): horovodrun's
# "built with MPI/Gloo?" answered from a file instead of a TensorFlow import at every launch, and the
# elastic driver's discovery script (every second) run without a spawned Python middleman, and a
# returning host's process started (and its imports done) before the workers stop for it.
RUNNER_PATCHES="scripts/horovod/built_checks.patch scripts/horovod/discovery.patch scripts/horovod/join_ahead.patch"
# Written into the installed horovod package after a patched build: the patch's sha256 and the
# built library's, so check_build tells this build from an unpatched one (or one pip replaced).
# comm/horovod_build.py writes its text (marker-text) and reads it at run time (patch_marker()).
PATCH_MARKER=imagenet_minutes_patch.sha256
# dataset-fashion-mnist: Fashion-MNIST's original IDX files in /usr/share/datasets/fashion-mnist
# (--dataset=fashion_mnist, input/fashion_mnist.py).
APT_PACKAGES="openmpi-bin libopenmpi-dev cmake g++ make libhighwayhash-dev libfarmhash-dev dataset-fashion-mnist"
GPU=${GPU:-0}
REQUIREMENTS=requirements.txt
[ "$GPU" = 1 ] && REQUIREMENTS=requirements-gpu.txt
want_stamp="$(cat requirements-base.txt "$REQUIREMENTS" scripts/setup.sh "$HOROVOD_PATCH" $RUNNER_PATCHES | sha256sum | cut -d' ' -f1) gpu=$GPU"

gpu_build_env() {
  # NCCL from the nvidia-nccl-cu12 wheel that tensorflow[and-cuda] installs.
  [ "$GPU" = 1 ] || return 0
  local nccl
  nccl=$("$PY" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')
  echo "HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_INCLUDE=$nccl/include HOROVOD_NCCL_LIB=$nccl/lib HOROVOD_NCCL_LINK=SHARED"
}

# The marker's text for the installed Horovod: the patch's sha256, then its TensorFlow library's.
patch_marker() {
  "$PY" -m comm.horovod_build marker-text "$HOROVOD_PATCH"
}

check_build() {
  MARKER="$PATCH_MARKER" WANT="$(patch_marker)" "$PY" - <<'PY'
import os
import horovod
marker = os.path.join(os.path.dirname(horovod.__file__), os.environ["MARKER"])
have = open(marker).read() if os.path.exists(marker) else ""
assert have.strip() == os.environ["WANT"].strip(), (
    "Horovod was built without scripts/horovod/tensor_queue.patch, with another version of it, "
    "or replaced since")
import horovod.tensorflow as hvd
assert hvd.mpi_built(), "Horovod was built without MPI"
assert hvd.gloo_built(), "Horovod was built without Gloo"
import os
if os.environ.get("GPU") == "1":
  assert hvd.nccl_built(), "Horovod was built without NCCL"
import tensorflow as tf
print(f"ok: tensorflow {tf.__version__}, horovod {__import__('horovod').__version__}, MPI and Gloo built")
PY
}

# The directory holding the installed horovod package (site-packages), where RUNNER_PATCHES apply.
site_dir() {
  "$PY" -c 'import horovod, os; print(os.path.dirname(os.path.dirname(horovod.__file__)))'
}

# Whether every runner patch is in the installed package (each reverses cleanly).
runner_patches_in() {
  local site p
  site=$(site_dir) || return 1
  for p in $RUNNER_PATCHES; do
    patch -p1 -R -s -f --dry-run -d "$site" < "$p" >/dev/null 2>&1 || return 1
  done
}

# The Horovod sdist, downloaded once into HOROVOD_SRC; prints its path.
sdist() {
  local path=$HOROVOD_SRC/horovod-$HOROVOD_VERSION.tar.gz
  if [ ! -f "$path" ]; then
    mkdir -p "$HOROVOD_SRC/download"
    "$PY" -m pip download -q --no-binary :all: --no-deps --no-build-isolation \
      -d "$HOROVOD_SRC/download" "horovod==$HOROVOD_VERSION" >&2
    mv "$HOROVOD_SRC/download/horovod-$HOROVOD_VERSION.tar.gz" "$path"
  fi
  echo "$path"
}

# The runner patches applied to the sdist's own copies of the files they change, so a runner patch
# that changed since the last make setup replaces its older version rather than failing on it.
runner_patch() {
  local site tarball f p
  site=$(site_dir)
  tarball=$(sdist)
  for f in $(sed -n 's#^+++ b/\([^[:space:]]*\).*#\1#p' $RUNNER_PATCHES | sort -u); do
    tar -xzf "$tarball" -O "horovod-$HOROVOD_VERSION/$f" > "$site/$f"
  done
  for p in $RUNNER_PATCHES; do
    patch -p1 -s -f -d "$site" < "$p"
  done
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ] && check_build 2>/dev/null && runner_patches_in; then
  bash scripts/build_ops.sh
  echo "setup: already done (delete $STAMP to force a rebuild)"
  exit 0
fi

missing=""
for p in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends $missing >/tmp/imagenet-minutes-apt.log 2>&1 \
    || { cat /tmp/imagenet-minutes-apt.log; exit 1; }
fi

[ -x "$PY" ] || python3 -m venv "$VENV"
"$PY" -m pip install -q --upgrade pip setuptools wheel
"$PY" -m pip install -q -r "$REQUIREMENTS"

if ! check_build >/dev/null 2>&1; then
  echo "setup: building horovod $HOROVOD_VERSION with $HOROVOD_PATCH against $("$PY" -c 'import tensorflow as tf; print(tf.__version__)') (about 4 minutes on 2 cores)"
  # The sdist, extracted afresh and patched (Horovod has had no release since 0.28.1).
  tarball=$(sdist)
  tree=$HOROVOD_SRC/horovod-$HOROVOD_VERSION
  rm -rf "$tree"
  tar -xzf "$tarball" -C "$HOROVOD_SRC"
  patch -p1 -s -d "$tree" < "$HOROVOD_PATCH"
  # Build against the TensorFlow just installed: no build isolation, and no
  # cached wheel that may have been compiled against another TensorFlow.
  # --force-reinstall --no-deps: replace an installed 0.28.1 (the unpatched
  # build) whatever pip thinks of the version; the dependencies are pinned in
  # requirements-base.txt.
  env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 $(gpu_build_env) \
  MAKEFLAGS="-j$(nproc)" \
    "$PY" -m pip install -q --no-build-isolation --no-cache-dir --force-reinstall --no-deps "$tree"
  installed=$("$PY" -c 'import horovod, os; print(os.path.dirname(horovod.__file__))')
  patch_marker > "$installed/$PATCH_MARKER"
fi
runner_patches_in || runner_patch
check_build
# The package's files parse and hold the statistics the input normalises with (tests do not read
# outside the repository, so this is checked here, once per machine).
problem=$(TF_CPP_MIN_LOG_LEVEL=2 "$PY" -c 'from input import fashion_mnist as f; print(f.missing() or f.constants_problem() or "")')
if [ -n "$problem" ]; then echo "setup: $problem" >&2; exit 1; fi
echo "$want_stamp" > "$STAMP"
bash scripts/build_ops.sh
