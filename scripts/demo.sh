#!/usr/bin/env bash
# The embedded default, end to end on the bundled corpus and tiny config:
# SentencePiece data -> TFRecords -> pretraining (loss falls). Outputs go to runs/tiny/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
.venv/bin/python run_pretrain.py "$@"
