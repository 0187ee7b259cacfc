"""The serving writer for each classifier kind (classification, regression, multiple choice), in process: both
signatures reload with tf.saved_model.load and give the Keras model's outputs; versions only go up and are never
replaced. (The fresh-process round trip through run_classifier.py is tests/test_export.py.)"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from classifier_helpers import MICRO_CONFIG, SPIECE
from xlnet_tf import tasks
from xlnet_tf.finetuning.serving import ServingInfo, existing_versions, export_serving, next_version
from xlnet_tf.tasks.classification.classification_head import XLNetClassifier
from xlnet_tf.tasks.multiple_choice.multiple_choice_head import XLNetMultipleChoice
from xlnet_tf.preprocessing import XLNetPreprocessor
from xlnet_tf.tasks.multiple_choice.multiple_choice_graph import encode_choices

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
                           extras=dict(max_qa_length=10), family=tasks.for_kind(kind))
    else:
        model = XLNetClassifier(MICRO_CONFIG, num_labels=1 if kind == "regression" else 3, task_scope="t",
                                regression=kind == "regression")
        info = ServingInfo(kind=kind, task="t", max_seq_length=SEQ, labels=None if kind == "regression" else
                           ["a", "b", "c"], pair=kind == "classification", global_step=5, family=tasks.for_kind(kind))
    path = export_serving(model, str(tmp_path / "serving"), info, SPIECE)
    assert path == str(tmp_path / "serving" / "5")
    loaded = tf.saved_model.load(path)

    pre = XLNetPreprocessor.from_file(SPIECE, seq_length=SEQ, max_qa_length=10)
    texts = TEXT[kind]
    features = encode_choices(pre, **texts) if kind == "multiple_choice" else pre(*texts.values())
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
    # ids of two batch sizes: an error naming the inputs (not a ConcatOp's deep in the network)
    first = next(iter(features))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"{first}, .* must have the same batch size"):
        loaded.signatures["serve_ids"](**{k: v if k == first else v[:1] for k, v in features.items()})
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


def test_an_older_exports_family_fields_are_read_as_the_familys_extras():
    """metadata.json of format xlnet_tf.serving/1, and a .keras file's run_info of then, held the families' settings
    in fields of their own (max_qa_length, squad, segment_length, mem_len): read, they are the family's extras, so
    batch prediction and the text models take such an export or file as before."""
    from xlnet_tf.tasks.base import MetadataInfo, with_extras

    old = dict(kind="squad", task="squad", max_seq_length=64, lower_case=False, labels=None, pair=False,
               global_step=3, max_qa_length=128, squad=dict(max_query_length=8, doc_stride=16, max_answer_length=5,
                                                            start_n_top=3, end_n_top=2, n_best_size=5),
               segment_length=0, mem_len=0, version=3, format="xlnet_tf.serving/1")
    info = ServingInfo(**with_extras({k: v for k, v in old.items() if k not in ("version", "format")}))
    assert info.extras == dict(old["squad"], max_qa_length=128, segment_length=0, mem_len=0)
    assert tasks.get("squad").serving.preprocessor_kwargs(info) == dict(max_query_length=8, doc_stride=16)
    tagging = dict(old, kind="tagging", labels=["O", "B-X", "I-X"], squad=dict(tag_scheme="bio", window_stride=8))
    assert tasks.get("tagging").batch.identity(tagging, ())["tag_scheme"] == "bio"
    race = MetadataInfo(dict(old, kind="multiple_choice", squad={}, max_qa_length=10))
    assert tasks.get("multiple_choice").serving.preprocessor_kwargs(race) == {"max_qa_length": 10}
    long_document = MetadataInfo(dict(old, kind="classification", squad={}, segment_length=16, mem_len=48))
    assert tasks.get("classification").serving.ids_spec(long_document)["input_ids"].shape.as_list() == [None, 64]
    assert MetadataInfo(dict(old, squad={}, extras=dict(doc_stride=4))).extras["doc_stride"] == 4


@pytest.mark.slow
def test_a_mixed_bfloat16_export_stores_what_it_casts_in_bfloat16_and_serves_the_same_bits(tmp_path):
    """A mixed_bfloat16 model casts its projections' float32 kernels to bfloat16 at every call; its export stores
    those in bfloat16 (no casts in the served graph, half their memory) and keeps float32 what the graph reads as
    float32 (LayerNorm, the word embedding whose rows are gathered first). What a server loads (a fresh process,
    TensorFlow and tensorflow-text's kernels only) answers with the model's own graph's numbers, to the bit."""
    from export_helpers import serve, strings
    from xlnet_tf import kernels
    from xlnet_tf.finetuning.serving import ServingModule

    model = XLNetClassifier(MICRO_CONFIG, num_labels=3, task_scope="t", dtype="mixed_bfloat16")
    info = ServingInfo(kind="classification", task="t", max_seq_length=SEQ, labels=["a", "b", "c"], pair=True,
                       global_step=5, family=tasks.for_kind("classification"))
    path = export_serving(model, str(tmp_path / "serving"), info, SPIECE)

    loaded = tf.saved_model.load(path)
    assert len(loaded.weights_16bit) + len(loaded.weights_32bit) == len(model.weights)
    assert not hasattr(loaded, "model")  # the float32 originals of the 16-bit weights are not saved
    in_16_bits = {v.name.split(":")[0] for v in loaded.weights_16bit}
    assert {v.dtype for v in loaded.weights_16bit} == {tf.bfloat16}
    for v in model.weights:
        name = v.path.replace("/", "_")
        if v.path.endswith("kernel"):  # every projection
            assert name in in_16_bits, v.path
        if "LayerNorm" in v.path or v.path.endswith("word_embedding"):
            assert name not in in_16_bits, v.path
    module = ServingModule(model, info, 5)
    casts = [op for op in module.serve_ids.get_concrete_function().graph.get_operations() if op.type == "Cast"]
    with kernels.use("plain"):
        plain = tf.function(lambda f: model(f, training=False)["logits"], autograph=False)
        as_trained = plain.get_concrete_function(
            {k: tf.TensorSpec([None, None], tf.float32 if k == "padding_mask" else tf.int32) for k in
             ("input_ids", "segment_ids", "padding_mask")})
        assert len(casts) <= len([op for op in as_trained.graph.get_operations() if op.type == "Cast"]) - 20

        texts = TEXT["classification"]
        features = XLNetPreprocessor.from_file(SPIECE, seq_length=SEQ)(*texts.values())
        expected = plain(features).numpy()
    reply = serve({"export": path, "calls": [
        {"signature": "serve_ids", "inputs": {k: {"dtype": v.dtype.name, "value": v.numpy().tolist()}
                                               for k, v in features.items()}},
        {"signature": "serving_default", "inputs": {k: strings(v) for k, v in texts.items()}}]})
    by_ids, by_text = (np.array(call["outputs"]["logits"]["value"], np.float32) for call in reply["calls"])
    np.testing.assert_array_equal(by_ids, expected)
    np.testing.assert_array_equal(by_text[[0, 2]], expected[[0, 2]])  # row 1 has no text: zeros


@pytest.mark.parametrize("kind", ["squad", "multiple_choice", "tagging"])
@pytest.mark.slow
def test_every_familys_16bit_export_answers_as_the_model_reads_its_weights(kind, monkeypatch):
    """Each task family's signatures (ids and raw text) give the same bits with the 16-bit weights as with the
    model's float32 weights cast at every call (what exports stored before; forced here)."""
    import keras

    from xlnet_tf.finetuning import serving
    from xlnet_tf.tasks.squad.squad_head import XLNetSquad
    from xlnet_tf.tasks.tagging.tagging_head import XLNetTagger

    keras.utils.set_random_seed(0)
    config = dict(MICRO_CONFIG, n_layer=2)
    if kind == "squad":
        model = XLNetSquad(config, start_n_top=3, end_n_top=2, dtype="mixed_bfloat16")
        extra = dict(extras=dict(max_query_length=8, doc_stride=8, max_answer_length=5, start_n_top=3, end_n_top=2,
                                 n_best_size=5))
        texts = dict(question=["Who went?", "Why?"], context=["Tom went to the market and bought apples. " * 3,
                                                              "Because."])
    elif kind == "multiple_choice":
        model = XLNetMultipleChoice(config, dtype="mixed_bfloat16")
        extra = dict(labels=list("ABCD"), extras=dict(max_qa_length=10))
        texts = TEXT[kind]
    else:
        model = XLNetTagger(config, num_labels=5, dtype="mixed_bfloat16")
        extra = dict(labels=list("OABCD"), extras=dict(tag_scheme="bio", window_stride=8))
        texts = dict(sentence=["Tom went to Paris .", "Hi"])
    info = ServingInfo(kind=kind, task=kind, max_seq_length=SEQ, global_step=1, family=tasks.for_kind(kind),
                       **extra)
    pre = serving.preprocessor_for(info, SPIECE)
    module = serving.ServingModule(model, info, 1, pre)
    assert len(module.weights_16bit) >= 10
    monkeypatch.setattr(serving, "read_in_16_bits", lambda *args: [])
    cast_each_call = serving.ServingModule(model, info, 1, pre)
    assert not hasattr(cast_each_call, "weights_16bit")

    strings = [tf.constant(v) for v in texts.values()]
    rng, ids = np.random.RandomState(0), []
    for spec in module.serve_ids.input_signature:  # batch 3, choices 3, length SEQ
        shape = [3 if d is None else d for d in spec.shape[:-1]] + [SEQ if spec.shape.rank > 1 else 3]
        value = (rng.rand(*shape) > 0.2 if "mask" in spec.name else
                 rng.randint(0, 2 if spec.name in ("segment_ids", "cls_index") else 100, size=shape))
        ids.append(tf.constant(value, spec.dtype))
    for call in (lambda m: m.serve_ids(*ids), lambda m: m.serve_text(*strings)):
        got, want = call(module), call(cast_each_call)
        assert set(got) == set(want)
        for name in want:
            np.testing.assert_array_equal(got[name].numpy(), want[name].numpy(), err_msg=name)


def eval_points(model_dir: str) -> list:
    """The steps of the ``accuracy`` points in each event file of ``<model_dir>/eval_dev``, oldest file first."""
    paths = sorted(tf.io.gfile.glob(os.path.join(model_dir, "eval_dev", "events.*")), key=os.path.getmtime)
    return [[event.step for event in tf.compat.v1.train.summary_iterator(path)
             for value in event.summary.value if value.tag == "accuracy"] for path in paths]


@pytest.mark.slow
def test_a_runs_export_is_the_runs_model_whichever_way_it_is_written(tmp_path):
    """A sentence-pair run (RTE, two named classes): training another task or model shape in its model_dir is
    refused before anything is written; ``load_text_model(run).export()`` writes what ``run_classifier.py
    --export_dir`` wrote (task, class names, pair, step; version = the step) and refuses to serve the pair model on
    single sentences; a base path serving a model with other inputs or classes takes no version of this one; a
    checkpoint of another task's run is refused by name (its head has the same shape and would load); a run
    recorded without --export_dir loads; --eval_all_ckpt skips a checkpoint between save steps and evaluates each
    other once, into one event file per run, logging each and the best."""
    import dataclasses
    import shutil

    import xlnet_tf
    from classifier_helpers import REPO, make_flags
    from pretraining_helpers import absl_messages
    from xlnet_tf import runner
    from xlnet_tf.cli import export as cli_export
    from xlnet_tf.cli.flags import summary
    from xlnet_tf.errors import InputError
    from xlnet_tf.training.settings import SettingsError

    s = make_flags(tmp_path, task_name="rte", data_dir=os.path.join(REPO, "tests", "fixtures", "glue", "RTE"),
                   do_train=True, export_dir=str(tmp_path / "serving"))
    runner.run(dataclasses.replace(s, train_steps=1, export_dir=None))  # stopped at step 1, then resumed:
    runner.run(s)
    record = (tmp_path / "model" / "finetune_settings.json").read_text()
    # Training another task, or another shape, in this model_dir: refused before anything is written
    glue = os.path.join(REPO, "tests", "fixtures", "glue")
    for other, why in ((dict(task_name="qnli", data_dir=os.path.join(glue, "QNLI")), "the task rte, not qnli"),
                       (dict(model_config_path=str(tmp_path / "wider.json")), "d_inner 32, not 64")):
        (tmp_path / "wider.json").write_text(json.dumps(dict(MICRO_CONFIG, d_inner=64)))
        with pytest.raises(SettingsError, match=rf"--model_dir={s.model_dir} holds the training of another model: "
                                                rf"{why} \("):
            runner.run(make_flags(tmp_path, **dict(dict(task_name="rte", data_dir=s.data_dir, do_train=True,
                                                         train_steps=4), **other)))
    assert (tmp_path / "model" / "finetune_settings.json").read_text() == record
    # A missing dev file is said before the training set is encoded (it took minutes on a large one)
    os.makedirs(tmp_path / "no_dev")
    shutil.copy(os.path.join(s.data_dir, "train.tsv"), tmp_path / "no_dev")
    with pytest.raises(FileNotFoundError, match="dev.tsv"):
        runner.run(make_flags(tmp_path / "fresh", task_name="rte", data_dir=str(tmp_path / "no_dev"), do_train=True,
                              do_eval=True, output_dir=str(tmp_path / "features")))
    assert not os.path.exists(tmp_path / "features") or not os.listdir(tmp_path / "features")
    with open(tmp_path / "serving" / "2" / "assets.extra" / "metadata.json") as f:
        by_the_run = json.load(f)
    assert (by_the_run["task"], by_the_run["pair"], by_the_run["labels"]) == (
        "rte", True, ["entailment", "not_entailment"])
    model = xlnet_tf.load_text_model(s.model_dir)
    path = model.export(str(tmp_path / "by_keras"))
    with open(os.path.join(path, "assets.extra", "metadata.json")) as f:
        by_keras = json.load(f)
    assert by_keras == by_the_run
    with pytest.raises(ValueError, match="pair=False: this model was fine-tuned on sentence pairs"):
        model.export(str(tmp_path / "single"), pair=False)
    # Its .keras file keeps the run (its export wrote task custom, labels 0/1, single sentences), and neither
    # predicts on single sentences (it answered them) as its export takes none
    model.save(str(tmp_path / "rte.keras"))
    again = keras.saving.load_model(str(tmp_path / "rte.keras"))
    assert again.run_info == model.run_info
    for loaded in (model, again):
        with pytest.raises(ValueError, match=r"inputs: single sentences, but this model was fine-tuned on sentence "
                                             r"pairs \(task rte\): pass \(sentences, second_sentences\)"):
            loaded.predict(["A man is sleeping."], verbose=0)
    assert loaded.predict((["A man is sleeping."], ["He rests."]), verbose=0).shape == (1, 2)
    assert model.export(str(tmp_path / "serving")) == str(tmp_path / "serving" / "3")  # the same model: a version

    single = ServingInfo(kind="classification", task="sst-2", max_seq_length=SEQ, labels=["0", "1"],
                         global_step=9, family=tasks.for_kind("classification"))
    with pytest.raises(InputError, match=r"serving serves another model: its version 3 has pair True where this "
                                         r"export has False, labels \['entailment', 'not_entailment'\] where"):
        export_serving(XLNetClassifier(MICRO_CONFIG, num_labels=2), str(tmp_path / "serving"), single, SPIECE)
    assert existing_versions(str(tmp_path / "serving")) == [2, 3]

    other = tmp_path / "qnli_run"  # another run's directory: a QNLI model (two classes, the same names)
    shutil.copytree(s.model_dir, other)
    record = json.loads(record)
    record["settings"]["task_name"] = "qnli"
    (other / "finetune_settings.json").write_text(json.dumps(record))
    refused = rf"--predict_ckpt={other}/model-2 is a checkpoint of the run in {other}, fine-tuned on qnli"
    with pytest.raises(SettingsError, match=refused):
        cli_export.export(cli_export.ExportSettings(model_dir=s.model_dir, predict_ckpt=f"{other}/model-2",
                                                    export_dir=str(tmp_path / "crossed")))
    with pytest.raises(SettingsError, match=refused):
        xlnet_tf.load_text_model(s.model_dir, checkpoint=f"{other}/model-2")
    assert not os.path.exists(tmp_path / "crossed")

    # A run recorded without --export_dir (every cli.jobs run) loads too; --task_name may be an alias of its task
    record["settings"].update(task_name="sst-2", export_dir="")
    (other / "finetune_settings.json").write_text(json.dumps(record))
    assert tasks.run_settings(str(other), task_name="SST2").task_name == "sst-2"
    loaded = xlnet_tf.load_text_model(str(other))
    assert loaded.run_info.task == "sst-2" and loaded.predict(["A gripping film."], verbose=0).shape == (1, 2)

    # --eval_all_ckpt scores the checkpoints of --save_steps and the last, not one between them, as a signal
    # leaves it (a stopped run's best would differ from an unstopped one's): model-1 here, the first part's end
    scored = runner.run(make_flags(tmp_path, task_name="rte", data_dir=s.data_dir, do_eval=True,
                                   eval_all_ckpt=True))["eval"]
    assert os.path.exists(f"{s.model_dir}/model-1.index")
    assert list(scored["all_checkpoints"]) == [f"{s.model_dir}/model-2"] == [scored["best_checkpoint"]]
    # Each checkpoint evaluated once (the last was again, its point written twice), its TensorBoard point in the
    # one event file of the run's split directory (one per evaluation before); a log line for each, and the best
    # in the log and the run's last line
    assert eval_points(s.model_dir) == [[2]]
    with absl_messages() as logged:
        scored = runner.run(make_flags(tmp_path, task_name="rte", data_dir=s.data_dir, do_eval=True,
                                       eval_all_ckpt=True, save_steps=1))["eval"]
    assert list(scored["all_checkpoints"]) == [f"{s.model_dir}/model-1", f"{s.model_dir}/model-2"]
    assert eval_points(s.model_dir) == [[2], [1, 2]]
    assert [m for m in logged if m.startswith("--eval_all_ckpt")] == [
        f"--eval_all_ckpt {i}/2: dev at step {i}: accuracy {metrics['accuracy']:.4f}"
        for i, metrics in enumerate(scored["all_checkpoints"].values(), 1)]
    best, value = scored["best_checkpoint"], scored["best_metrics"]["accuracy"]
    best_line = f"best accuracy {value:.4g} at {best} (step {int(best.rsplit('-', 1)[1])})"
    assert f"eval rte dev: {best_line}" in logged
    assert summary(dict(eval=scored)).endswith(f"; {best_line}")
    # the task as the record names it, in any case (or by an alias): the same run, resumed (here: already done)
    assert runner.run(make_flags(tmp_path, task_name="RTE", data_dir=s.data_dir, do_train=True))["train"]
