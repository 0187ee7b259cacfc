"""The serving writer for each classifier kind (classification, regression, multiple choice), in process: both
signatures reload with tf.saved_model.load and give the Keras model's outputs; versions only go up and are never
replaced. (The fresh-process round trip through run_classifier.py is tests/test_export.py.)"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from classifier_helpers import MICRO_CONFIG, SPIECE
from xlnet_tf import tasks
from xlnet_tf.finetuning.serving import ServingInfo, existing_versions, export_serving, next_version
from xlnet_tf.models.heads import XLNetClassifier
from xlnet_tf.tasks.multiple_choice.multiple_choice_head import XLNetMultipleChoice
from xlnet_tf.preprocessing import XLNetPreprocessor

SEQ = 24
TEXT = {"classification": dict(sentence=["A gripping film.", "", "Dull, dull, dull " * 30],
                               sentence2=["It was fine.", "   ", "\u00e9t\u00e9"]),
        "regression": dict(sentence=["Two dogs play.", "A man sings."]),
        "multiple_choice": dict(article=["Tom went to the market and bought apples.", "Short."],
                                question=["What did Tom buy?", "_ is it?"],
                                options=[["apples", "pears", "milk"], ["This", "That", ""]])}


@pytest.mark.parametrize("kind", ["classification", "regression", "multiple_choice"])
@pytest.mark.slow
def test_both_signatures_match_keras(tmp_path, kind):
    if kind == "multiple_choice":
        model = XLNetMultipleChoice(MICRO_CONFIG)
        info = ServingInfo(kind=kind, task="race", max_seq_length=SEQ, labels=list("ABCD"), global_step=5,
                           max_qa_length=10, family=tasks.for_kind(kind))
    else:
        model = XLNetClassifier(MICRO_CONFIG, num_labels=3, task_scope="t", regression=kind == "regression")
        info = ServingInfo(kind=kind, task="t", max_seq_length=SEQ, labels=None if kind == "regression" else
                           ["a", "b", "c"], pair=kind == "classification", global_step=5, family=tasks.for_kind(kind))
    path = export_serving(model, str(tmp_path / "serving"), info, SPIECE)
    assert path == str(tmp_path / "serving" / "5")
    loaded = tf.saved_model.load(path)

    pre = XLNetPreprocessor.from_file(SPIECE, seq_length=SEQ, max_qa_length=10)
    texts = TEXT[kind]
    features = pre.multiple_choice(**texts) if kind == "multiple_choice" else pre(*texts.values())
    expected = model(features, training=False)["logits"].numpy()
    by_text = loaded.signatures["serving_default"](**{k: tf.constant(v) for k, v in texts.items()})
    by_ids = loaded.signatures["serve_ids"](**features)
    # The classification rows' second has no text ("" and "   "): raw text gets no answer for it, as --do_predict
    # skips such a row (zeros, label ""); its ids are answered as any others.
    answered = np.array([kind != "classification" or i != 1 for i in range(len(expected))])
    for outputs, rows in ((by_text, answered), (by_ids, np.ones_like(answered))):
        want = np.where(rows[:, None], expected, 0)
        np.testing.assert_allclose(outputs["logits"].numpy(), want, rtol=1e-5, atol=1e-6)
        if kind == "regression":
            np.testing.assert_allclose(outputs["score"].numpy(), expected[:, 0], rtol=1e-5, atol=1e-6)
        else:
            probabilities = np.where(rows[:, None], tf.nn.softmax(expected).numpy(), 0)
            np.testing.assert_allclose(outputs["probabilities"].numpy(), probabilities, atol=1e-6)
        if kind == "classification":
            labels = ["abc"[i] if row else "" for i, row in zip(expected.argmax(-1), rows)]
            assert [x.decode() for x in outputs["label"].numpy()] == labels
        if kind == "multiple_choice":
            assert outputs["choice"].numpy().tolist() == expected.argmax(-1).tolist()
    # ids of another length work through serve_ids
    if kind != "multiple_choice":
        short = {k: v[:, -12:] for k, v in features.items()}
        np.testing.assert_allclose(loaded.signatures["serve_ids"](**short)["logits"].numpy(),
                                   model(short, training=False)["logits"].numpy(), rtol=1e-5, atol=1e-6)
    meta = {k: v.numpy() for k, v in loaded.signatures["metadata"]().items()}
    assert meta["kind"].decode() == kind and meta["max_seq_length"] == SEQ and meta["global_step"] == 5
    with open(os.path.join(path, "assets.extra", "labels.json")) as f:
        assert json.load(f)["kind"] == kind
    assert os.path.exists(os.path.join(path, "assets.extra", "spiece.model"))


def test_versions_only_go_up_and_are_never_replaced(tmp_path, monkeypatch):
    base = str(tmp_path)
    assert next_version(base, 300) == 300
    os.makedirs(os.path.join(base, "300"))
    os.makedirs(os.path.join(base, "not-a-version"))
    assert next_version(base, 300) == 301 and next_version(base, 200) == 301 and next_version(base, 400) == 400
    monkeypatch.setattr("time.time", lambda: 1_800_000_000.5)
    assert next_version(base, 0) == 1_800_000_000  # no global step: a timestamp
    assert existing_versions(base) == [300]
