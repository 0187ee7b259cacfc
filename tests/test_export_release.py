"""The original release layout, both ways: ``write_release`` (what ``python -m xlnet_tf.cli.export --format=release``
writes) gives xlnet_model.ckpt with exactly the original TF1 names and shapes, the release's xlnet_config.json
keys and spiece.model; reading it back with ``load_original_checkpoint`` gives identical outputs."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from classifier_helpers import SPIECE
from xlnet_tf.checkpoint import load_original_checkpoint
from xlnet_tf.cli import convert
from xlnet_tf.errors import InputError
from xlnet_tf.config import CHECKPOINT_KEYS, XLNetConfig
from xlnet_tf.finetuning.serving import write_release
from xlnet_tf.tasks.classification.classification_head import XLNetClassifier
from xlnet_tf.tasks.multiple_choice.multiple_choice_head import XLNetMultipleChoice
from xlnet_tf.tasks.squad.squad_head import XLNetSquad
from xlnet_tf.models.xlnet import XLNetPretrainer

CONFIG = XLNetConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=8000, dropout=0.0, dropatt=0.0)
NETWORK = ["model/transformer/word_embedding/lookup_table", "model/transformer/mask_emb/mask_emb",
           "model/transformer/r_w_bias", "model/transformer/r_r_bias", "model/transformer/r_s_bias",
           "model/transformer/seg_embed"] + [
    f"model/transformer/layer_{i}/{name}" for i in range(2) for name in (
        "rel_attn/q/kernel", "rel_attn/k/kernel", "rel_attn/v/kernel", "rel_attn/r/kernel", "rel_attn/o/kernel",
        "rel_attn/LayerNorm/gamma", "rel_attn/LayerNorm/beta", "ff/layer_1/kernel", "ff/layer_1/bias",
        "ff/layer_2/kernel", "ff/layer_2/bias", "ff/LayerNorm/gamma", "ff/LayerNorm/beta")]
SUMMARY = {"model/sequnece_summary/summary/kernel": [16, 16], "model/sequnece_summary/summary/bias": [16]}  # sic
# The original scripts' head variables: run_classifier.py, run_race.py, run_squad.py; the pretrainer's LM bias.
HEADS = {
    "pretrained": {"model/lm_loss/bias": [8000]},
    "classification": dict(SUMMARY, **{"model/classification_sst-2/logit/kernel": [16, 2],
                                       "model/classification_sst-2/logit/bias": [2]}),
    "regression": dict(SUMMARY, **{"model/regression_sts-b/logit/kernel": [16, 1],
                                   "model/regression_sts-b/logit/bias": [1]}),
    "multiple_choice": dict(SUMMARY, **{"logits/dense/kernel": [16, 1], "logits/dense/bias": [1]}),
    "squad": {"start_logits/dense/kernel": [16, 1], "start_logits/dense/bias": [1],
              "end_logits/dense_0/kernel": [32, 16], "end_logits/dense_0/bias": [16],
              "end_logits/LayerNorm/gamma": [16], "end_logits/LayerNorm/beta": [16],
              "end_logits/dense_1/kernel": [16, 1], "end_logits/dense_1/bias": [1],
              "answer_class/dense_0/kernel": [32, 16], "answer_class/dense_0/bias": [16],
              "answer_class/dense_1/kernel": [16, 1]},
}


def _model(kind):
    if kind == "pretrained":
        return XLNetPretrainer(CONFIG)
    if kind == "classification":
        return XLNetClassifier(CONFIG, num_labels=2, task_scope="sst-2")
    if kind == "regression":
        return XLNetClassifier(CONFIG, num_labels=1, task_scope="sts-b", regression=True)
    if kind == "multiple_choice":
        return XLNetMultipleChoice(CONFIG)
    return XLNetSquad(CONFIG, start_n_top=3, end_n_top=2)


def _inputs(kind, seq=12):
    rng = np.random.default_rng(0)
    shape = (2, 3, seq) if kind == "multiple_choice" else (2, seq)
    features = {"input_ids": rng.integers(5, 8000, shape).astype(np.int32),
                "segment_ids": rng.integers(0, 2, shape).astype(np.int32),
                "padding_mask": np.ones(shape, np.float32)}
    if kind == "squad":
        features.update(p_mask=np.zeros(shape, np.float32), cls_index=np.full([2], seq - 1, np.int32))
    return features


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_release_round_trip(tmp_path, kind):
    keras.utils.set_random_seed(3)
    model = _model(kind)
    for v in model.weights:  # non-trivial values everywhere (biases and LayerNorm too)
        v.assign(tf.random.normal(v.shape, stddev=0.1, dtype=v.dtype))
    features = _inputs(kind)
    expected = model(features, training=False)
    release = str(tmp_path / "release")
    write_release(model, release, CONFIG, SPIECE)
    assert sorted(os.listdir(release)) == ["spiece.model", "xlnet_config.json", "xlnet_model.ckpt.data-00000-of-00001",
                                           "xlnet_model.ckpt.index"]
    assert not [n for n in os.listdir(tmp_path) if n != "release"]  # built under a temporary name, renamed

    listed = dict(tf.train.list_variables(os.path.join(release, "xlnet_model.ckpt")))
    wanted = {name: list(var.shape) for name, var in model.tf1_variables().items()}
    assert listed == wanted
    assert set(listed) == set(NETWORK) | set(HEADS[kind]) and all(listed[k] == v for k, v in HEADS[kind].items())
    with open(os.path.join(release, "xlnet_config.json")) as f:
        assert sorted(json.load(f)) == sorted(CHECKPOINT_KEYS)
    config = XLNetConfig.from_json(os.path.join(release, "xlnet_config.json"), dropout=0.0, dropatt=0.0)

    keras.utils.set_random_seed(4)
    fresh = _model(kind) if config == CONFIG else None
    assert fresh is not None, "xlnet_config.json does not give back the model's shape"
    assert load_original_checkpoint(fresh, os.path.join(release, "xlnet_model.ckpt")) == []
    got = fresh(features, training=False)
    for key in expected:
        if key != "new_mems":
            np.testing.assert_array_equal(got[key].numpy(), expected[key].numpy(), err_msg=key)

    with pytest.raises(FileExistsError, match="already holds a release"):
        write_release(model, release, CONFIG, SPIECE)
    # python -m xlnet_tf.cli.convert: a pretrained release to the native layout; a fine-tuned one is refused by
    # name (not reported as a release missing its LM bias)
    native = str(tmp_path / "native")
    prefix = os.path.join(release, "xlnet_model.ckpt")
    config_path = os.path.join(release, "xlnet_config.json")
    if kind == "pretrained":
        convert.convert(prefix, config_path, native, os.path.join(release, "spiece.model"))
        assert sorted(os.listdir(native)) == ["checkpoint", "spiece.model", "xlnet_config.json",
                                              "xlnet_model-1.data-00000-of-00001", "xlnet_model-1.index"]
    else:
        with pytest.raises(InputError, match=rf"{prefix}: a fine-tuned checkpoint \(its head: .*\); convert "
                                             "writes pretrained networks"):
            convert.convert(prefix, config_path, native, os.path.join(release, "spiece.model"))
        assert not os.path.exists(native)


def test_a_release_layout_exports_as_hf_with_its_head(tmp_path):
    """cli.export --format=hf of a release directory (a --format=release export, or a conversion with its task
    scope), --predict_ckpt=<dir>/xlnet_model.ckpt or the directory alone (issue 36: was "not a checkpoint of this
    model" with an empty list): the TF1 checkpoint is read by its names, head included."""
    from classifier_helpers import micro_config

    from xlnet_tf import hf
    from xlnet_tf.cli.export import ExportSettings, export
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    config_path = micro_config(tmp_path)
    settings = ClassifierSettings.from_values(dict(task_name="sst-2", model_config_path=config_path,
                                                   spiece_model_file=SPIECE, model_dir=str(tmp_path / "run")))
    task = settings.family().task(settings)
    model = task.build_model()
    model({k: tf.constant(task.dummy_features[k])[None] for k in ("input_ids", "segment_ids", "padding_mask")})
    release = write_release(model, str(tmp_path / "release"), task.model_config, SPIECE)
    given = {"format", "task_name", "model_config_path", "spiece_model_file", "predict_ckpt"}
    for n, ckpt in enumerate((os.path.join(release, "xlnet_model.ckpt"), None)):
        out = export(ExportSettings(model_dir=release, export_dir=str(tmp_path / f"hf{n}"), format="hf",
                                    predict_ckpt=ckpt, task_name="sst-2", model_config_path=config_path,
                                    spiece_model_file=SPIECE), given - ({"predict_ckpt"} if ckpt is None else set()))
        checkpoint = hf.HFCheckpoint(out)
        assert checkpoint.architecture == "XLNetForSequenceClassification" and checkpoint.labels == ["0", "1"]
        kernel = model.tf1_variables()["model/classification_sst-2/logit/kernel"].numpy()
        np.testing.assert_array_equal(checkpoint.weights["logits_proj.weight"], kernel.T)
