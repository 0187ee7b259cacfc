"""The fine-tuning heads (``XLNetClassifier``, ``XLNetMultipleChoice``, ``XLNetSquad``, ``XLNetTagger``) as the
Keras models users hold (``text_model.network``): Keras' own methods work on them (``summary()``, ``export()``),
they say what their step computes, and fine-tuning checkpoints written by earlier versions still restore."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from export_helpers import serve
from xlnet_tf import XLNetConfig, XLNetModel, XLNetPretrainer
from xlnet_tf.finetuning.serving import custom_ops
from xlnet_tf.tasks.classification.classification_head import XLNetClassifier
from xlnet_tf.tasks.multiple_choice.multiple_choice_head import XLNetMultipleChoice
from xlnet_tf.tasks.squad.squad_head import XLNetSquad
from xlnet_tf.tasks.tagging.tagging_head import XLNetTagger

CONFIG = XLNetConfig(n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=50, ff_activation="gelu",
                     untie_r=True, dropout=0.0, dropatt=0.0)
HEADS = {  # each head, and the rows of a sequence its network's last layer runs at (None: every row)
    "classifier": (lambda: XLNetClassifier(CONFIG, num_labels=3), 1),
    "classifier, first token": (lambda: XLNetClassifier(CONFIG, num_labels=3, summary_type="first"), 1),
    "classifier, mean": (lambda: XLNetClassifier(CONFIG, num_labels=3, summary_type="mean"), None),
    "classifier, long documents": (lambda: XLNetClassifier(CONFIG, num_labels=3, num_segments=2, mem_len=8), None),
    "multiple choice": (lambda: XLNetMultipleChoice(CONFIG), 1),
    "squad": (lambda: XLNetSquad(CONFIG), None),
    "tagger": (lambda: XLNetTagger(CONFIG, num_labels=5), None),
}


def features(batch=2, length=8, options=None):
    shape = [batch, length] if options is None else [batch, options, length]
    ids = np.arange(np.prod(shape)).reshape(shape) % 40 + 9
    return {"input_ids": tf.constant(ids, tf.int32), "segment_ids": tf.zeros(shape, tf.int32),
            "padding_mask": tf.ones(shape, tf.float32)}  # every token real


@pytest.mark.parametrize("head", HEADS)
def test_keras_summary_lists_the_network_and_the_rows_its_last_layer_runs(head):
    build, rows = HEADS[head]
    model = build()
    lines = []
    model.summary(print_fn=lambda line, **_: lines.append(line))  # the summary layer once hid this method
    text = "\n".join(lines)
    total = sum(int(np.prod(w.shape)) for w in model.weights)
    assert "transformer (XLNetModel)" in text and f"Total params: {total:,}" in text, text
    assert model.last_layer_rows == rows


@pytest.mark.parametrize("head", ["classifier", "multiple choice", "squad", "tagger"])
def test_a_padding_mask_under_another_name_is_refused(head):
    """Heads read their features' input_ids, segment_ids and padding_mask (their labels and own inputs lie there
    too); HF's attention_mask would be left unread, every padding token visible: refused, naming ours."""
    model = HEADS[head][0]()
    inputs = features(options=3 if head == "multiple choice" else None)
    with pytest.raises(ValueError, match="does not read attention_mask; HF's attention_mask is padding_mask here"):
        model(dict(inputs, attention_mask=inputs["padding_mask"]))


@pytest.mark.parametrize("head", ["classifier", "multiple choice", "squad", "tagger"])
def test_a_frozen_head_stays_frozen_through_its_config(head):
    """The heads' get_config wrote no ``trainable``: a frozen model came back from a .keras file trainable."""
    model = HEADS[head][0]()
    model.trainable = False
    restored = type(model).from_config(model.get_config())
    assert not restored.trainable and restored.trainable_weights == []
    assert restored.get_config() == model.get_config()


@pytest.mark.parametrize("head", ["classifier", "multiple choice", "squad", "tagger"])
def test_weight_paths_do_not_count_the_heads_built_before(head):
    """Training checkpoints and XLNetAdamW's no_decay_paths / lr_multipliers name weights by path: a head built
    after another in the process (a notebook's second model, a .keras file loaded beside one) has the same
    paths (the classifier's summary bias was sequence_summary_1/summary/bias, weight-decayed once reloaded)."""
    first, second = HEADS[head][0](), HEADS[head][0]()
    assert [w.path for w in second.weights] == [w.path for w in first.weights]


def written_before_the_rename(cls):
    """``cls`` writing the checkpoint layout of before 2026-11-28, when the heads' sequence summary was the
    attribute ``summary`` (and hid ``keras.Model.summary``)."""

    class Before(cls):
        def _trackable_children(self, save_type="checkpoint", **kwargs):
            children = dict(super()._trackable_children(save_type, **kwargs))
            children["summary"] = children.pop("sequence_summary")
            return children

    return Before


@pytest.mark.parametrize("cls, kwargs, inputs", [(XLNetClassifier, dict(num_labels=3), features()),
                                                  (XLNetMultipleChoice, {}, features(options=3))])
def test_fine_tuning_checkpoints_of_earlier_versions_restore(cls, kwargs, inputs, tmp_path):
    old, new = written_before_the_rename(cls)(CONFIG, **kwargs), cls(CONFIG, **kwargs)
    expected = old(inputs)["logits"].numpy()
    path = tf.train.Checkpoint(model=old).write(str(tmp_path / "before"))
    assert any(name.startswith("model/summary/") for name, _ in tf.train.list_variables(path))
    assert np.abs(new(inputs)["logits"].numpy() - expected).max() > 1e-4
    tf.train.Checkpoint(model=new).read(path).assert_consumed()
    np.testing.assert_array_equal(new(inputs)["logits"].numpy(), expected)


def served_features(head):
    inputs = features(options=3 if head == "multiple choice" else None)
    if head == "squad":
        inputs.update(p_mask=tf.constant([[1.0] + [0.0] * 7, [1.0, 1.0] + [0.0] * 6]), cls_index=tf.constant([7, 7]))
    return inputs


@pytest.mark.parametrize("head", [h for h in HEADS if h != "classifier, long documents"])
def test_keras_export_serves_the_heads_inputs_with_stock_tensorflow_ops(head, tmp_path):
    """Keras' ``model.export(path)`` needs no input_signature (the model builds itself, so Keras recorded no
    shapes) and writes what TF Serving loads: no op of ours, and the model's inference outputs by input name."""
    model, inputs = HEADS[head][0](), served_features(head)
    model.export(str(tmp_path), verbose=False)
    assert custom_ops(str(tmp_path)) == {}
    served = tf.saved_model.load(str(tmp_path)).signatures["serving_default"](**inputs)
    expected = model(inputs, training=False)
    assert sorted(served) == sorted(expected)
    for name in expected:
        np.testing.assert_allclose(served[name].numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-6)


def test_keras_export_of_a_long_document_classifier_asks_for_its_length(tmp_path):
    model = HEADS["classifier, long documents"][0]()
    with pytest.raises(ValueError, match=r"2 segments has a fixed length; export it with input_signature="):
        model.export(str(tmp_path))
    model.export(str(tmp_path), verbose=False, input_signature=[model.serving_inputs((None, 8))])
    inputs = served_features("classifier")
    served = tf.saved_model.load(str(tmp_path)).signatures["serving_default"](**inputs)
    np.testing.assert_allclose(served["logits"].numpy(), model(inputs, training=False)["logits"].numpy(), rtol=1e-5,
                               atol=1e-6)


def test_the_network_exported_by_keras_runs_in_tensorflow_alone(tmp_path):
    """``XLNetModel.export(path)`` loaded where only TensorFlow is (tests/serving_client.py: no xlnet_tf, no
    Keras), called by input name."""
    model, inputs = XLNetModel(CONFIG), served_features("tagger")
    model.export(str(tmp_path), verbose=False)
    reply = serve({"export": str(tmp_path), "calls": [{"signature": "serving_default", "inputs": {
        name: {"dtype": value.dtype.name, "value": value.numpy().tolist()} for name, value in inputs.items()}}]})
    output = reply["calls"][0]["outputs"]["sequence_output"]
    assert output["shape"] == [2, 8, CONFIG.d_model]
    np.testing.assert_allclose(np.array(output["value"], np.float32),
                               model(inputs, training=False)["sequence_output"].numpy(), rtol=1e-5, atol=1e-5)


def test_a_network_with_memory_exports_its_new_mems_as_one_tensor(tmp_path):
    """With mem_len > 0 Keras' export refused the network and the pretrainer: a signature cannot return new_mems'
    list of n_layer tensors. They come as one [n_layer, B, mem_len, D] output."""
    model, inputs = XLNetModel(dataclasses.replace(CONFIG, mem_len=4)), served_features("tagger")
    model.export(str(tmp_path), verbose=False)
    served = tf.saved_model.load(str(tmp_path)).signatures["serving_default"](**inputs)
    expected = model(inputs, training=False)
    assert served["new_mems"].shape == (CONFIG.n_layer, 2, 4, CONFIG.d_model)
    np.testing.assert_allclose(served["new_mems"].numpy(), tf.stack(expected["new_mems"]).numpy(), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(served["sequence_output"].numpy(), expected["sequence_output"].numpy(), rtol=1e-5,
                               atol=1e-5)


def test_the_pretrainer_exported_by_keras_gives_its_lm_logits(tmp_path):
    model, inputs = XLNetPretrainer(CONFIG), served_features("tagger")
    model.export(str(tmp_path), verbose=False)
    assert custom_ops(str(tmp_path)) == {}
    served = tf.saved_model.load(str(tmp_path)).signatures["serving_default"](**inputs)
    np.testing.assert_allclose(served["lm_logits"].numpy(), model(inputs, training=False)["lm_logits"].numpy(),
                               rtol=1e-5, atol=1e-5)


def test_squad_features_without_its_own_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match="XLNetSquad takes p_mask .* cls_index missing"):
        XLNetSquad(CONFIG)(dict(features(), p_mask=tf.zeros([2, 8])))


def test_a_sequence_without_tokens_is_refused_by_name():
    with pytest.raises(ValueError, match=r"input_ids hold no tokens \(shape \[2, 0\]\)"):
        XLNetModel(CONFIG)({"input_ids": tf.zeros([2, 0], tf.int32)})
