#!/usr/bin/env bash
# The demo, end to end on the bundled data and the tiny configs (outputs in runs/tiny/):
#   1. pretraining data: bundled corpus -> span-masked TFRecords (SentencePiece model in data/)
#   2. pretraining: permutation LM with memory (loss falls), checkpoints + TensorBoard in runs/tiny/pretrain
#   3. fine-tuning: the pretrained model on the bundled sentiment sentences (GLUE SST-2 layout): train, dev
#      accuracy, predictions
#   4. export: a TF Serving SavedModel in runs/tiny/export/<step>/ (raw text in; docs/serving.md)
#   5. what pretraining buys: the same fine-tuning from random weights, and both dev accuracies side by side
#      (one seed each; bench/reports/pretraining_pays.md measures it with several seeds and label budgets)
#   6. serving: the export loaded as TF Serving loads it (TensorFlow + tensorflow-text only), two raw sentences
# Rerunning resumes or skips finished steps; delete runs/ to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
.venv/bin/python run_pretrain.py --config_file=configs/pretrain_tiny.yaml
.venv/bin/python run_classifier.py --config_file=configs/finetune_sentiment_tiny.yaml
.venv/bin/python run_classifier.py --config_file=configs/finetune_sentiment_tiny.yaml --init_checkpoint= \
    --model_dir=runs/tiny/finetune_sentiment_random --export_dir= --nodo_predict
.venv/bin/python - <<'EOF'
import json
accuracy = {name: json.load(open(f"runs/tiny/{name}/eval_results.dev.json"))["metrics"]["accuracy"]
            for name in ("finetune_sentiment", "finetune_sentiment_random")}
pretrained, random = accuracy["finetune_sentiment"], accuracy["finetune_sentiment_random"]
print(f"sentiment dev accuracy: from the pretrained checkpoint {pretrained:.3f}, from random weights {random:.3f}: "
      f"pretraining buys {pretrained - random:+.3f} here (one seed each; see bench/reports/pretraining_pays.md)")
EOF
.venv/bin/python - <<'EOF'
import os
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the export uses)
base = "runs/tiny/export"
version = max(int(v) for v in os.listdir(base) if v.isdigit())  # TF Serving serves the highest version
serving = tf.saved_model.load(f"{base}/{version}").signatures["serving_default"]
sentences = ["The food was delicious and the staff were friendly.", "Terrible service, I will never come back."]
out = serving(sentence=tf.constant(sentences))
for sentence, label, p in zip(sentences, out["label"].numpy(), out["probabilities"].numpy()):
    print(f"served by {base}/{version}: label {label.decode()} (probability {p.max():.2f}) <- {sentence!r}")
EOF
