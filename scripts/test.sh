#!/usr/bin/env bash
# Runs the test suite in one pytest process (TensorFlow's import is paid once).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec .venv/bin/python -m pytest -q "$@"
