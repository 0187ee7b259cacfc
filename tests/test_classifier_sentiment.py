"""Real data: the tiny model pretrained on the bundled corpus, fine-tuned on the bundled sentiment sentences
(GLUE SST-2 layout), must beat the majority class on dev by a clear margin."""

import csv
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from classifier_helpers import DEFAULTS, REPO, SPIECE
from xlnet_tf.runner import run
from xlnet_tf.tasks.task_settings import ClassifierSettings

SENTIMENT = os.path.join(REPO, "data", "sentiment")
MARGIN = 0.12  # accuracy points above the majority class


def _pretrained_checkpoint(tmp_path):
    """The pretraining demo's output if present (``python run_pretrain.py --config_file=configs/pretrain_tiny.yaml``),
    else a short pretraining run of the demo config."""
    existing = os.path.join(REPO, "runs", "tiny", "pretrain")
    if os.path.isdir(existing) and tf.train.latest_checkpoint(existing):
        return existing
    model_dir = str(tmp_path / "pretrain")
    subprocess.run([sys.executable, "run_pretrain.py", "--config_file=configs/pretrain_tiny.yaml",
                    f"--model_dir={model_dir}", f"--data_dir={tmp_path / 'pretrain_data'}", "--train_steps=200",
                    "--save_steps=200", "--warmup_steps=20"], cwd=REPO, check=True)
    return model_dir


@pytest.mark.slow
def test_finetuned_tiny_model_beats_majority_class(tmp_path):
    with open(os.path.join(SENTIMENT, "dev.tsv"), encoding="utf-8") as f:
        labels = [row[1] for row in list(csv.reader(f, delimiter="\t", quotechar=None))[1:]]
    majority = max(labels.count("0"), labels.count("1")) / len(labels)
    settings = ClassifierSettings.from_values(dict(
        DEFAULTS, task_name="sst-2", data_dir=SENTIMENT, model_config_path=os.path.join(REPO, "configs", "tiny.json"),
        spiece_model_file=SPIECE, init_checkpoint=_pretrained_checkpoint(tmp_path),
        model_dir=str(tmp_path / "finetune"), do_train=True, do_eval=True, max_seq_length=64, train_batch_size=32,
        eval_batch_size=200, train_steps=300, warmup_steps=30, learning_rate=1e-3, adam_epsilon=1e-6,
        iterations=100))
    accuracy = run(settings)["eval"]["metrics"]["accuracy"]
    print(f"sentiment dev accuracy {accuracy:.3f} vs majority class {majority:.3f}")
    assert accuracy >= majority + MARGIN, (accuracy, majority)
