"""The official metric of each task, computed with scikit-learn / SciPy over the real (non-padding) examples."""

from __future__ import annotations

import numpy as np
from scipy import stats
from sklearn import metrics as skm


def classification_metrics(logits: np.ndarray, labels: np.ndarray, names: tuple) -> dict:
    """``names`` from: accuracy, f1 (positive class 1), mcc (Matthews correlation)."""
    predictions = np.argmax(logits, axis=-1)
    out = {"accuracy": float(np.mean(predictions == labels)) if len(labels) else 0.0}
    if "f1" in names:
        out["f1"] = float(skm.f1_score(labels, predictions, zero_division=0))
    if "mcc" in names:
        out["mcc"] = float(skm.matthews_corrcoef(labels, predictions))
    return out


def regression_metrics(scores: np.ndarray, labels: np.ndarray) -> dict:
    """Pearson and Spearman correlation (STS-B), their mean, and the MSE."""
    out = {"mse": float(np.mean((scores - labels) ** 2)) if len(labels) else 0.0}
    if len(labels) > 1 and np.std(scores) > 0 and np.std(labels) > 0:
        out["pearson"] = float(stats.pearsonr(scores, labels)[0])
        out["spearman"] = float(stats.spearmanr(scores, labels)[0])
    else:  # constant predictions: correlation undefined
        out["pearson"] = out["spearman"] = 0.0
    out["corr"] = (out["pearson"] + out["spearman"]) / 2
    return out


def mean_softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """The evaluation loss of a classifier: the mean over the examples of ``-log softmax(logits)[label]``."""
    if not len(labels):
        return 0.0
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(-np.mean(log_probs[np.arange(len(labels)), labels]))


def multiple_choice_metrics(logits: np.ndarray, labels: np.ndarray, levels: np.ndarray,
                            level_names=("middle", "high")) -> dict:
    """RACE: accuracy overall and per level (``levels`` indexes ``level_names``), with example counts."""
    correct = np.argmax(logits, axis=-1) == labels
    out = {"accuracy": float(correct.mean()) if len(labels) else 0.0, "num_examples": int(len(labels))}
    for i, name in enumerate(level_names):
        chosen = levels == i
        if chosen.any():
            out[f"accuracy_{name}"] = float(correct[chosen].mean())
            out[f"num_{name}"] = int(chosen.sum())
    return out
