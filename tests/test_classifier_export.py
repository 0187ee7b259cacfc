"""SavedModel export: explicit serving signature, reloaded with tf.saved_model.load, same logits as Keras."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from classifier_helpers import MICRO_CONFIG, SPIECE
from xlnet_tf.finetune.export import export_saved_model
from xlnet_tf.finetune.records import pack_sequence
from xlnet_tf.models.heads import XLNetClassifier, XLNetMultipleChoice


def _batch(shape_prefix=(3,), length=12):
    rng = np.random.default_rng(0)
    ids, segs, masks = [], [], []
    for i in range(int(np.prod(shape_prefix))):
        a, b = rng.integers(10, 8000, 2 + i % 3).tolist(), rng.integers(10, 8000, 3).tolist()
        x, s, m = pack_sequence(a, b, length)
        ids.append(x), segs.append(s), masks.append(m)
    shape = tuple(shape_prefix) + (length,)
    return {"input_ids": tf.constant(np.reshape(ids, shape), tf.int32),
            "segment_ids": tf.constant(np.reshape(segs, shape), tf.int32),
            "padding_mask": tf.constant(np.reshape(masks, shape), tf.float32)}


@pytest.mark.parametrize("kind", ["classification", "regression", "multiple_choice"])
def test_saved_model_matches_keras(tmp_path, kind):
    if kind == "multiple_choice":
        model, features = XLNetMultipleChoice(MICRO_CONFIG), _batch((2, 4))
    else:
        model = XLNetClassifier(MICRO_CONFIG, num_labels=3, task_scope="t", regression=kind == "regression")
        features = _batch()
    expected = model(features, training=False)["logits"].numpy()
    export_dir = str(tmp_path / "export")
    os.makedirs(export_dir)  # an earlier export is replaced atomically
    export_saved_model(model, export_dir, kind, labels=None if kind == "regression" else ["a", "b", "c"],
                       spiece_model_file=SPIECE)
    assert not [f for f in os.listdir(str(tmp_path)) if f.startswith(".export")]
    loaded = tf.saved_model.load(export_dir)
    serving = loaded.signatures["serving_default"]
    _, inputs = serving.structured_input_signature
    assert {k: (v.dtype, v.shape.rank) for k, v in inputs.items()} == {
        "input_ids": (tf.int32, features["input_ids"].shape.rank),
        "segment_ids": (tf.int32, features["input_ids"].shape.rank),
        "padding_mask": (tf.float32, features["input_ids"].shape.rank)}
    outputs = serving(**features)
    np.testing.assert_allclose(outputs["logits"].numpy(), expected, rtol=1e-5, atol=1e-5)
    if kind == "regression":
        np.testing.assert_allclose(outputs["score"].numpy(), expected[:, 0], rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(outputs["probabilities"].numpy(), tf.nn.softmax(expected).numpy(), atol=1e-5)
    # a different sequence length works through the same signature
    other = _batch((2, 4) if kind == "multiple_choice" else (3,), length=20)
    np.testing.assert_allclose(serving(**other)["logits"].numpy(), model(other, training=False)["logits"].numpy(),
                               rtol=1e-5, atol=1e-5)
    with open(os.path.join(export_dir, "assets.extra", "labels.json")) as f:
        assert json.load(f)["kind"] == kind
    assert os.path.exists(os.path.join(export_dir, "assets.extra", "spiece.model"))
