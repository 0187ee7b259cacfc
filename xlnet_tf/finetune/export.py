"""SavedModel export for TF Serving and batch prediction.

The SavedModel has one explicit ``serving_default`` signature:
  inputs:  input_ids int32 [batch, seq], segment_ids int32 [batch, seq], padding_mask float32 [batch, seq]
           (1 = real token, 0 = padding; XLNet's layout: ``A <sep> B <sep> <cls>`` left-padded, segments
           A=0, B=1, CLS=2, PAD=4) -- for multiple choice (RACE) each is [batch, choices, seq];
  outputs: classification: ``logits`` and ``probabilities`` [batch, num_labels];
           regression: ``score`` [batch] (and ``logits`` [batch, 1]);
           multiple choice: ``logits`` and ``probabilities`` [batch, choices].
It is written to a temporary directory next to ``export_dir`` and renamed into place. ``assets.extra/`` holds
the SentencePiece model and ``labels.json`` for clients.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Optional

import tensorflow as tf

from xlnet_tf.io_utils import atomic_path


class _Serving(tf.Module):
    def __init__(self, model, kind: str):
        super().__init__(name="xlnet_serving")
        self.model = model
        rank = 3 if kind == "multiple_choice" else 2
        shape = [None] * rank
        specs = [tf.TensorSpec(shape, tf.int32, name="input_ids"), tf.TensorSpec(shape, tf.int32, name="segment_ids"),
                 tf.TensorSpec(shape, tf.float32, name="padding_mask")]

        def serve(input_ids, segment_ids, padding_mask):
            logits = model({"input_ids": input_ids, "segment_ids": segment_ids, "padding_mask": padding_mask},
                           training=False)["logits"]
            if kind == "regression":
                return {"score": logits[:, 0], "logits": logits}
            return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

        self.serve = tf.function(serve, input_signature=specs)


def export_saved_model(model, export_dir: str, kind: str = "classification", labels: Optional[list] = None,
                       spiece_model_file: Optional[str] = None) -> str:
    """Writes ``model`` (an ``XLNetClassifier`` or ``XLNetMultipleChoice``) as a SavedModel at ``export_dir``
    (replacing an earlier export atomically). ``kind``: classification | regression | multiple_choice."""
    if kind not in ("classification", "regression", "multiple_choice"):
        raise ValueError(f"kind must be classification, regression or multiple_choice, got {kind!r}")
    module = _Serving(model, kind)
    with atomic_path(export_dir) as tmp:
        tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
        extra = os.path.join(tmp, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, "labels.json"), "w", encoding="utf-8") as f:
            json.dump({"kind": kind, "labels": labels}, f)
        if spiece_model_file:
            shutil.copy(spiece_model_file, os.path.join(extra, os.path.basename(spiece_model_file)))
    return export_dir
