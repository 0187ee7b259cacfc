"""The fine-tuning heads (``XLNetClassifier``, ``XLNetMultipleChoice``, ``XLNetSquad``, ``XLNetTagger``) as the
Keras models users hold (``text_model.network``): Keras' own methods work on them, they say what their step
computes, and fine-tuning checkpoints written by earlier versions still restore."""

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf import XLNetConfig
from xlnet_tf.models.heads import XLNetClassifier
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
