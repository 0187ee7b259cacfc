"""Long documents read through XLNet's memory (``--long_document=memory``): the segment loop of
``classification_head.read_segments`` against one long forward pass, the gradient's reach, and the classification family
running it end to end (train, eval, export serving whole documents as raw text)."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 (the exports' tokenizer ops, as for TF Serving: the run was another process)

from background import resource
from classifier_helpers import make_flags, run_in_a_process
from xlnet_tf.config import XLNetConfig
from xlnet_tf.errors import InputError
from xlnet_tf.tasks.classification.classification_head import XLNetClassifier, read_segments
from xlnet_tf.models.xlnet import XLNetModel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEP, CLS, SEG_A, SEG_CLS, SEG_PAD = 4, 3, 0, 2, 4


def _tiny(**overrides):
    values = dict(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, n_token=100, untie_r=True, dropout=0.0,
                  dropatt=0.0)
    values.update(overrides)
    return XLNetConfig.from_dict(values)


def _documents(rng, batch, length):
    """Left-padded documents of random lengths (some shorter than a segment) ending in <sep> <cls>."""
    ids = np.zeros([batch, length], np.int32)
    segs = np.full([batch, length], SEG_PAD, np.int32)
    mask = np.zeros([batch, length], np.float32)
    for b in range(batch):
        n = int(rng.integers(3, length + 1))
        ids[b, -n:] = np.concatenate([rng.integers(5, 100, n - 2), [SEP, CLS]])
        segs[b, -n:] = [SEG_A] * (n - 1) + [SEG_CLS]
        mask[b, -n:] = 1.0
    return {"input_ids": tf.constant(ids), "segment_ids": tf.constant(segs), "padding_mask": tf.constant(mask)}


def _block_causal(batch, num_segments, seg_len):
    """perm_mask of one long pass: a token may not attend to any later segment."""
    block = np.arange(num_segments * seg_len) // seg_len
    return tf.constant(np.broadcast_to(block[None, :] > block[:, None], [batch, block.size, block.size]),
                       tf.float32)


@pytest.mark.parametrize("seed", range(6))
def test_segments_with_memory_equal_one_long_pass(seed):
    """Property: for random shapes, documents and padding (whole segments of it included), reading the document
    segment by segment with memory of every earlier segment gives the hidden states of one pass over the whole
    sequence in which no token sees a later segment: relative positions (klen = mlen + qlen), the memory's
    segment (text, 0) and its padding rows all agree with the long pass."""
    rng = np.random.default_rng(seed)
    num_segments, seg_len, batch = int(rng.integers(2, 5)), int(rng.integers(3, 9)), int(rng.integers(1, 4))
    keras.utils.set_random_seed(seed)
    config = _tiny(mem_len=(num_segments - 1) * seg_len + int(rng.integers(0, 3)))
    network = XLNetModel(config)
    inputs = _documents(rng, batch, num_segments * seg_len)
    segments = read_segments(network, inputs, num_segments, training=False)
    whole = network(dict(inputs, perm_mask=_block_causal(batch, num_segments, seg_len)),
                    training=False)["sequence_output"]
    real = inputs["padding_mask"].numpy() > 0
    got = tf.concat(segments, axis=1).numpy()
    np.testing.assert_allclose(got[real], whole.numpy()[real], rtol=1e-4, atol=1e-5)


def test_shorter_memory_forgets_early_segments():
    """With mem_len below the earlier segments' length the last segment no longer equals the long pass, and
    tokens beyond the memory's reach (mem_len per layer) cannot change the summary."""
    rng = np.random.default_rng(7)
    num_segments, seg_len = 4, 4
    network = XLNetModel(_tiny(mem_len=seg_len))
    inputs = _documents(rng, 1, num_segments * seg_len)
    inputs = dict(inputs, padding_mask=tf.ones_like(inputs["padding_mask"]),
                  segment_ids=tf.constant([[SEG_A] * 15 + [SEG_CLS]]))
    last = read_segments(network, inputs, num_segments, training=False)[-1]
    whole = network(dict(inputs, perm_mask=_block_causal(1, num_segments, seg_len)), training=False)
    assert not np.allclose(last.numpy(), whole["sequence_output"][:, -seg_len:].numpy(), atol=1e-4)
    # Two layers, one segment of memory each: the first segment is out of the last one's reach.
    changed = dict(inputs, input_ids=tf.concat([inputs["input_ids"][:, :seg_len] % 50 + 50,
                                                inputs["input_ids"][:, seg_len:]], axis=1))
    again = read_segments(network, changed, num_segments, training=False)[-1]
    np.testing.assert_allclose(again.numpy(), last.numpy(), atol=1e-6)


def test_gradient_stops_at_the_memory():
    """Training reads earlier segments as context only: the loss's gradient reaches the embeddings of the last
    segment's tokens and none of those only in earlier segments (stop-gradient memory, as in pretraining)."""
    rng = np.random.default_rng(3)
    model = XLNetClassifier(_tiny(), num_labels=3, num_segments=3, mem_len=8)
    inputs = _documents(rng, 2, 12)
    ids = np.arange(12, dtype=np.int32)[None].repeat(2, 0) + 10  # every position its own token
    ids[:, -2:] = [SEP, CLS]
    inputs = dict(inputs, input_ids=tf.constant(ids), padding_mask=tf.ones([2, 12]),
                  segment_ids=tf.constant([[SEG_A] * 11 + [SEG_CLS]] * 2))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(inputs, training=True)["logits"])
    grad = tf.convert_to_tensor(tape.gradient(loss, model.xlnet.word_embedding)).numpy()
    touched = np.abs(grad).sum(axis=1) > 0
    assert touched[ids[0, 8:10]].all() and not touched[ids[0, :8]].any()


def test_classifier_config_round_trips(tmp_path):
    model = XLNetClassifier(_tiny(), num_labels=2, num_segments=3, mem_len=8)
    again = XLNetClassifier.from_config(model.get_config())
    assert (again.num_segments, again.mem_len, again.xlnet.config.mem_len) == (3, 8, 8)
    with pytest.raises(ValueError, match="mem_len"):
        XLNetClassifier(_tiny(), num_labels=2, num_segments=3, mem_len=0)
    # HF's classes read a text in one pass: its weights would load there and predict other classes (cli.export
    # --format=hf wrote them without a word)
    from xlnet_tf import hf

    with pytest.raises(InputError, match=r"reads a document in 3 segments through memory \(--long_document=memory\), "
                                         r"which no HuggingFace XLNet class computes"):
        hf.save_model(model, str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists()


# run_classifier's stages on the bundled Brown genre documents with --long_document=memory: 2 training steps, eval,
# --do_predict over a JSON-lines glob, export.
GENRE = dict(task_name="brown_genre", data_dir=os.path.join(REPO, "data", "brown_genre"), long_document="memory",
             max_seq_length=16, max_segments=4, mem_len=24, do_train=True, do_eval=True, do_predict=True,
             predict_input_glob=os.path.join(REPO, "data", "brown_genre", "genre_dev.jsonl"),
             predict_text_fields="text", predict_id_field="id")


@resource
def genre(tmp_path):
    """The GENRE run in a process, made on the background thread (tests/background.py); its export under
    ``tmp_path/serving``. Returns ``tmp_path`` and the run's result."""
    return tmp_path, run_in_a_process(tmp_path, export_dir=str(tmp_path / "serving"), **GENRE)


@pytest.fixture(scope="module")
def genre_run():
    """The GENRE run's settings and result."""
    tmp, result = genre.value()
    return make_flags(tmp, export_dir=str(tmp / "serving"), **GENRE), result


@pytest.mark.slow
def test_memory_run_trains_evaluates_predicts_and_exports(genre_run):
    settings, result = genre_run
    assert result["train"]["step"] == 2 and 0.0 <= result["eval"]["metrics"]["accuracy"] <= 1.0
    with open(os.path.join(settings.model_dir, "finetune_settings.json")) as f:
        recorded = json.load(f)["settings"]
    assert (recorded["long_document"], recorded["max_segments"], recorded["mem_len"]) == ("memory", 4, 24)
    with open(result["predict"][0]) as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 15 and rows[0]["id"] == "ca04" and len(rows[0]["probabilities"]) == 15
    with open(os.path.join(result["export"], "assets.extra", "metadata.json")) as f:
        meta = json.load(f)
    assert (meta["max_seq_length"], meta["extras"]) == (64, dict(segment_length=16, mem_len=24))


def test_export_reads_whole_documents_as_raw_text(genre_run):
    """The raw-text signature tokenizes the whole document (its first 62 tokens) and loops over its segments in
    the graph: it answers as serve_ids on the training encoding, and as batch prediction's rows."""
    from xlnet_tf.tasks.classification import classifier_data
    from xlnet_tf.tokenization import XLNetTokenizer

    settings, result = genre_run
    loaded = tf.saved_model.load(result["export"])
    docs = classifier_data.read_examples(classifier_data.get_task("brown_genre"), settings.data_dir, "dev").examples
    texts = [docs[0].text_a, docs[1].text_a]
    tokenizer = XLNetTokenizer(settings.spiece_model_file)
    encoded = [classifier_data.encode_example(tokenizer, ex, 64)[:3] for ex in docs[:2]]
    features = {name: tf.constant(np.asarray([e[i] for e in encoded]), dtype)
                for i, (name, dtype) in enumerate([("input_ids", tf.int32), ("segment_ids", tf.int32),
                                                   ("padding_mask", tf.float32)])}
    by_ids = loaded.signatures["serve_ids"](**features)["probabilities"].numpy()
    by_text = loaded.signatures["serving_default"](sentence=tf.constant(texts))["probabilities"].numpy()
    np.testing.assert_allclose(by_text, by_ids, atol=1e-6)
    with open(result["predict"][0]) as f:
        rows = [json.loads(line) for line in f][:2]
    np.testing.assert_allclose([r["probabilities"] for r in rows], by_text, atol=1e-5)


def test_keras_text_model_reads_the_run(genre_run):
    """XLNetTextClassifier(num_segments=...) loads run_classifier's long-document checkpoint, predicts on whole
    documents as the run's export does."""
    import xlnet_tf
    from xlnet_tf.tasks.classification import classifier_data

    settings, result = genre_run
    model = xlnet_tf.XLNetTextClassifier.from_checkpoint(
        settings.model_dir, num_labels=15, seq_length=16, num_segments=4, mem_len=24, task_scope="brown_genre",
        config=settings.model_config_path, spiece_model=settings.spiece_model_file, dropout=0.0, dropatt=0.0)
    docs = classifier_data.read_examples(classifier_data.get_task("brown_genre"), settings.data_dir, "dev").examples
    texts = [d.text_a for d in docs[:3]]
    expected = tf.saved_model.load(result["export"]).signatures["serving_default"](
        sentence=tf.constant(texts))["logits"].numpy()
    np.testing.assert_allclose(model(model.preprocess(tf.constant(texts))).numpy(), expected, atol=1e-5)
    assert model._serving_extras() == dict(segment_length=16, mem_len=24)  # what its export records
    # The run's directory alone: its record gives the rest.
    loaded = xlnet_tf.load_text_model(settings.model_dir)
    assert type(loaded) is xlnet_tf.XLNetTextClassifier and loaded._serving_extras() == dict(
        segment_length=16, mem_len=24)
    np.testing.assert_allclose(loaded(loaded.preprocess(tf.constant(texts))).numpy(), expected, atol=1e-5)
    with pytest.raises(InputError, match="a fine-tuning run's model_dir: xlnet_tf.load_text_model"):
        xlnet_tf.XLNetTextClassifier.from_checkpoint(settings.model_dir, num_labels=15)
    with pytest.raises(ValueError, match=r"num_segments=0: must be a positive int"):  # was "seq_length=0: ..."
        xlnet_tf.XLNetTextClassifier.from_checkpoint(settings.model_dir, seq_length=16, num_segments=0,
                                                     config=settings.model_config_path)


def test_keras_text_model_refuses_what_its_memory_cannot_read(genre_run, tmp_path):
    """As run_classifier.py refuses a pair task with --long_document=memory, the Keras model refuses pairs (its
    second text would not be last) in predict and export(pair=True), where it answered and wrote; mem_len=0 (was:
    the full memory) and mem_len without segments (was: dropped) are refused by name."""
    import xlnet_tf

    settings, _ = genre_run
    model = xlnet_tf.load_text_model(settings.model_dir)
    with pytest.raises(ValueError, match=r"inputs: sentence pairs, but a long-document classifier \(num_segments=4\)"):
        model.predict((["A document."], ["Another."]), verbose=0)
    with pytest.raises(ValueError, match=r"pair=True: sentence pairs, but a long-document classifier"):
        model.export(str(tmp_path / "serving"), pair=True)
    assert not (tmp_path / "serving").exists()
    for segments, memory in ((1, 8), (4, 0)):
        with pytest.raises(ValueError, match=f"mem_len={memory}"):
            xlnet_tf.XLNetTextClassifier.from_checkpoint(
                settings.model_dir, num_labels=15, seq_length=16, num_segments=segments, mem_len=memory,
                config=settings.model_config_path, spiece_model=settings.spiece_model_file)


@pytest.mark.alone
def test_settings_refuse_what_cannot_be_read_as_a_long_document(tmp_path, monkeypatch):
    """The demo config validates; a pair task, one segment, no memory or RACE with --long_document=memory are
    refused before TensorFlow work, each named."""
    import yaml

    from classifier_helpers import DEFAULTS
    from xlnet_tf.tasks.task_settings import ClassifierSettings
    from xlnet_tf.training.settings import SettingsError

    monkeypatch.chdir(REPO)
    with open(os.path.join(REPO, "configs", "genre_memory_tiny.yaml")) as f:
        demo = ClassifierSettings.from_values(dict(DEFAULTS, **yaml.safe_load(f))).validate()
    assert (demo.document_length, demo.memory_length) == (1024, 896)
    for overrides, message in [(dict(task_name="mnli", data_dir=REPO), "has sentence pairs"),
                               (dict(max_segments=1), "--max_segments=1"), (dict(mem_len=0), "--mem_len=0"),
                               (dict(task_name="race", data_dir=REPO), "race reads one sequence per option")]:
        values = dict(task_name="brown_genre", data_dir=REPO, long_document="memory", do_train=True)
        values.update(overrides)
        with pytest.raises(SettingsError, match=message):
            make_flags(tmp_path, **values).validate()


def test_export_gives_no_answer_for_a_document_without_text(genre_run):
    """--do_predict skips a document with no text (issue 36); the export's raw-text signature agrees: label "",
    zero probabilities for an empty or whitespace-only one (Unicode spaces too), and the others as alone."""
    _, result = genre_run
    serve = tf.saved_model.load(result["export"]).signatures["serving_default"]
    texts = ["", "  \t\n ", "\u3000\u00a0", "The jury said the election was conducted well."]
    out = serve(sentence=tf.constant(texts))
    assert [label.decode() for label in out["label"].numpy()][:3] == ["", "", ""]
    assert out["label"].numpy()[3] != b""
    np.testing.assert_array_equal(out["probabilities"].numpy()[:3], 0.0)
    alone = serve(sentence=tf.constant(texts[3:]))["probabilities"].numpy()
    np.testing.assert_allclose(out["probabilities"].numpy()[3:], alone, atol=1e-6)
