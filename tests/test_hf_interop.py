"""HuggingFace XLNet checkpoints in and out (xlnet_tf.hf): every HF head class, both directions, logits compared.

The HF models are built by ``transformers`` (the test extra) from a tiny random config, every parameter perturbed
(HF initialises LayerNorms to 1/0 and biases to 0, which would hide a swapped or untransposed weight), saved as
HF saves them, and read here without torch; our models go the other way and HF's ``from_pretrained`` reads them.
"""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

from needs import require  # noqa: E402
from squad_helpers import squad_release  # noqa: E402,F401 (conftest's squad_run: made on the background thread)

torch = require("torch")
transformers = require("transformers")

from xlnet_tf import hf, load_network  # noqa: E402
from xlnet_tf.checkpoint import load_pretrained  # noqa: E402
from xlnet_tf.errors import InputError  # noqa: E402
from xlnet_tf.tasks.classification.classification_head import XLNetClassifier  # noqa: E402
from xlnet_tf.tasks.multiple_choice.multiple_choice_head import XLNetMultipleChoice  # noqa: E402
from xlnet_tf.tasks.squad.squad_head import XLNetSquad  # noqa: E402
from xlnet_tf.tasks.tagging.tagging_head import XLNetTagger  # noqa: E402
from xlnet_tf.models.xlnet import XLNetModel, XLNetPretrainer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPIECE = os.path.join(ROOT, "data", "spiece.model")
TOL = 1e-5

# Tiny, with data/spiece.model's vocabulary so that the text models can load it; 3 labels.
HF_CONFIG = dict(vocab_size=8000, d_model=16, n_layer=2, n_head=2, d_inner=32, ff_activation="gelu",
                 num_labels=3, start_n_top=3, end_n_top=2, dropout=0.0, summary_last_dropout=0.0)

# Two rows of 7 tokens: the second left-padded by two (the classification layout: <cls> last).
IDS = np.array([[17, 250, 38, 999, 4, 45, 3], [5, 5, 61, 72, 4, 9, 3]], np.int64)
SEGMENTS = np.array([[0, 0, 0, 0, 1, 1, 2], [0, 0, 0, 0, 1, 1, 2]], np.int64)
MASK = np.array([[1] * 7, [0, 0, 1, 1, 1, 1, 1]], np.int64)
HEADS = ["XLNetModel", "XLNetLMHeadModel", "XLNetForSequenceClassification", "XLNetForMultipleChoice",
         "XLNetForTokenClassification", "XLNetForQuestionAnsweringSimple", "XLNetForQuestionAnswering"]


def _hf_model(architecture: str, seed: int = 0, **config):
    torch.manual_seed(seed)
    if architecture == "XLNetForQuestionAnsweringSimple":
        config = {"num_labels": 2, **config}  # start and end
    model = getattr(transformers, architecture)(transformers.XLNetConfig(**{**HF_CONFIG, **config})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def _save_hf(model, folder, lower_case=False) -> str:
    """As on the Hub: the model's files, spiece.model and tokenizer_config.json (its casing)."""
    model.save_pretrained(folder)
    with open(SPIECE, "rb") as f, open(os.path.join(folder, "spiece.model"), "wb") as out:
        out.write(f.read())
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "XLNetTokenizer", "do_lower_case": lower_case, "remove_space": True,
                   "keep_accents": False}, f)
    return str(folder)


def _torch_inputs():
    return dict(input_ids=torch.tensor(IDS), token_type_ids=torch.tensor(SEGMENTS),
                attention_mask=torch.tensor(MASK))


def _features():
    return dict(input_ids=tf.constant(IDS, tf.int32), segment_ids=tf.constant(SEGMENTS, tf.int32),
                padding_mask=tf.constant(MASK, tf.float32))


def _close(ours, theirs, what):
    ours, theirs = np.asarray(ours), np.asarray(theirs.detach().numpy() if hasattr(theirs, "detach") else theirs)
    assert ours.shape == theirs.shape, what
    np.testing.assert_allclose(ours, theirs, atol=TOL, rtol=TOL, err_msg=what)


def _ours(architecture, checkpoint):
    """Our model for an HF architecture, loaded from ``checkpoint`` (an HFCheckpoint)."""
    config = checkpoint.xlnet_config(dropout=0.0, dropatt=0.0)
    summary = checkpoint.summary() if checkpoint.head in ("XLNetClassifier", "XLNetMultipleChoice") else {}
    model = {"XLNetModel": lambda: XLNetModel(config), "XLNetLMHeadModel": lambda: XLNetPretrainer(config),
             "XLNetForSequenceClassification": lambda: XLNetClassifier(config, checkpoint.num_labels, **summary),
             "XLNetForMultipleChoice": lambda: XLNetMultipleChoice(config, **summary),
             "XLNetForQuestionAnswering": lambda: XLNetSquad(config, start_n_top=3, end_n_top=2),
             "XLNetForTokenClassification": lambda: XLNetTagger(config, checkpoint.num_labels),
             "XLNetForQuestionAnsweringSimple": lambda: XLNetModel(config)}[architecture]()
    from xlnet_tf.checkpoint import assign_arrays

    tensors = checkpoint.tf1_tensors(task_scope=getattr(model, "task_scope", "task"))
    assign_arrays(model, tensors, checkpoint.source)
    return model


def _compare(architecture, theirs, ours, token_arrays=None):
    """HF's outputs of ``theirs`` against ``ours`` on the same inputs."""
    features = _features()
    with torch.no_grad():
        if architecture == "XLNetForMultipleChoice":
            out = theirs(**{k: v[None] for k, v in _torch_inputs().items()})
            _close(ours({k: v[None] for k, v in features.items()})["logits"], out.logits, architecture)
        elif architecture == "XLNetForQuestionAnswering":
            p_mask = np.array([[1, 0, 0, 0, 1, 1, 1], [1, 1, 0, 0, 0, 1, 1]], np.float32)
            cls_index = np.array([6, 6])
            out = theirs(**_torch_inputs(), p_mask=torch.tensor(p_mask), cls_index=torch.tensor(cls_index))
            mine = ours({**features, "p_mask": tf.constant(p_mask), "cls_index": tf.constant(cls_index)})
            # HF reports probabilities under *_log_probs, its end beams laid out [end_n_top, start_n_top].
            np.testing.assert_array_equal(mine["start_top_index"], out.start_top_index.numpy())
            _close(np.exp(mine["start_top_log_probs"]), out.start_top_log_probs, "start")
            k = mine["start_top_index"].shape[1]
            swap = (lambda x: np.asarray(x).reshape(2, k, -1).transpose(0, 2, 1).reshape(2, -1))
            np.testing.assert_array_equal(swap(mine["end_top_index"]), out.end_top_index.numpy())
            _close(swap(np.exp(mine["end_top_log_probs"])), out.end_top_log_probs, "end")
            _close(mine["cls_logits"], out.cls_logits, "answer class")
        else:
            out = theirs(**_torch_inputs())
            if architecture == "XLNetModel":
                _close(ours(features)["sequence_output"], out.last_hidden_state, architecture)
            elif architecture == "XLNetLMHeadModel":
                _close(ours(features)["lm_logits"], out.logits, architecture)
            elif architecture in ("XLNetForSequenceClassification", "XLNetForTokenClassification"):
                _close(ours(features)["logits"], out.logits, architecture)
            else:  # simple QA's per-token head: our backbone's sequence output through the head's arrays
                hidden = ours(features)["sequence_output"].numpy()
                _close(hidden @ token_arrays["kernel"] + token_arrays["bias"],
                       torch.stack([out.start_logits, out.end_logits], -1), architecture)


@pytest.mark.parametrize("architecture", HEADS)
def test_hf_checkpoint_loads_with_the_same_logits(architecture, tmp_path):
    theirs = _hf_model(architecture)
    folder = _save_hf(theirs, tmp_path / "hf")
    assert os.path.exists(os.path.join(folder, "model.safetensors"))
    checkpoint = hf.HFCheckpoint(folder)
    ours = _ours(architecture, checkpoint)
    token = checkpoint.token_head() if checkpoint.head == "per_token" else None
    _compare(architecture, theirs, ours, token)


def test_load_network_builds_and_loads_from_an_hf_directory_in_one_call(tmp_path):
    """``xlnet_tf.load_network``: config.json read, weights loaded; the LM head with ``pretrainer=True``."""
    for architecture, pretrainer in (("XLNetModel", False), ("XLNetLMHeadModel", True)):
        theirs = _hf_model(architecture)
        folder = _save_hf(theirs, tmp_path / architecture)
        ours = load_network(folder, pretrainer=pretrainer, dropout=0.0, dropatt=0.0)
        assert type(ours) is (XLNetPretrainer if pretrainer else XLNetModel)
        _compare(architecture, theirs, ours)


@pytest.mark.parametrize("architecture", [a for a in HEADS if a != "XLNetForQuestionAnsweringSimple"])
def test_our_model_saved_as_hf_gives_hf_the_same_logits(architecture, tmp_path):
    # Ours from an HF model of another seed, so the weights are not HF's defaults; then out through save_model.
    source = hf.HFCheckpoint(_save_hf(_hf_model(architecture, seed=1), tmp_path / "source"))
    ours = _ours(architecture, source)
    token = source.token_head() if source.head == "per_token" else None
    folder = hf.save_model(ours, str(tmp_path / "out"), spiece_model=SPIECE, token_arrays=token)
    theirs = getattr(transformers, architecture).from_pretrained(folder).eval()
    _compare(architecture, theirs, ours, token)


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_pytorch_bin_is_read_without_torch(tmp_path, zip_format):
    theirs = _hf_model("XLNetForSequenceClassification")
    folder = tmp_path / "bin"
    folder.mkdir()
    theirs.config.save_pretrained(folder)
    # Hub models saved before PyTorch 1.6 (2020) are in torch.save's legacy format, later ones in its zip format.
    torch.save(theirs.state_dict(), folder / "pytorch_model.bin", _use_new_zipfile_serialization=zip_format)
    blocked = dict.fromkeys(["torch"])  # the reader must not import torch
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name == "torch"}
    try:
        sys.modules.update(blocked)
        checkpoint = hf.HFCheckpoint(str(folder))
        weights = checkpoint.weights
    finally:
        sys.modules.pop("torch")
        sys.modules.update(saved)
    state = {k.removeprefix("transformer."): v.numpy() for k, v in theirs.state_dict().items()}
    assert set(weights) == set(state)
    for name in state:
        np.testing.assert_array_equal(weights[name], state[name], err_msg=name)


def test_bfloat16_safetensors_are_widened_exactly(tmp_path):
    theirs = _hf_model("XLNetModel").to(torch.bfloat16)
    theirs.save_pretrained(tmp_path)
    weights = hf.read_weights(str(tmp_path))
    for name, value in theirs.state_dict().items():
        np.testing.assert_array_equal(weights[name], value.float().numpy(), err_msg=name)
    # bfloat16 beside float32 and float16 in one file, as transformers writes and reads it (it was refused)
    from safetensors.torch import save_file

    mixed = {name: value.float() if "layer.0" in name else value.half() if "layer.1" in name else value
             for name, value in theirs.state_dict().items()}
    save_file(mixed, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    weights = hf.read_weights(str(tmp_path))
    for name, value in mixed.items():
        np.testing.assert_array_equal(weights[name], value.float().numpy(), err_msg=name)


def test_unmapped_and_missing_weights_are_named(tmp_path):
    folder = _save_hf(_hf_model("XLNetModel"), tmp_path / "hf")
    checkpoint = hf.HFCheckpoint(folder)
    checkpoint.weights["layer.0.rel_attn.extra"] = np.zeros(3, np.float32)
    with pytest.raises(InputError, match="does not map: layer.0.rel_attn.extra"):
        checkpoint.tf1_tensors()
    del checkpoint.weights["layer.0.rel_attn.extra"], checkpoint.weights["layer.1.ff.layer_2.bias"]
    with pytest.raises(InputError, match="'layer.1.ff.layer_2.bias' is missing"):
        checkpoint.tf1_tensors()


@pytest.mark.slow
def test_text_model_from_hf_directory_takes_config_head_and_casing(tmp_path):
    """from_checkpoint on an HF classifier: its labels, summary and lower-casing; the tokenizer's ids are HF's."""
    import xlnet_tf

    theirs = _hf_model("XLNetForSequenceClassification", summary_use_proj=False,
                       summary_activation="linear", id2label={0: "neg", 1: "neutral", 2: "pos"})
    folder = _save_hf(theirs, tmp_path / "hf", lower_case=True)
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, seq_length=16, dropout=0.0, dropatt=0.0)
    assert model.network.num_labels == 3 and not model.network.use_summ_proj
    # id2label names the classes: kept in a .keras file's config, the export's label names
    assert xlnet_tf.XLNetTextClassifier.from_config(model.get_config()).labels == ["neg", "neutral", "pos"]
    with open(os.path.join(model.export(str(tmp_path / "serving")), "assets.extra", "labels.json")) as f:
        assert json.load(f)["labels"] == ["neg", "neutral", "pos"]
    # new_head=True: a new head, though this one fits (the same classes of another task), and so no class names
    fresh = xlnet_tf.XLNetTextClassifier.from_checkpoint(folder, seq_length=16, new_head=True)
    assert fresh.labels is None and not np.allclose(fresh.network.logit.kernel, model.network.logit.kernel)
    np.testing.assert_array_equal(fresh.network.xlnet.word_embedding, model.network.xlnet.word_embedding)
    texts = ["Crème BRÛLÉE, déjà vu.", "A  Gripping ``film''!"]
    encoded = model.preprocessor(tf.constant(texts))
    tokenizer = transformers.XLNetTokenizer.from_pretrained(folder)
    for row, text in enumerate(texts):
        real = encoded["padding_mask"][row].numpy() > 0
        assert encoded["input_ids"][row].numpy()[real].tolist() == tokenizer(text)["input_ids"], text
    hf_ids = tokenizer(texts, padding="max_length", max_length=16, return_tensors="pt", return_token_type_ids=True)
    with torch.no_grad():
        expected = theirs(input_ids=hf_ids["input_ids"], token_type_ids=hf_ids["token_type_ids"],
                          attention_mask=hf_ids["attention_mask"]).logits
    _close(model.predict(texts, verbose=0), expected, "text classifier")
    # The network alone into another head, only when asked.
    with pytest.raises(InputError, match="does not fit"):
        xlnet_tf.XLNetTextMultipleChoice.from_checkpoint(folder, seq_length=16)
    assert xlnet_tf.XLNetTextMultipleChoice.from_checkpoint(folder, seq_length=16, new_head=True) is not None
    checkpoint = hf.HFCheckpoint(folder)
    checkpoint.config["summary_activation"] = "tanh"  # HF's tanh without a projection: not this stack's summary
    with pytest.raises(InputError, match="summary_activation 'tanh' with summary_use_proj False"):
        checkpoint.summary()
    network = XLNetModel(checkpoint.xlnet_config())
    load_pretrained(network, folder)
    _close(network.word_embedding.numpy(), theirs.transformer.word_embedding.weight, "embedding")


def test_hub_name_downloads_only_when_asked_and_says_what_to_do_offline(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    def snapshot_download(repo, revision=None, allow_patterns=None, local_files_only=False):
        calls.append((repo, revision, local_files_only))
        if local_files_only:
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        if offline:
            raise ConnectionError("no network")
        (tmp_path / "model.safetensors").write_bytes(b"")  # the weights it found: no pytorch_model.bin asked for
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    offline = False
    assert hf.resolve("hf://xlnet/xlnet-base-cased@v1") == str(tmp_path)
    assert calls == [("xlnet/xlnet-base-cased", "v1", True), ("xlnet/xlnet-base-cased", "v1", False)]
    offline = True
    with pytest.raises(InputError) as error:
        hf.resolve("hf://xlnet/xlnet-base-cased")
    assert "hf download xlnet/xlnet-base-cased config.json" in str(error.value)
    assert "--local-dir DIR" in str(error.value) and "HF_HUB_CACHE=" in str(error.value)
    assert hf.resolve("/a/local/dir") == "/a/local/dir"  # no scheme: never the hub
    with pytest.raises(InputError, match="not a HuggingFace Hub model name"):
        hf.resolve("hf://a b")


def test_hf_config_json_reads_as_xlnet_config(tmp_path):
    from xlnet_tf.config import XLNetConfig

    folder = _save_hf(_hf_model("XLNetModel", ff_activation="gelu_new"), tmp_path / "hf")
    config = XLNetConfig.from_json(os.path.join(folder, "config.json"), dropout=0.0)
    assert (config.n_token, config.d_model, config.d_head, config.ff_activation) == (8000, 16, 8, "gelu")
    values = json.load(open(os.path.join(folder, "config.json")))
    values["layer_norm_eps"] = 1e-5
    json.dump(values, open(os.path.join(folder, "config.json"), "w"))
    with pytest.raises(InputError, match="layer_norm_eps"):
        XLNetConfig.from_json(os.path.join(folder, "config.json"))


def test_memory_settings_go_both_ways_so_a_document_read_in_segments_gives_hf_our_logits(tmp_path):
    """save_model wrote mem_len null (HF then keeps every past state: another memory from the third segment on),
    from_hf dropped mem_len, reuse_len and dropout (a model of such a config.json returned no memory)."""
    from xlnet_tf.config import XLNetConfig

    config = XLNetConfig(n_token=41, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, mem_len=6, reuse_len=4,
                         dropout=0.05, dropatt=0.05, initializer_range=0.3)
    folder = hf.save_model(XLNetPretrainer(config), str(tmp_path / "hf"))
    read = XLNetConfig.from_json(os.path.join(folder, "config.json"))
    assert (read.mem_len, read.reuse_len, read.dropout, read.dropatt) == (6, 4, 0.05, 0.05)
    ours, theirs = load_network(folder, pretrainer=True), transformers.XLNetLMHeadModel.from_pretrained(folder).eval()
    rng, mems, their_mems = np.random.default_rng(0), {}, None
    for _ in range(3):  # 5 tokens a segment, 4 kept: the memory is full (6) from the third on
        ids = rng.integers(0, 41, (2, 5))
        out = ours({"input_ids": tf.constant(ids), **mems})
        with torch.no_grad():
            their_out = theirs(input_ids=torch.tensor(ids), mems=their_mems, use_mems=True)
        np.testing.assert_allclose(out["lm_logits"].numpy(), their_out.logits.numpy(), atol=TOL)
        mems, their_mems = {"mems": out["new_mems"]}, their_out.mems


def test_convert_hf_to_release_and_native_layouts(tmp_path):
    from xlnet_tf.checkpoint import load_original_checkpoint
    from xlnet_tf.cli.convert import ConvertSettings, main

    theirs = _hf_model("XLNetForSequenceClassification")
    folder = _save_hf(theirs, tmp_path / "hf")
    main(ConvertSettings(hf_dir=folder, format="release", task_scope="sts", output_dir=str(tmp_path / "release"))
         .validate())
    assert {"spiece.model", "xlnet_config.json", "xlnet_model.ckpt.index"} <= set(os.listdir(tmp_path / "release"))
    config = hf.HFCheckpoint(folder).xlnet_config(dropout=0.0, dropatt=0.0)
    ours = XLNetClassifier(config, 3, task_scope="sts")
    assert load_original_checkpoint(ours, str(tmp_path / "release")) == []  # the head under the original scope
    _compare("XLNetForSequenceClassification", theirs, ours)
    main(ConvertSettings(hf_dir=folder, output_dir=str(tmp_path / "native")).validate())
    network = XLNetModel(config)
    load_pretrained(network, str(tmp_path / "native"))
    with torch.no_grad():
        _close(network(_features())["sequence_output"], theirs.transformer(**_torch_inputs()).last_hidden_state,
               "native")
    with pytest.raises(InputError, match="--format=release is for --hf_dir"):
        ConvertSettings(release_dir=folder, format="release", output_dir=str(tmp_path / "x")).validate()


def test_convert_takes_a_hub_name_and_names_what_is_wrong_with_a_directory(tmp_path, monkeypatch):
    """--hf_dir=hf://owner/name, as the docs show it, converts the model the HF cache holds (it was refused as a
    filesystem TensorFlow does not have); a config.json cut short or of another model is named as such, in convert
    and as --init_checkpoint (not "not a HuggingFace directory" / "no checkpoint in this directory")."""
    import huggingface_hub

    from xlnet_tf.checkpoint import resolve_checkpoint
    from xlnet_tf.cli.convert import ConvertSettings, main

    folder = _save_hf(_hf_model("XLNetModel"), tmp_path / "hf")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kwargs: folder)  # "in the cache"
    main(ConvertSettings(hf_dir="hf://me/tiny-xlnet", output_dir=str(tmp_path / "native")).validate())
    assert tf.train.latest_checkpoint(str(tmp_path / "native"))
    for name, config in (("bert", '{"model_type": "bert"}'), ("cut", '{"model_type": "xlnet",')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(config)
    for name, says in (("bert", "config.json: model_type is 'bert', not 'xlnet'"),
                       ("cut", "config.json: not valid JSON (Expecting property name"), ("gone", "not a directory")):
        with pytest.raises(InputError, match=re.escape(says)):
            ConvertSettings(hf_dir=str(tmp_path / name), output_dir=str(tmp_path / "out")).validate()
    with pytest.raises(InputError, match=re.escape(f"{tmp_path / 'cut' / 'config.json'}: not valid JSON")):
        resolve_checkpoint(str(tmp_path / "cut"))


def test_entry_point_settings_take_an_hf_directory(tmp_path):
    from xlnet_tf.tasks.squad import SquadSettings

    folder = _save_hf(_hf_model("XLNetForQuestionAnswering"), tmp_path / "hf", lower_case=True)
    s = SquadSettings(init_checkpoint=folder, model_dir=str(tmp_path / "run"))
    assert (s.model_config_path, s.spiece_model_file, s.uncased) == (
        os.path.join(folder, "config.json"), os.path.join(folder, "spiece.model"), True)
    folder = _save_hf(_hf_model("XLNetModel"), tmp_path / "cased")
    with pytest.raises(InputError, match="--uncased, but --init_checkpoint=.* is a cased model"):
        SquadSettings(init_checkpoint=folder, model_dir=str(tmp_path / "run"), uncased=True).validate()


def test_export_of_a_squad_run_as_hf(squad_run, tmp_path):
    """``cli.export --format=hf`` of a fine-tuned run: transformers' XLNetForQuestionAnswering answers as ours."""
    from xlnet_tf.cli.export import ExportSettings, export
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.checkpoint import read_model

    folder = export(ExportSettings(model_dir=squad_run["model_dir"], export_dir=str(tmp_path / "hf"), format="hf"))
    theirs = transformers.XLNetForQuestionAnswering.from_pretrained(folder).eval()
    ours = XLNetSquad(XLNetConfig.from_json(os.path.join(ROOT, "configs", "tiny.json"), dropout=0.0, dropatt=0.0),
                      start_n_top=3, end_n_top=3)
    read_model(ours, tf.train.latest_checkpoint(squad_run["model_dir"]))
    _compare("XLNetForQuestionAnswering", theirs, ours)


@pytest.mark.slow
def test_text_tagger_from_an_hf_token_classifier_takes_its_tags_and_head(tmp_path):
    """XLNetForTokenClassification is the tagging family's head: from_checkpoint takes its tags (id2label), its
    casing and its weights, and what it predicts are those tags; written back, HF reads the same head."""
    import xlnet_tf

    tags = ["O", "B-PER", "I-PER"]
    theirs = _hf_model("XLNetForTokenClassification", id2label=dict(enumerate(tags)),
                       label2id={t: i for i, t in enumerate(tags)})
    folder = _save_hf(theirs, tmp_path / "hf", lower_case=True)
    tagger = xlnet_tf.XLNetTextTagger.from_checkpoint(folder, seq_length=16, dropout=0.0, dropatt=0.0)
    assert list(tagger.labels) == tags and tagger.preprocessor.lower_case
    _close(tagger.network.logit.kernel.numpy(), theirs.classifier.weight.T, "tagging head")
    out = tagger.predict(["Jane Austen wrote Emma ."], verbose=0)
    words = [w.decode() for w in out["words"][0][:int(out["num_words"][0])]]
    assert words == ["Jane", "Austen", "wrote", "Emma", "."]
    assert {t.decode() for t in out["tags"][0][:len(words)]} <= set(tags)
    with pytest.raises(ValueError, match="labels: the tags"):
        xlnet_tf.XLNetTextTagger.from_checkpoint(_save_hf(_hf_model("XLNetModel"), tmp_path / "base"))
    again = transformers.XLNetForTokenClassification.from_pretrained(
        hf.save_model(tagger.network, str(tmp_path / "out"), SPIECE, lower_case=True, labels=tags)).eval()
    assert again.config.id2label == dict(enumerate(tags))
    _close(again.classifier.bias.detach().numpy(), theirs.classifier.bias, "tagging head written back")


def test_warm_start_keeps_an_hf_head_that_fits_and_says_which_head_it_drops(tmp_path, caplog):
    """run_*.py --init_checkpoint=<HF dir> (issue 36): the head is kept where its labels are the task's (in the task's
    order: HF's [neg, neu, pos] trained as [pos, neg, neu] gives the same logits per label name); other labels, or
    another head, start a new head, and a warning names the head and the reason."""
    import logging

    from xlnet_tf.checkpoint import warm_start

    names = ["neg", "neu", "pos"]
    theirs = _hf_model("XLNetForSequenceClassification", id2label=dict(enumerate(names)),
                       label2id={n: i for i, n in enumerate(names)})
    folder = _save_hf(theirs, tmp_path / "hf")
    config = hf.HFCheckpoint(folder).xlnet_config(dropout=0.0, dropatt=0.0)
    ours = ["pos", "neg", "neu"]
    model = XLNetClassifier(config, 3)
    model(_features())
    warm_start(model, folder, labels=ours)
    with torch.no_grad():
        expected = theirs(**_torch_inputs()).logits.numpy()
    got = model(_features(), training=False)["logits"].numpy()
    _close(got, expected[:, [names.index(n) for n in ours]], "logits by label name")

    for labels, why in ((["0", "1", "2"], "its labels ['neg', 'neu', 'pos'] are not this task's ['0', '1', '2']"),
                        (None, None)):
        fresh = XLNetClassifier(config, 3 if labels else 2)
        fresh(_features())
        before = fresh.tf1_variables()["model/classification_task/logit/kernel"].numpy().copy()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            warm_start(fresh, folder, labels=labels)
        after = fresh.tf1_variables()["model/classification_task/logit/kernel"].numpy()
        np.testing.assert_array_equal(before, after)  # the head is new
        warning = " ".join(r.getMessage() for r in caplog.records)
        assert "its XLNetForSequenceClassification head is not loaded" in warning, warning
        assert (why or "it has 3 labels, this task 2") in warning, warning
    caplog.clear()
    tagger = XLNetTagger(config, 3)
    tagger(_features())
    with caplog.at_level(logging.WARNING):
        warm_start(tagger, folder, labels=names)
    assert "it is an XLNetForSequenceClassification; this task trains an XLNetTagger" in caplog.text


def test_run_tagger_from_an_hf_token_classifier_keeps_its_tag_order(tmp_path, caplog):
    """The training file's tags, when the HF head names them all, are the head's in HF's order (so its head loads);
    a training tag it lacks starts a new head, with a warning (issue 36)."""
    import logging

    from xlnet_tf.tasks.tagging import TaggingFamily, TaggingSettings

    tags = ["O", "I-PER", "B-PER"]
    folder = _save_hf(_hf_model("XLNetForTokenClassification", id2label=dict(enumerate(tags)),
                                label2id={t: i for i, t in enumerate(tags)}), tmp_path / "hf")
    for row, expected in (({"tokens": ["Jane", "ran"], "tags": ["B-PER", "O"]}, tags),
                          ({"tokens": ["Paris"], "tags": ["B-LOC"]}, ["B-LOC"])):
        data = tmp_path / expected[0]
        data.mkdir()
        (data / "train.jsonl").write_text(json.dumps(row) + "\n")
        settings = TaggingSettings.from_values(dict(init_checkpoint=folder, data_dir=str(data), do_train=True,
                                                    model_dir=str(data / "model")))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert TaggingFamily().task(settings).labels == expected
        assert ("its XLNetForTokenClassification head is not kept" in caplog.text) == (expected != tags)
