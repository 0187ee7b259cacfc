"""XLNetConfig parsing and loading the original release's TF1 checkpoints."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from reference_xlnet import random_weights, reference_forward
from xlnet_tf import XLNetConfig, XLNetModel, XLNetPretrainer, load_original_checkpoint
from xlnet_tf.checkpoint import load_network, load_pretrained, write_tf1_checkpoint
from xlnet_tf.cli.convert import convert
from xlnet_tf.errors import InputError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE_BASE = {"d_head": 64, "d_inner": 3072, "d_model": 768, "ff_activation": "gelu", "n_head": 12,
                "n_layer": 12, "n_token": 32000, "untie_r": True}
TINY = dict(n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=16, n_token=20, ff_activation="gelu", untie_r=True)
RUNTIME = dict(mem_len=0, reuse_len=None, clamp_len=-1, same_length=False, bi_data=False, attn_type="bi")


def write_json(path, values):
    path.write_text(json.dumps(values))
    return str(path)


def test_from_json_reads_the_release_layout_with_overrides(tmp_path):
    path = write_json(tmp_path / "xlnet_config.json", RELEASE_BASE)
    config = XLNetConfig.from_json(path, mem_len=384, reuse_len=256, bi_data=True, dropout=0.0)
    assert (config.n_layer, config.d_model, config.untie_r, config.ff_activation) == (12, 768, True, "gelu")
    assert (config.mem_len, config.reuse_len, config.bi_data, config.dropout) == (384, 256, True, 0.0)
    assert config.attn_type == "bi" and config.clamp_len == -1


@pytest.mark.parametrize("name", ["xlnet_cased_L-12_H-768_A-12.json", "xlnet_cased_L-24_H-1024_A-16.json",
                                  "tiny.json"])
def test_bundled_configs_parse(name):
    config = XLNetConfig.from_json(os.path.join(REPO, "configs", name))
    assert config.n_head * config.d_head == config.d_model


@pytest.mark.slow
def test_released_shapes_give_the_published_parameter_counts():
    large = XLNetConfig.from_json(os.path.join(REPO, "configs", "xlnet_cased_L-24_H-1024_A-16.json"))
    base = XLNetConfig.from_json(os.path.join(REPO, "configs", "xlnet_cased_L-12_H-768_A-12.json"))
    for config, millions in ((large, 360.3), (base, 116.8)):
        # Built in a graph, where no initializer runs: the shapes without ~2 GB of random numbers (16 s -> 4 s).
        with tf.Graph().as_default():
            model = XLNetPretrainer(config)
            n = sum(int(np.prod(v.shape)) for v in model.weights)
        assert abs(n / 1e6 - millions) < 0.1, n


@pytest.mark.parametrize("values,overrides,message", [
    (dict(RELEASE_BASE, d_embed=768, colour="red"), {}, "unknown XLNet config key.*colour"),
    (dict(RELEASE_BASE, n_layer="12"), {}, "n_layer must be int"),
    (dict(RELEASE_BASE, untie_r="true"), {}, "untie_r must be bool"),
    (dict(RELEASE_BASE, n_head=0), {}, "n_head must be positive"),
    (dict(RELEASE_BASE, ff_activation="swish"), {}, "ff_activation"),
    (RELEASE_BASE, dict(attn_type="causal"), "attn_type"),
    (RELEASE_BASE, dict(dropout=1.5), "dropout"),
    (RELEASE_BASE, dict(mem_len=-1), "mem_len"),
    (RELEASE_BASE, dict(clamp_len=0), "clamp_len"),
    (RELEASE_BASE, dict(memlen=3), "unknown XLNet config key.*memlen"),
])
def test_bad_config_is_a_value_error_naming_the_key(tmp_path, values, overrides, message):
    path = write_json(tmp_path / "xlnet_config.json", values)
    with pytest.raises(ValueError, match=message) as info:
        XLNetConfig.from_json(path, **overrides)
    assert path in str(info.value)


HF_TINY = {"model_type": "xlnet", "vocab_size": 20, "d_model": 8, "n_layer": 2, "n_head": 2, "d_inner": 16}


@pytest.mark.parametrize("values,message", [
    (dict(HF_TINY, n_head=3), "d_model 8 is not a multiple of n_head 3"),
    (dict(HF_TINY, d_head=2), "d_head 2 is not d_model / n_head = 4"),
    (dict(HF_TINY, clamp_len="x"), "clamp_len must be a number, got 'x'"),
])
def test_an_hf_config_huggingface_refuses_is_refused_naming_the_file(tmp_path, values, message):
    """A d_model the heads do not divide was read with d_head rounded down, a d_head of the file's own was
    replaced, a clamp_len not a number was Python's TypeError."""
    path = write_json(tmp_path / "config.json", values)
    with pytest.raises(InputError, match=f"{path}: {message}"):
        XLNetConfig.from_json(path)
    assert XLNetConfig.from_json(write_json(tmp_path / "config.json", dict(HF_TINY, d_head=4))).d_head == 4


def test_config_edges_are_clear_errors_and_numpy_scalars_are_values(tmp_path):
    with pytest.raises(InputError, match="settings: an XLNet config is a dict of settings, got list"):
        XLNetConfig.from_dict([1, 2], source="settings")
    with pytest.raises(InputError, match=f"{tmp_path}: is a directory; XLNetConfig.to_json writes a file"):
        XLNetConfig(**TINY).to_json(tmp_path)
    config = XLNetConfig(**dict(TINY, n_head=np.int64(2), untie_r=np.bool_(True)), dropout=np.float32(0.5))
    assert config == XLNetConfig(**TINY, dropout=0.5) and type(config.n_head) is int
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    with pytest.raises(InputError, match="n_head must be int"):
        XLNetConfig(**dict(TINY, n_head=np.float64(2.0)))


def test_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "xlnet_config.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="xlnet_config.json: not valid JSON"):
        XLNetConfig.from_json(str(path))


def _inputs(rng):
    ids = rng.integers(0, 20, (2, 6))
    seg = np.array([[0, 0, 0, 1, 1, 2]] * 2)
    pad = np.ones((2, 6))
    pad[1, :2] = 0
    return ids, seg, pad


@pytest.mark.parametrize("untie_r", [True, False])
def test_load_original_checkpoint_reproduces_the_original(tmp_path, untie_r):
    cfg = dict(TINY, untie_r=untie_r)
    weights = random_weights(dict(cfg, **RUNTIME), seed=0)
    tensors = {name: value.astype(np.float32) for name, value in weights.items()}
    # what the original's checkpoints carry besides the weights
    tensors["global_step"] = np.array(1000, np.int64)
    tensors["model/transformer/r_w_bias/adam_m"] = np.zeros_like(tensors["model/transformer/r_w_bias"])
    prefix = write_tf1_checkpoint(tensors, str(tmp_path / "xlnet_model.ckpt"))

    model = XLNetPretrainer(XLNetConfig(**cfg, dropout=0.0, dropatt=0.0))
    assert load_original_checkpoint(model, prefix) == []
    ids, seg, pad = _inputs(np.random.default_rng(0))
    out = model({"input_ids": ids, "segment_ids": seg, "padding_mask": pad.astype(np.float32)})
    ref = reference_forward(weights, dict(cfg, **RUNTIME), ids, seg, pad)
    np.testing.assert_allclose(out["lm_logits"].numpy(), ref["lm_logits"], atol=1e-4)

    # the bare network loads from the same file and reports the LM bias as unused
    backbone = XLNetModel(XLNetConfig(**cfg))
    assert load_original_checkpoint(backbone, str(tmp_path)) == ["model/lm_loss/bias"]


def test_missing_or_misshaped_variables_are_named_and_nothing_is_assigned(tmp_path):
    weights = random_weights(dict(TINY, **RUNTIME), seed=1)
    del weights["model/transformer/layer_1/ff/layer_2/bias"]
    prefix = write_tf1_checkpoint({k: v.astype(np.float32) for k, v in weights.items()}, str(tmp_path / "c.ckpt"))
    model = XLNetPretrainer(XLNetConfig(**dict(TINY, untie_r=False)))
    before = [v.numpy().copy() for v in model.weights]
    with pytest.raises(ValueError) as info:
        load_original_checkpoint(model, prefix)
    message = str(info.value)
    assert "missing variable model/transformer/layer_1/ff/layer_2/bias" in message
    assert "model/transformer/r_w_bias: checkpoint shape (2, 2, 4) != model shape (2, 4)" in message
    assert "untie_r" in message
    for var, value in zip(model.weights, before):
        np.testing.assert_array_equal(var.numpy(), value)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_original_checkpoint(XLNetModel(XLNetConfig(**TINY)), str(tmp_path / "nothing.ckpt"))


def test_a_variable_of_another_dtype_is_named_and_nothing_is_assigned(tmp_path):
    """Values were assigned one by one: a string variable raised numpy's bare ValueError after the ones before it
    were overwritten, and an integer one was cast without a word."""
    weights = {k: v.astype(np.float32) for k, v in random_weights(dict(TINY, **RUNTIME), seed=1).items()}
    model = XLNetPretrainer(XLNetConfig(**TINY))
    before = [v.numpy().copy() for v in model.weights]
    for value, dtype in ((np.array([b"x"] * TINY["n_token"]), "object"), (np.arange(TINY["n_token"]), "int64")):
        prefix = write_tf1_checkpoint(dict(weights, **{"model/lm_loss/bias": value}), str(tmp_path / dtype))
        with pytest.raises(InputError, match=f"{prefix}: .*\n  model/lm_loss/bias: dtype {dtype} "):
            load_original_checkpoint(model, prefix)
        for var, value in zip(model.weights, before):
            np.testing.assert_array_equal(var.numpy(), value)
    import ml_dtypes  # half-precision weights (a bf16 or fp16 checkpoint) are weights: loaded, not refused
    for dtype in (ml_dtypes.bfloat16, np.float16):
        prefix = write_tf1_checkpoint({k: v.astype(dtype) for k, v in weights.items()}, str(tmp_path / str(dtype)))
        load_original_checkpoint(model, prefix)
        np.testing.assert_array_equal(model.lm_bias.numpy(), weights["model/lm_loss/bias"].astype(dtype))


def test_files_of_other_formats_are_named_with_what_reads_them(tmp_path):
    """An HF directory, a .keras or .weights.h5 file, HF's weight files: 'no checkpoint here' did not say what the
    path was, nor which call reads it."""
    model = XLNetPretrainer(XLNetConfig(**TINY))
    (tmp_path / "hf").mkdir()
    write_json(tmp_path / "hf" / "config.json", {"model_type": "xlnet", "vocab_size": 20})
    model.save(str(tmp_path / "m.keras"))
    model.save_weights(str(tmp_path / "m.weights.h5"))
    for name in ("pytorch_model.bin", "model.safetensors"):
        (tmp_path / "hf" / name).write_bytes(b"weights")
    for path, expected in [("hf", "is a HuggingFace XLNet directory .* xlnet_tf.load_pretrained"),
                           ("m.keras", "is a Keras model file: keras.models.load_model"),
                           ("m.weights.h5", "is a Keras weights file: model.load_weights"),
                           ("hf/pytorch_model.bin", "is a HuggingFace weights file: name its directory"),
                           ("hf/model.safetensors", "is a HuggingFace weights file: .* xlnet_tf.load_network")]:
        with pytest.raises(InputError, match=expected):
            load_original_checkpoint(model, str(tmp_path / path))


def test_convert_release_directory_then_load_native(tmp_path):
    release = tmp_path / "xlnet_tiny_release"
    release.mkdir()
    weights = random_weights(dict(TINY, **RUNTIME), seed=2)
    write_tf1_checkpoint({k: v.astype(np.float32) for k, v in weights.items()}, str(release / "xlnet_model.ckpt"))
    write_json(release / "xlnet_config.json", TINY)
    (release / "spiece.model").write_bytes(b"sp")

    out_dir = tmp_path / "converted"
    convert(str(release / "xlnet_model.ckpt"), str(release / "xlnet_config.json"), str(out_dir),
            str(release / "spiece.model"))
    assert sorted(os.listdir(out_dir))[:2] == ["checkpoint", "spiece.model"]
    assert XLNetConfig.from_json(str(out_dir / "xlnet_config.json")) == XLNetConfig(**TINY)
    with pytest.raises(FileExistsError):
        convert(str(release / "xlnet_model.ckpt"), str(release / "xlnet_config.json"), str(out_dir))

    ids, seg, pad = _inputs(np.random.default_rng(1))
    batch = {"input_ids": ids, "segment_ids": seg, "padding_mask": pad.astype(np.float32)}
    config = XLNetConfig(**TINY, dropout=0.0, dropatt=0.0)
    from_tf1, from_native = XLNetPretrainer(config), XLNetPretrainer(config)
    load_pretrained(from_tf1, str(release))
    load_pretrained(from_native, str(out_dir))
    np.testing.assert_array_equal(from_native(batch)["lm_logits"].numpy(), from_tf1(batch)["lm_logits"].numpy())
    backbone = XLNetModel(config)  # the bare network reads the same native checkpoint
    load_pretrained(backbone, str(out_dir))
    np.testing.assert_array_equal(backbone(batch)["sequence_output"].numpy(),
                                  from_tf1(batch)["sequence_output"].numpy())
    with pytest.raises(ValueError, match="does not hold every XLNet variable"):
        load_pretrained(XLNetModel(XLNetConfig(**dict(TINY, n_layer=3))), str(out_dir))
    # the TF1 reader given a native checkpoint says so in one line (not every variable as "missing")
    with pytest.raises(ValueError, match=r"is an xlnet_tf checkpoint, not the original release's TF1 layout: load "
                                         r"it with xlnet_tf.load_pretrained") as info:
        load_original_checkpoint(XLNetPretrainer(config), str(out_dir))
    assert "\n" not in str(info.value)

    # in one call, from either directory: its xlnet_config.json, run-time fields as keywords
    for folder in (release, out_dir):
        built = load_network(str(folder), pretrainer=True, dropout=0.0, dropatt=0.0, mem_len=3)
        assert isinstance(built, XLNetPretrainer) and built.config == config.replace(mem_len=3)
        np.testing.assert_array_equal(built(batch)["lm_logits"].numpy(), from_tf1(batch)["lm_logits"].numpy())
    network = load_network(tf.train.latest_checkpoint(str(out_dir)), config=config, dtype="mixed_bfloat16")
    assert type(network) is XLNetModel and network.compute_dtype == "bfloat16"
    np.testing.assert_array_equal(network.word_embedding.numpy(), backbone.word_embedding.numpy())
    with pytest.raises(ValueError, match=r"config: .* has no xlnet_config.json next to it; pass config="):
        load_network(str(tmp_path / "elsewhere" / "model.ckpt"))

    # the entry points: --init_checkpoint's directory gives --model_config_path and --spiece_model_file, as the
    # release ships them (flags given win); checked before TensorFlow would load
    from xlnet_tf.tasks.task_settings import ClassifierSettings

    for given in (str(release), str(release / "xlnet_model.ckpt")):
        s = ClassifierSettings(init_checkpoint=given, model_dir=str(tmp_path / "run"), task_name="sst-2")
        assert (s.model_config_path, s.spiece_model_file) == (str(release / "xlnet_config.json"),
                                                              str(release / "spiece.model"))
    s = ClassifierSettings(init_checkpoint=str(release), model_config_path="mine.json", model_dir=str(tmp_path))
    assert (s.model_config_path, s.spiece_model_file) == ("mine.json", str(release / "spiece.model"))


@pytest.mark.parametrize("layout", ["native", "tf1"])
@pytest.mark.parametrize("damage", ["truncated", "garbage"])
@pytest.mark.parametrize("part", ["index", "data"])
def test_damaged_checkpoint_is_a_clear_error_and_nothing_is_assigned(tmp_path, layout, damage, part):
    """A half-copied or foreign checkpoint file: a ValueError naming the checkpoint (TensorFlow's own errors say
    'Read less bytes than requested' or 'not an sstable' without a file), and the model keeps its weights."""
    from xlnet_tf.checkpoint import native_checkpoint

    cfg = XLNetConfig(n_layer=1, d_model=8, n_head=2, d_head=4, d_inner=16, n_token=20)
    source = XLNetModel(cfg)
    if layout == "native":
        prefix = native_checkpoint(source).write(str(tmp_path / "ckpt"))
    else:
        prefix = write_tf1_checkpoint({n: v.numpy() for n, v in source.tf1_variables().items()},
                                      str(tmp_path / "xlnet_model.ckpt"))
    path = prefix + (".index" if part == "index" else ".data-00000-of-00001")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2] if damage == "truncated" else b"garbage" * 10)
    target = XLNetModel(cfg)
    before = [w.numpy() for w in target.weights]
    with pytest.raises(ValueError, match=f"{prefix}: unreadable checkpoint"):
        load_pretrained(target, prefix)
    for w, b in zip(target.weights, before):
        np.testing.assert_array_equal(w.numpy(), b)
