"""SavedModel export for TF Serving and batch prediction: one serving module (``ServingModule``, written by
``write_serving_model``) for the classifier and RACE exports here and SQuAD's (``squad_model.export_saved_model``).

The classifier's SavedModel has one explicit ``serving_default`` signature:
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
from typing import Callable, Optional

import tensorflow as tf

from xlnet_tf import kernels
from xlnet_tf.io_utils import atomic_path


class ServingModule(tf.Module):
    """The one serving module of the package: ``serve`` calls ``model`` (inference mode) on the tensors named by
    ``inputs`` (name -> ``tf.TensorSpec``; the signature's input names) and returns ``outputs(model_outputs)``."""

    def __init__(self, model, inputs: dict, outputs: Callable[[dict], dict], name: str = "xlnet_serving"):
        super().__init__(name=name)
        self.model = model
        names = list(inputs)

        def serve(*tensors):
            return outputs(model(dict(zip(names, tensors)), training=False))

        self.serve = tf.function(serve, input_signature=[tf.TensorSpec(spec.shape, spec.dtype, name=name)
                                                         for name, spec in inputs.items()])


def write_serving_model(model, export_dir: str, inputs: dict, outputs: Callable[[dict], dict],
                        assets: Optional[Callable[[str], None]] = None) -> str:
    """Writes a SavedModel with the ``serving_default`` signature of ``ServingModule(model, inputs, outputs)`` at
    ``export_dir``, built under a temporary name next to it and renamed into place (an earlier export is replaced
    only once the new one is complete). ``assets(dir)`` may add files for clients to ``assets.extra/``. The
    signature is traced with the plain kernels: TF Serving runs stock TensorFlow ops only."""
    module = ServingModule(model, inputs, outputs)
    with atomic_path(export_dir) as tmp, kernels.use("plain"):
        tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
        if assets:
            extra = os.path.join(tmp, "assets.extra")
            os.makedirs(extra, exist_ok=True)
            assets(extra)
    return export_dir


def sequence_inputs(rank: int = 2, **more) -> dict:
    """The XLNet input tensors of the serving signature (``[batch, seq]``, or ``[batch, choices, seq]`` for
    rank 3), then ``more``."""
    shape = [None] * rank
    return dict(input_ids=tf.TensorSpec(shape, tf.int32), segment_ids=tf.TensorSpec(shape, tf.int32),
                padding_mask=tf.TensorSpec(shape, tf.float32), **more)


def export_saved_model(model, export_dir: str, kind: str = "classification", labels: Optional[list] = None,
                       spiece_model_file: Optional[str] = None) -> str:
    """Writes ``model`` (an ``XLNetClassifier`` or ``XLNetMultipleChoice``) as a SavedModel at ``export_dir``
    (replacing an earlier export atomically). ``kind``: classification | regression | multiple_choice."""
    if kind not in ("classification", "regression", "multiple_choice"):
        raise ValueError(f"kind must be classification, regression or multiple_choice, got {kind!r}")

    def outputs(model_outputs):
        logits = model_outputs["logits"]
        if kind == "regression":
            return {"score": logits[:, 0], "logits": logits}
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

    def assets(extra):
        with open(os.path.join(extra, "labels.json"), "w", encoding="utf-8") as f:
            json.dump({"kind": kind, "labels": labels}, f)
        if spiece_model_file:
            shutil.copy(spiece_model_file, os.path.join(extra, os.path.basename(spiece_model_file)))

    rank = 3 if kind == "multiple_choice" else 2
    return write_serving_model(model, export_dir, sequence_inputs(rank), outputs, assets)
