#!/usr/bin/env bash
# Compile the project's TensorFlow kernels (input/kernels/*.cc) into
# input/kernels/image_ops.so against the TensorFlow in .venv. Called by
# make setup and before make's test, train and bench targets; returns at once
# when the library is newer than its sources and the TensorFlow install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
SRC=(input/kernels/*.cc)
OUT=input/kernels/image_ops.so
TF_MARK=.venv/.setup-stamp

[ -x "$PY" ] || { echo "build_ops: no .venv: run make setup first" >&2; exit 1; }
fresh=1
[ -f "$OUT" ] || fresh=0
for f in "${SRC[@]}" "$TF_MARK" "$0"; do
  [ -f "$f" ] && [ "$f" -nt "$OUT" ] && fresh=0
done
[ "$fresh" = 1 ] && exit 0

echo "build_ops: compiling ${SRC[*]} -> $OUT"
read -r -a tf_flags <<<"$(TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c \
  'import tensorflow as tf; print(" ".join(tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()))')"
# -O3 for the kernels' inner loops; no -march, so the library runs on any x86-64.
g++ -shared -fPIC -O3 -Wall "${SRC[@]}" -o "$OUT.tmp" "${tf_flags[@]}"
mv "$OUT.tmp" "$OUT"
