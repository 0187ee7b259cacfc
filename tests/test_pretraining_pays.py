"""Pretraining must leave weights that fine-tuning can use (bench/reports/pretraining_pays.md).

The defect this guards against: the tied LM head's bias started at zero, Adam could not move it to the ~10-nat
spread of the log frequencies in a short run, and the loss fell from ln(V) to the unigram entropy through the
word embeddings instead, pushing every rarely seen token's row along one shared direction. A from-scratch run
now starts the bias at the data's log unigram frequencies (``xlnet_tf/data/unigram.py``).
"""

import os

import numpy as np
import pytest

from xlnet_tf import XLNetConfig, XLNetPretrainer
from xlnet_tf.checkpoint import load_pretrained
from xlnet_tf.data.unigram import log_unigram, token_counts
from xlnet_tf.training.pretraining import pretrain
from xlnet_tf.training.settings import PretrainSettings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "configs", "tiny.json")
SPM = os.path.join(ROOT, "data", "spiece.model")
STEPS = 40


def mean_pairwise_cosine(rows):
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return float((unit @ unit.T)[np.triu_indices(len(rows), 1)].mean())


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """The tiny model pretrained from scratch for STEPS steps on 2,000 lines of the bundled corpus."""
    root = tmp_path_factory.mktemp("pretraining_pays")
    with open(os.path.join(ROOT, "data", "corpus", "brown_sample.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()[:2000]
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = PretrainSettings(
        model_dir=str(root / "model"), data_dir=str(root / "data"), input_glob=str(corpus),
        model_config_path=TINY, spiece_model_file=SPM, train_batch_size=8, seq_len=64, reuse_len=32, mem_len=0,
        perm_size=32, num_predict=10, train_steps=STEPS, iterations=STEPS, warmup_steps=4, learning_rate=1e-3,
        adam_epsilon=1e-6, dropout=0.0, dropatt=0.0)
    metrics = pretrain(settings)
    model = XLNetPretrainer(XLNetConfig.from_json(TINY))
    load_pretrained(model, settings.model_dir)
    counts = token_counts(settings.data_dir, model.config.n_token)
    return metrics, model, counts


def test_log_unigram_is_a_smoothed_distribution():
    counts = np.array([0, 1, 2, 5])
    p = np.exp(log_unigram(counts, smoothing=0.5))
    np.testing.assert_allclose(p, np.array([0.5, 1.5, 2.5, 5.5]) / 10.0, rtol=1e-6)


@pytest.mark.slow
def test_short_pretraining_starts_at_the_unigram_entropy(short_run):
    metrics, _, counts = short_run
    p = counts[counts > 0] / counts.sum()
    entropy = float(-(p * np.log(p)).sum())
    # From a zero bias the first steps average ln(8000) = 9.0 falling towards the entropy (8.4 over 40 steps).
    assert metrics["loss"] < entropy + 0.5, (metrics["loss"], entropy)


def test_unseen_tokens_keep_distinct_embeddings(short_run):
    """Rows of tokens that never occur in the data (ids > 8: not the special symbols) must not drift together:
    their mean pairwise cosine is 0.0 at initialisation; with the zero-initialised bias it was 0.42 after these 40
    steps (0.63 after 60), with the unigram bias 0.06."""
    _, model, counts = short_run
    unseen = np.where(counts == 0)[0]
    unseen = unseen[unseen > 8][:1500]
    assert len(unseen) > 500
    embedding = model.xlnet.word_embedding.numpy()
    assert mean_pairwise_cosine(embedding[unseen]) < 0.2
