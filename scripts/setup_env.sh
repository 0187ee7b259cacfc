#!/usr/bin/env bash
# Creates (or reuses) .venv at the repository root and installs xlnet_tf with its test extra.
# Reinstalls only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  PY="${PYTHON:-}"
  if [ -z "$PY" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
  fi
  "$PY" -m venv .venv
fi
stamp=.venv/.xlnet_tf-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
  # The custom CPU kernels (xlnet_tf/ops); without a C++ compiler TensorFlow's and XLA's ops run instead.
  TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python -m xlnet_tf.ops >/dev/null 2>.venv/ops-build.log \
    || echo "setup_env: custom kernels not built (see .venv/ops-build.log); using TensorFlow's ops" >&2
  echo "$want" > "$stamp"
fi
