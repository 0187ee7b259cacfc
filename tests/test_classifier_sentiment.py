"""Real data: the tiny model pretrained on the bundled corpus, fine-tuned on the bundled sentiment sentences
(GLUE SST-2 layout), must beat the majority class on dev by a clear margin: the demo's two commands, as users run
them."""

import csv
import json
import os
import subprocess
import sys

import pytest

from background import background
from classifier_helpers import REPO

SENTIMENT = os.path.join(REPO, "data", "sentiment")
MARGIN = 0.12  # accuracy points above the majority class


def _tool(*argv):
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, f"{argv[0]}: exit {done.returncode}\n{done.stderr[-4000:]}"
    return done


def _pretrained_checkpoint(tmp_path):
    """A short pretraining run of the demo config (the demo's path from its checkpoint into fine-tuning). Not the
    demo's own output where a demo ran: the test would then depend on what the working tree holds. (20 steps or
    200 fine-tune to the same dev accuracy, ~0.80: the margin below is fine-tuning's.)"""
    model_dir = str(tmp_path / "pretrain")
    _tool("run_pretrain.py", "--config_file=configs/pretrain_tiny.yaml", f"--model_dir={model_dir}",
          f"--data_dir={tmp_path / 'pretrain_data'}", "--train_steps=20", "--iterations=10", "--save_steps=20",
          "--warmup_steps=2")
    return model_dir


@pytest.mark.slow
@background
def test_finetuned_tiny_model_beats_majority_class(tmp_path):
    with open(os.path.join(SENTIMENT, "dev.tsv"), encoding="utf-8") as f:
        labels = [row[1] for row in list(csv.reader(f, delimiter="\t", quotechar=None))[1:]]
    majority = max(labels.count("0"), labels.count("1")) / len(labels)
    model_dir = tmp_path / "finetune"
    _tool("run_classifier.py", "--config_file=configs/finetune_sentiment_tiny.yaml",
          f"--init_checkpoint={_pretrained_checkpoint(tmp_path)}", f"--model_dir={model_dir}", "--export_dir=",
          "--nodo_predict", "--train_steps=300", "--warmup_steps=30", "--save_steps=300")
    with open(model_dir / "eval_results.dev.json", encoding="utf-8") as f:
        accuracy = json.load(f)["metrics"]["accuracy"]
    assert accuracy >= majority + MARGIN, (accuracy, majority)
