"""The SQuAD export: raw question and context in, run_squad.py --do_predict's answers out (checked in a fresh
process with TensorFlow and tensorflow-text's kernels only, as TF Serving loads it); bad requests; serve_ids
reproduces the Keras head's beam outputs, and the SavedModel holds stock TensorFlow ops only."""

import base64
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2  # (here: serving_replies builds requests on the background thread)

from background import resource
from export_helpers import REPO, decoded, serve, strings
from squad_helpers import RELEASE_EXPORT, RELEASE_FLAGS, SMALL
from squad_helpers import inference_batch  # the head's test batch (P, Q, CLS, pad)
from squad_helpers import squad_release  # (conftest's squad_run: made on the background thread)
from xlnet_tf.cli import serving_client as client
from xlnet_tf import tasks
from xlnet_tf.finetuning.serving import ServingInfo, write_serving_model
from xlnet_tf.tasks.squad import squad_data
from xlnet_tf.tasks.squad.squad_answers import INFERENCE_OUTPUTS
from xlnet_tf.tasks.squad.squad_head import XLNetSquad


def op_types(path: str) -> set:
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved = saved_model_pb2.SavedModel.FromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    assert not [f.signature.name for f in graph.library.function if f.attr["_XlaMustCompile"].b]
    return {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}


def test_serve_ids_reproduces_keras_outputs_with_stock_ops(tmp_path):
    keras.utils.set_random_seed(1)
    model = XLNetSquad(SMALL, start_n_top=3, end_n_top=2)
    batch = inference_batch()
    expected = model(batch, training=False)
    info = ServingInfo(kind="squad", task="squad", max_seq_length=24, global_step=0, family=tasks.get("squad"),
                       extras=dict(max_query_length=8, doc_stride=8, max_answer_length=5, start_n_top=3, end_n_top=2,
                                   n_best_size=5))
    path = write_serving_model(model, str(tmp_path / "serving"), info)
    assert int(os.path.basename(path)) > 1_700_000_000  # no global step: a timestamp version
    assert os.listdir(tmp_path / "serving") == [os.path.basename(path)]  # no temporary directories left behind
    serving = tf.saved_model.load(path).signatures["serve_ids"]
    specs = serving.structured_input_signature[1]
    assert {k: (v.dtype, v.shape.as_list()) for k, v in specs.items()} == {
        "input_ids": (tf.int32, [None, None]), "segment_ids": (tf.int32, [None, None]),
        "padding_mask": (tf.float32, [None, None]), "p_mask": (tf.float32, [None, None]),
        "cls_index": (tf.int32, [None])}
    got = serving(**{k: tf.constant(v) for k, v in batch.items()})
    assert set(got) == set(INFERENCE_OUTPUTS)
    for key in INFERENCE_OUTPUTS:
        np.testing.assert_allclose(got[key].numpy(), expected[key].numpy(), rtol=1e-5, atol=1e-5)
    assert got["end_top_index"].shape == (3, 6)
    assert not {t for t in op_types(path) if t.startswith("Xlnet") or t.startswith("_Xla") or t == "XlaLaunch"}


@resource
def serving_replies():
    """One fresh serving process for the export (each pays TensorFlow's import and the SavedModel's load), started
    on the background thread (tests/background.py): the dev questions and contexts, then
    test_bad_squad_requests_give_defined_outputs_or_a_clear_error's call and fuzz, and the serving client's gRPC
    and REST requests of the dev questions. (Building the requests is protobuf and numpy: no TensorFlow op runs.)"""
    export = str(squad_release.value() / RELEASE_EXPORT)
    examples = squad_data.read_squad_file(RELEASE_FLAGS["predict_file"], False).examples
    rows = [{"question": e.question_text, "context": e.paragraph_text} for e in examples]
    request = base64.b64encode(client.predict_request("squad", rows).SerializeToString()).decode("ascii")
    return serve({"export": export, "fuzz": {"signature": "serving_default", "count": 300, "seed": 3},
                  "grpc": [request], "rest": [client.rest_body(rows)],
                  "calls": [{"signature": "serving_default", "inputs": {
                      "question": strings(e.question_text for e in examples),
                      "context": strings(e.paragraph_text for e in examples)}},
                            {"signature": "serving_default", "inputs": {
                                "question": strings(["Who?", "", "Who?"]),
                                "context": strings(["Ann wrote it.", "Ann wrote it.", " \t "])}}]})


@pytest.fixture(scope="module")
def served():
    return serving_replies.value()


@pytest.mark.slow
def test_raw_text_answers_equal_do_predict_in_a_fresh_process(squad_run, served):
    """serving_default on the dev questions and contexts answers what run_squad.py --do_predict writes (text and
    null odds), with offsets into the original context."""
    examples = squad_run["examples"]
    out = served["calls"][0]["outputs"]
    texts = decoded(out["text"])
    assert texts == [squad_run["predictions"][e.qas_id] for e in examples]
    np.testing.assert_allclose(out["null_odds"]["value"], [squad_run["null_odds"][e.qas_id] for e in examples],
                               rtol=1e-5, atol=1e-5)
    for e, text, start, end in zip(examples, texts, out["start_char"]["value"], out["end_char"]["value"]):
        assert e.paragraph_text[start:end] == text if text else (start, end) == (-1, -1)
    assert sum(bool(t) for t in texts) > len(texts) // 2  # mostly real spans, not the no-span fallback


def test_the_run_loads_as_a_keras_text_model_answering_as_do_predict(squad_run):
    """xlnet_tf.load_text_model on the run's directory: its network and checkpoint, its windows and beam, and
    predict's answers are --do_predict's (the null odds to float32 round-off of another batch)."""
    import xlnet_tf

    model = xlnet_tf.load_text_model(squad_run["model_dir"])
    pre = model.preprocessor
    assert (type(model), pre.seq_length, pre.max_query_length, pre.doc_stride, model.max_answer_length,
            model.network.start_n_top, model.network.end_n_top) == (xlnet_tf.XLNetTextSquad, 64, 16, 24, 12, 3, 3)
    examples = squad_run["examples"]
    answers = model.predict(([e.question_text for e in examples], [e.paragraph_text for e in examples]), verbose=0)
    np.testing.assert_allclose(answers["null_odds"], [squad_run["null_odds"][e.qas_id] for e in examples],
                               rtol=1e-4, atol=1e-4)
    same = [t.decode() == squad_run["predictions"][e.qas_id] for t, e in zip(answers["text"], examples)]
    assert sum(same) >= 0.8 * len(same), same  # argmax ties of a model trained 2 steps may fall the other way


def test_the_serving_clients_requests_get_do_predicts_answers(squad_run, served):
    """xlnet_tf.cli.serving_client's gRPC and REST requests of the dev questions, answered by the fresh serving
    process, read back as run_squad.py --do_predict's answers."""
    examples = squad_run["examples"]
    response = predict_pb2.PredictResponse.FromString(base64.b64decode(served["grpc"][0]))
    for answer in (client.rows_from_response(response, len(examples)),
                   client.rows_from_rest(served["rest"][0], len(examples))):
        assert [a["text"] for a in answer] == [squad_run["predictions"][e.qas_id] for e in examples]
        np.testing.assert_allclose([a["null_odds"] for a in answer],
                                   [squad_run["null_odds"][e.qas_id] for e in examples], rtol=1e-5, atol=1e-5)
        assert all(e.paragraph_text[a["start_char"]:a["end_char"]] == a["text"] for e, a in zip(examples, answer)
                   if a["text"])


def test_bad_squad_requests_give_defined_outputs_or_a_clear_error(served):
    counts = served["fuzz"]
    assert counts["unexpected_errors"] == [] and counts["missing_errors"] == 0
    assert counts["ok"] + counts["expected_errors"] == counts["requests"] == 300
    assert counts["non_finite"] == 0 and counts["wrong_batch"] == 0
    out = served["calls"][1]["outputs"]  # an empty question or context: what run_squad.py skips, "" and 1e6
    assert decoded(out["text"])[1:] == ["", ""] and out["null_odds"]["value"][1:] == [1e6, 1e6]
    assert out["start_char"]["value"][1:] == [-1, -1]


@pytest.mark.slow
def test_export_command_writes_the_squad_release_from_the_model_dir(squad_run):
    """python -m xlnet_tf.cli.export --format=release on a run_squad model directory: the original run_squad.py head
    names next to the network's, from the run's record alone."""
    release = str(squad_run["tmp"] / "release")
    done = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.export", f"--model_dir={squad_run['model_dir']}",
                           f"--export_dir={release}", "--format=release"], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    names = dict(tf.train.list_variables(os.path.join(release, "xlnet_model.ckpt")))
    assert names["start_logits/dense/kernel"] == [64, 1] and names["answer_class/dense_1/kernel"] == [64, 1]
    assert names["model/transformer/word_embedding/lookup_table"] == [8000, 64]
    assert not [n for n in names if not n.startswith(("model/transformer/", "start_logits/", "end_logits/",
                                                      "answer_class/"))]
