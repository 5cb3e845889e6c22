#!/usr/bin/env bash
# The XLA handlers against one jax release (docs/xla.md "Supported jax
# versions"): a venv with jax==VERSION and jaxlib==VERSION from PyPI (CPU),
# libgpuactor_xla.so built against that jaxlib's FFI header, and the xla_ffi
# suite (bindings/xla/tests/run_tests.py) run in it. Not part of
# scripts/test.sh (CI tests the jax of the build's own venv); the venv is
# kept under BUILD/jax-VERSION and reused.
#
#   scripts/xla_jax_check.sh BUILD VERSION [PYTHON]
#     BUILD: a build tree with libgpuactor.so; PYTHON: the interpreter of the
#     venv (jax 0.11 needs Python >= 3.12; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  sed -n 2,12p "$0"
  exit 2
fi
build=$(cd "$1" && pwd) version=$2 python=${3:-python3}
dir=$build/jax-$version
if ! "$dir/venv/bin/python" -c "import jax, pytest" 2>/dev/null; then
  "$python" -m venv "$dir/venv"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$dir/venv/bin/pip" install --quiet --no-input \
    "jax==$version" "jaxlib==$version" numpy pytest
fi
"$dir/venv/bin/python" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__)'
# No --xla-library: the runner builds it against the venv's jaxlib, in $dir.
exec "$python" bindings/xla/tests/run_tests.py --source . --build-dir "$dir" --library "$build/libgpuactor.so" \
  --venv "$dir/venv" --python "$dir/venv/bin/python"
