"""TF Serving exports of a fine-tuned classifier, end to end: ``run_classifier`` trains the tiny model on the MRPC
fixture, predicts and exports; ``python -m xlnet_tf.cli.export`` exports the same run from its ``--model_dir`` alone;
every check of the SavedModel runs in a fresh process with TensorFlow and tensorflow-text's kernels only
(``tests/serving_client.py``), as TF Serving loads it. The run, the serving process and the checks that only start
processes run on the background thread (tests/background.py)."""

import base64
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
from concurrent import futures

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from background import background, resource
from classifier_helpers import FIXTURES, REPO, SPIECE, make_flags, micro_config
from export_helpers import PYTHON, decoded, serve, strings
from official.nlp.data import classifier_data_lib  # noqa: F401 (imported here, not first on the background thread)
from xlnet_tf.cli import serving_client as client
from xlnet_tf.tasks.classification import classifier_data
from xlnet_tf.finetuning.serving import METADATA_FILE, RUN_RECORD, SOURCE_FILE, existing_versions
from xlnet_tf.tokenization import XLNetTokenizer

TINY = os.path.join(REPO, "configs", "tiny.json")
SEQ = 48


def _settings(tmp):
    return make_flags(tmp, task_name="mrpc", data_dir=os.path.join(FIXTURES, "glue", "MRPC"), model_config_path=TINY,
                      max_seq_length=SEQ, do_train=True, do_predict=True, export_dir=str(tmp / "serving"),
                      predict_dir=str(tmp / "predict"))


@resource
def _fine_tuned(tmp_path):
    """run_classifier.py as a user runs it: the tiny model fine-tuned for 2 steps on the MRPC fixture (a
    sentence-pair task), with --do_predict and --export_dir in the same run. Its directory."""
    _run_classifier("--do_train", "--do_predict", *_flags(_settings(tmp_path)))
    return tmp_path


def _flags(s) -> list:
    return [f"--{name}={getattr(s, name)}" for name in (
        "task_name", "data_dir", "model_config_path", "spiece_model_file", "model_dir", "max_seq_length",
        "train_batch_size", "predict_batch_size", "train_steps", "iterations", "learning_rate", "dropout", "dropatt",
        "export_dir", "predict_dir")]


def _run_classifier(*flags):
    done = subprocess.run([PYTHON, "run_classifier.py", *flags], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""))
    assert done.returncode == 0, done.stderr[-4000:]


@functools.cache
def _run() -> dict:
    """The fine-tuned run: its settings, export (the newest version), dev examples and --do_predict's logits (read
    once, for the tests in front and on the background thread)."""
    tmp = _fine_tuned.value()
    settings = _settings(tmp)
    examples = classifier_data.read_examples(classifier_data.get_task("mrpc"), settings.data_dir, "dev").examples
    with open(os.path.join(str(tmp), "predict", "mrpc.dev.logits.json")) as f:
        predicted = json.load(f)
    export = os.path.join(settings.export_dir, str(max(existing_versions(settings.export_dir))))
    return dict(tmp=tmp, settings=settings, export=export, examples=examples, predicted=predicted)


@pytest.fixture(scope="module")
def run():
    return _run()


@pytest.mark.slow
def test_run_classifier_writes_a_versioned_export_and_records_its_settings(run):
    s = run["settings"]
    assert run["export"] == os.path.join(s.export_dir, "2")  # version = the checkpoint's global step
    assert existing_versions(s.export_dir) == [2]
    assert not [n for n in os.listdir(s.export_dir) if n != "2"]  # no temporary directories left
    extra = os.path.join(run["export"], "assets.extra")
    with open(os.path.join(extra, METADATA_FILE)) as f:
        meta = json.load(f)
    assert {k: meta[k] for k in ("kind", "task", "labels", "max_seq_length", "lower_case", "pair", "global_step",
                                 "version")} == dict(kind="classification", task="mrpc", labels=["0", "1"],
                                                     max_seq_length=SEQ, lower_case=False, pair=True,
                                                     global_step=2, version=2)
    assert os.path.exists(os.path.join(extra, "spiece.model"))
    with open(os.path.join(s.model_dir, RUN_RECORD)) as f:
        record = json.load(f)
    assert record["runner"] == "classifier" and record["settings"]["task_name"] == "mrpc"
    assert os.path.isabs(record["settings"]["spiece_model_file"])


@pytest.mark.slow
@background
def test_a_rerun_of_the_finished_run_exports_no_new_version(tmp_path):
    """The demo's rerun (nothing left to train) exported the same checkpoint again as version 3: TF Serving moved
    to it and cli.predict refused its earlier outputs as another model's. The export records what it was written
    from (assets.extra/source.json), and the rerun finds it there (a copy of the run: its own paths)."""
    run = _run()
    shutil.copytree(run["tmp"], tmp_path / "run", symlinks=True)
    s = _settings(tmp_path / "run")
    with open(os.path.join(s.export_dir, "2", "assets.extra", SOURCE_FILE)) as f:
        source = json.load(f)
    assert source["checkpoint"] == os.path.join(run["settings"].model_dir, "model-2"), source
    _run_classifier("--do_train", "--do_predict", *_flags(s))
    assert existing_versions(s.export_dir) == [2]


@resource
def _served():
    """One fresh serving process for the run's export (each pays TensorFlow's import and the SavedModel's load):
    the dev sentences through serving_default, their Python tokenizer's ids through serve_ids, the metadata
    signature, the serving client's gRPC and REST requests (test_the_serving_clients_requests_...), then the fuzz
    of test_bad_requests_give_defined_outputs_or_a_clear_error."""
    run = _run()
    tokenizer = XLNetTokenizer(run["settings"].spiece_model_file)
    ids = [classifier_data.encode_example(tokenizer, e, SEQ)[:3] for e in run["examples"]]
    request = client.predict_request("mrpc", client_rows(run)).SerializeToString()
    return serve({"export": run["export"], "grpc": [base64.b64encode(request).decode("ascii")],
                  "rest": [client.rest_body(client_rows(run))], "calls": [
        {"signature": "serving_default", "inputs": {"sentence": strings(e.text_a for e in run["examples"]),
                                                    "sentence2": strings(e.text_b for e in run["examples"])}},
        {"signature": "serve_ids", "inputs": {
            "input_ids": {"dtype": "int32", "value": [x[0] for x in ids]},
            "segment_ids": {"dtype": "int32", "value": [x[1] for x in ids]},
            "padding_mask": {"dtype": "float32", "value": [x[2] for x in ids]}}},
        {"signature": "metadata", "inputs": {}},
        # Inputs of another rank than the declared [None], as TF Serving passes them on (a [2, 2] tensor must not
        # be 4 examples, a scalar not 1).
        {"signature": "serving_default", "inputs": {"sentence": strings([["a", "b"], ["c", "d"]]),
                                                    "sentence2": strings(["e", "f"])}},
        {"signature": "serving_default", "inputs": {"sentence": strings(["a", "b"]),
                                                    "sentence2": dict(strings(["e"]), shape=[])}}],
        "fuzz": {"signature": "serving_default", "count": 400, "seed": 1}})


@pytest.fixture(scope="module")
def served():
    return _served.value()


@pytest.mark.slow
def test_raw_text_and_ids_equal_do_predict_in_a_fresh_process(run, served):
    """serving_default on the dev sentences gives run_classifier --do_predict's logits; serve_ids on the ids of
    the Python tokenizer too; the metadata signature says what the client needs."""
    predicted = run["predicted"]
    text, by_ids, meta = (c["outputs"] for c in served["calls"][:3])
    expected = np.array([p["logits"] for p in predicted])
    for outputs in (text, by_ids):
        np.testing.assert_allclose(outputs["logits"]["value"], expected, rtol=1e-5, atol=1e-6)
        probabilities = np.array(outputs["probabilities"]["value"])
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-6)
        assert decoded(outputs["label"]) == [p["prediction"] for p in predicted]
        assert outputs["logits"]["dtype"] == "float32" and outputs["label"]["dtype"] == "string"
    assert base64.b64decode(meta["kind"]["value"]) == b"classification"
    assert decoded(meta["labels"]) == ["0", "1"] and meta["max_seq_length"]["value"] == SEQ
    assert meta["lower_case"]["value"] is False and meta["pair"]["value"] is True


def test_inputs_of_another_rank_are_refused_naming_the_input(served):
    """The signature declares [None] per text input; a [2, 2] tensor or a scalar is an InvalidArgumentError that
    names the input, as the Keras model refuses them, not 4 or 1 predictions."""
    matrix, scalar = served["calls"][3:5]
    assert matrix.get("error") == "InvalidArgumentError", matrix
    assert "Shape of tensor" in matrix["message"] and "sentence [2,2] is not compatible with expected shape [?]" \
        in matrix["message"] and "sentence_shape_as_declared" in matrix["message"]
    assert scalar.get("error") == "InvalidArgumentError", scalar
    assert "sentence2 [] is not compatible with expected shape [?]" in scalar["message"]


def client_rows(run) -> list:
    return [{"sentence": e.text_a, "sentence2": e.text_b} for e in run["examples"]]


def test_the_serving_clients_requests_get_do_predicts_answers(run, served):
    """xlnet_tf.cli.serving_client's gRPC PredictRequest and REST body, built from the raw dev sentences, carry
    them as the signature's string inputs; the fresh TF-Serving-like process decodes them (tf.make_ndarray / the
    JSON lists), runs serving_default and answers; the client reads both answers as --do_predict's labels and
    logits."""
    import tensorflow as tf

    rows, predicted = client_rows(run), run["predicted"]
    request = client.predict_request("mrpc", rows, model_version=2)
    assert (request.model_spec.name, request.model_spec.signature_name) == ("mrpc", "serving_default")
    assert request.model_spec.version.value == 2 and sorted(request.inputs) == ["sentence", "sentence2"]
    for name in ("sentence", "sentence2"):
        assert request.inputs[name].dtype == tf.string.as_datatype_enum
        assert [v.decode() for v in tf.make_ndarray(request.inputs[name])] == [r[name] for r in rows]
    body = json.loads(json.dumps(client.rest_body(rows)))  # what travels
    assert body == {"signature_name": "serving_default", "inputs": client.columns(rows)}

    response = predict_pb2.PredictResponse.FromString(base64.b64decode(served["grpc"][0]))
    assert response.model_spec.name == "mrpc"
    for answer in (client.rows_from_response(response, len(rows)), client.rows_from_rest(served["rest"][0], len(rows))):
        assert [a["label"] for a in answer] == [p["prediction"] for p in predicted]
        np.testing.assert_allclose([a["logits"] for a in answer], [p["logits"] for p in predicted],
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose([sum(a["probabilities"]) for a in answer], 1.0, rtol=1e-6)


@pytest.mark.slow
@background
def test_saved_model_cli_lists_both_signatures():
    run = _run()
    cli = os.path.join(os.path.dirname(PYTHON), "saved_model_cli")
    done = subprocess.run([cli, "show", "--dir", run["export"], "--all"], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    blocks = {b.split("\n", 1)[0].strip("'").split("'")[0]: b for b in out.split("signature_def['")[1:]}
    assert set(blocks) >= {"serving_default", "serve_ids", "metadata"}
    default, ids = blocks["serving_default"], blocks["serve_ids"]
    for name in ("sentence", "sentence2"):
        assert f"inputs['{name}'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in default
    for name, dtype in (("input_ids", "DT_INT32"), ("segment_ids", "DT_INT32"), ("padding_mask", "DT_FLOAT")):
        assert f"inputs['{name}'] tensor_info:\n        dtype: {dtype}\n        shape: (-1, -1)" in ids
    for block in (default, ids):
        assert "outputs['probabilities'] tensor_info:\n        dtype: DT_FLOAT\n        shape: (-1, 2)" in block
        assert "outputs['label'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in block


def test_bad_requests_give_defined_outputs_or_a_clear_error(served):
    """Random mixes of empty, whitespace-only, invalid UTF-8, 100x too long and ordinary texts, batches of 0 to 8,
    and now and then two inputs of different batch sizes: no crash, finite outputs of the request's batch, an
    InvalidArgumentError naming the inputs exactly when the batch sizes differ."""
    counts = served["fuzz"]
    assert counts["unexpected_errors"] == [] and counts["missing_errors"] == 0
    assert counts["ok"] + counts["expected_errors"] == counts["requests"] == 400
    assert counts["non_finite"] == 0 and counts["wrong_batch"] == 0 and counts["expected_errors"] > 0


@pytest.mark.slow
@background
def test_export_command_from_the_model_dir_alone(tmp_path):
    """python -m xlnet_tf.cli.export needs only --model_dir and --export_dir; a second export of the same step gets
    the next version (never overwriting one); --format=release writes the original layout."""
    run = _run()
    s = run["settings"]
    base = str(tmp_path / "serving")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")

    def export(*flags):  # started, not awaited: independent exports run side by side (each imports TensorFlow)
        return subprocess.Popen([PYTHON, "-m", "xlnet_tf.cli.export", f"--model_dir={s.model_dir}", *flags],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)

    release = str(tmp_path / "release")
    first, to_release = export(f"--export_dir={base}"), export(f"--export_dir={release}", "--format=release")
    for done in (first, to_release):
        _, err = done.communicate(timeout=300)
        assert done.returncode == 0, err[-3000:]
    assert sorted(os.listdir(release)) == ["spiece.model", "xlnet_config.json", "xlnet_model.ckpt.data-00000-of-00001",
                                           "xlnet_model.ckpt.index"]
    os.makedirs(os.path.join(base, "2", "keep"))  # the export must not touch an existing version
    second = export(f"--export_dir={base}")
    again = export(f"--export_dir={release}", "--format=release")
    wrong = export(f"--export_dir={base}", "--task_name=sst-2")
    (_, second_err), (_, again_err), (_, wrong_err) = (p.communicate(timeout=300) for p in (second, again, wrong))
    assert second.returncode == 0, second_err[-3000:]
    assert existing_versions(base) == [2, 3] and os.path.isdir(os.path.join(base, "2", "keep"))
    assert "version 2 exists; writing version 3 instead" in second_err
    assert again.returncode == 1 and "already holds a release" in again_err
    assert wrong.returncode == 1 and "was fine-tuned on mrpc" in wrong_err
    reply = serve({"export": os.path.join(base, "3"), "calls": [
        {"signature": "serving_default", "inputs": {"sentence": strings(e.text_a for e in run["examples"]),
                                                    "sentence2": strings(e.text_b for e in run["examples"])}}]})
    np.testing.assert_allclose(reply["calls"][0]["outputs"]["logits"]["value"],
                               [p["logits"] for p in run["predicted"]], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@background
def test_bad_requests_multiple_choice(tmp_path):
    """The same random mixes for RACE's three inputs (options [batch, choices] with 1 to 5 choices), on the export
    run_classifier.py writes for RACE (the micro model fine-tuned for a step on the RACE fixture)."""
    _run_classifier("--task_name=race", f"--data_dir={FIXTURES}/race", f"--model_config_path={micro_config(tmp_path)}",
                    f"--spiece_model_file={SPIECE}", f"--model_dir={tmp_path / 'model'}",
                    f"--export_dir={tmp_path / 'serving'}", "--do_train", "--train_steps=1", "--iterations=1",
                    "--train_batch_size=2", f"--max_seq_length={SEQ}", "--max_qa_length=16")
    path = str(tmp_path / "serving" / "1")
    reply = serve({"export": path, "fuzz": {"signature": "serving_default", "count": 300, "seed": 2},
                   "calls": [{"signature": "serving_default", "inputs": {
                       "article": strings(["a"]), "question": strings(["q"]),
                       "options": dict(strings([]), shape=[1, 0])}}]})
    counts = reply["fuzz"]
    assert counts["unexpected_errors"] == [] and counts["missing_errors"] == 0
    assert counts["ok"] + counts["expected_errors"] == counts["requests"] == 300
    assert counts["non_finite"] == 0 and counts["wrong_batch"] == 0
    assert "at least one choice" in reply["calls"][0]["message"]  # no options: a clear InvalidArgumentError


# The kernel libraries TF Serving's stock model server links: tensorflow_serving/model_servers/BUILD puts
# "@org_tensorflow_text//tensorflow_text:ops_lib" in SUPPORTED_TENSORFLOW_OPS (server_lib's deps), and
# tensorflow_text/BUILD's ops_lib depends on ":<library>_cc" for each of these (tensorflow/text, 2.20 branch).
TF_SERVING_TEXT_LIBRARIES = {
    "boise_offset_converter", "byte_splitter", "constrained_sequence_op", "fast_bert_normalizer",
    "fast_sentencepiece_tokenizer", "fast_wordpiece_tokenizer", "mst_ops", "ngrams_op", "normalize_ops",
    "phrase_tokenizer", "regex_split_ops", "sentence_breaking_ops", "sentencepiece_mobile_tokenizer",
    "sentencepiece_tokenizer", "split_merge_from_logits_tokenizer", "split_merge_tokenizer",
    "state_based_sentence_breaker_op", "text_similarity_metric_ops", "trimmer_ops", "unicode_script_tokenizer",
    "utf8_binarize_op", "whitespace_tokenizer", "whitespace_tokenizer_v2", "wordpiece_tokenizer"}


@pytest.mark.slow
@background
def test_the_exports_custom_ops_are_all_in_the_stock_tf_serving_server():
    """python -m xlnet_tf.cli.serving_ops lists each op beyond TensorFlow's with its tensorflow-text library; every
    one is a library TF Serving's model server links, so the stock server loads the export (TF versions equal)."""
    run = _run()
    done = subprocess.run([PYTHON, "-m", "xlnet_tf.cli.serving_ops", f"--saved_model={run['export']}"],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES=""))
    assert done.returncode == 0, done.stderr[-2000:]
    ops = dict(line.split("\t") for line in done.stdout.strip().splitlines())
    assert {"SentencepieceOp", "NormalizeUTF8"} <= set(ops)  # the tokenizer and the text cleaning, at least
    libraries = {library.removeprefix("tensorflow-text ") for library in ops.values()}
    assert libraries <= TF_SERVING_TEXT_LIBRARIES, ops


@background
@pytest.mark.slow
def test_the_serving_client_command_over_the_wire(tmp_path):
    """python -m xlnet_tf.cli.serving_client against servers on 127.0.0.1 that answer as the fresh serving process
    did (a gRPC PredictionService, a REST endpoint): its request arrives as built, each row's answer is printed as
    one JSON line equal to --do_predict's; an unknown model and a port where nothing listens end in one line."""
    run, served = _run(), _served.value()
    rows, predicted = client_rows(run), run["predicted"]
    received = {"grpc": [], "rest": []}

    class Predictions(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 (the service's method name)
            received["grpc"].append(request)
            if request.model_spec.name != "mrpc":
                context.abort(grpc.StatusCode.NOT_FOUND,
                              f"Servable not found for request: Latest({request.model_spec.name})")
            return predict_pb2.PredictResponse.FromString(base64.b64decode(served["grpc"][0]))

    class Rest(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received["rest"].append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            answer = json.dumps(served["rest"][0]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = grpc.server(futures.ThreadPoolExecutor(4))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Predictions(), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    rest = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Rest)
    threading.Thread(target=rest.serve_forever, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: nothing answers there
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    common = [PYTHON, "-m", "xlnet_tf.cli.serving_client", f"--input_file={rows_file}"]
    commands = {"grpc": [f"--server=127.0.0.1:{grpc_port}", "--model_name=mrpc"],
                "rest": ["--protocol=rest", f"--server=127.0.0.1:{rest.server_address[1]}", "--model_name=mrpc"],
                "unknown": [f"--server=127.0.0.1:{grpc_port}", "--model_name=nope"],
                "closed": ["--protocol=rest", f"--server=127.0.0.1:{closed.getsockname()[1]}", "--model_name=mrpc",
                           "--timeout=20"]}
    try:
        procs = {k: subprocess.Popen(common + v, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                     env=env) for k, v in commands.items()}
        done = {k: (p.wait(timeout=300), *p.communicate()) for k, p in procs.items()}
    finally:
        server.stop(0)
        rest.shutdown()
        closed.close()
    for k in ("grpc", "rest"):
        code, out, err = done[k]
        assert code == 0, err[-2000:]
        answer = [json.loads(line) for line in out.strip().splitlines()]
        assert [a["label"] for a in answer] == [p["prediction"] for p in predicted]
        np.testing.assert_allclose([a["logits"] for a in answer], [p["logits"] for p in predicted], rtol=1e-5,
                                   atol=1e-6)
    assert [r for r in received["grpc"] if r.model_spec.name == "mrpc"] == [client.predict_request("mrpc", rows)]
    assert received["rest"] == [("/v1/models/mrpc:predict", client.rest_body(rows))]
    for k, expected in (("unknown", "--model_name=nope: the server has no such model or version"),
                        ("closed", "--server=127.0.0.1:")):
        code, out, err = done[k]
        lines = err.strip().splitlines()
        assert code == 1 and out == "" and "Traceback" not in err, err[-2000:]
        assert lines[-2].startswith("xlnet_tf.cli.serving_client: error: " + expected), lines
