"""Batch prediction (xlnet_tf.batch.prediction): sharded TSV/JSONL inputs streamed, bad rows named with file:line, the
checkpoint path (run_classifier.py --predict_input_glob) and the SavedModel path agree, SavedModel versions, and a
SIGKILLed job that reruns to output identical to an uninterrupted one."""

import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from background import background, resource, run_function
from batch_helpers import save_ids_export, settings_in, write_classifier
from classifier_helpers import REPO, SPIECE, build_model, make_flags
from pretraining_helpers import absl_messages
from squad_helpers import squad_release  # noqa: F401 (conftest's squad_run: made on the background thread)
from xlnet_tf.batch import prediction as bp
from xlnet_tf.errors import InputError
from xlnet_tf import runner
from xlnet_tf.finetuning import serving as exporter

SENTENCES = [line.split("\t")[0] for line in open(os.path.join(REPO, "data", "sentiment", "train.tsv"),
                                                  encoding="utf-8").read().splitlines()[1:]]


def write_shards(directory, shards: int, rows: int, ext: str = "tsv") -> str:
    """``shards`` files of ``rows`` sentences each (the bundled sentences repeated); returns their glob."""
    os.makedirs(directory, exist_ok=True)
    for k in range(shards):
        texts = [SENTENCES[(k * rows + i) % len(SENTENCES)] for i in range(rows)]
        with open(os.path.join(directory, f"part-{k:02d}.{ext}"), "w", encoding="utf-8") as f:
            if ext == "tsv":
                f.write("id\tsentence\n" + "".join(f"r{k}-{i}\t{t}\n" for i, t in enumerate(texts)))
            else:
                f.write("".join(json.dumps({"id": f"r{k}-{i}", "sentence": t}) + "\n" for i, t in enumerate(texts)))
    return os.path.join(directory, f"part-*.{ext}")


@resource
def micro_classifier(tmp_path):
    """``batch_helpers.write_classifier(tmp_path)``, by a process on the background thread (for the killed job's
    body there, and ``fine_tuned`` in front)."""
    run_function(write_classifier, tmp_path, timeout=300)
    return tmp_path


@pytest.fixture(scope="module")
def fine_tuned():
    """A micro SST-2 classifier with random weights (``micro_classifier``): its settings, with its checkpoint in
    model_dir; an ids SavedModel (version 3 of a base path); the model, restored from the checkpoint; its task."""
    settings = settings_in(micro_classifier.value())
    model, bundle = build_model(settings)
    tf.train.Checkpoint(model=model).restore(
        tf.train.latest_checkpoint(settings.model_dir)).assert_existing_objects_matched()
    return settings, str(micro_classifier.value() / "export"), model, bundle


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_rows_are_streamed_and_bad_ones_named(tmp_path):
    tsv = tmp_path / "a.tsv"
    tsv.write_text("id\tsentence\tlabel\nx1\tGood.\t1\nx2\tonly two\n\n" "x3\t \t0\nx4\tFine.\t0\n", encoding="utf-8")
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_bytes(b'{"id": 7, "sentence": "Good."}\n{"sentence": \n[1]\n{"id": 8}\n\xff\xfe\n'
                      b'{"id": "9", "sentence": "Ok."}\n')
    fields = bp.Fields.parse("sentence", "id")
    rows = list(bp.read_rows(str(tsv), "tsv", fields))
    assert [(r.line, r.text_a, r.id, r.problem) for r in rows] == [
        (2, "Good.", "x1", ""), (3, "", "", "2 columns, header has 3"), (5, "", "", "empty text"),
        (6, "Fine.", "x4", "")]
    rows = list(bp.read_rows(str(jsonl), "jsonl", fields))
    assert [(r.line, r.text_a, r.id) for r in rows if not r.problem] == [(1, "Good.", "7"), (6, "Ok.", "9")]
    assert [(r.line, r.problem.split(" (")[0]) for r in rows if r.problem] == [
        (2, "not valid JSON"), (3, "not a JSON object"), (4, "no 'sentence'"), (5, "not UTF-8")]
    assert rows[-1].end == len(jsonl.read_bytes())  # progress counts bytes
    # Values that are not text are skipped and named, not predicted on their JSON text; ids may be numbers.
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"sentence": {"text": "x"}}\n{"sentence": 123}\n{"sentence": null}\n{"sentence": ["a"]}\n'
                   '{"sentence": true}\n{"sentence": "\\ud800 x"}\n{"id": [1], "sentence": "a"}\n'
                   '{"id": 2.5, "sentence": "b"}\n', encoding="utf-8")
    rows = list(bp.read_rows(str(odd), "jsonl", bp.Fields.parse("sentence", "")))  # no id field
    assert [r.problem for r in rows] == [
        "'sentence' is dict, not a string", "'sentence' is int, not a string", "'sentence' is null, not a string",
        "'sentence' is list, not a string", "'sentence' is bool, not a string",
        "'sentence' holds a lone surrogate (not valid Unicode)", "", ""]
    rows = [r for r in bp.read_rows(str(odd), "jsonl", fields) if r.line > 6]
    assert [(r.problem, r.id) for r in rows] == [("'id' (the id) is list, not a string or number", ""),
                                                 ("", "2.5")]
    with pytest.raises(ValueError, match=r"a.tsv:1: header has no column 'text'.*columns: id, sentence, label"):
        list(bp.read_rows(str(tsv), "tsv", bp.Fields.parse("text")))
    # One file named twice (through .. and a link) is one input, not two inputs of the same name.
    os.symlink(tsv, tmp_path / "link.tsv")
    assert bp.list_shards(f"{tsv},{tmp_path}/../{tmp_path.name}/a.tsv,{tmp_path}/link.tsv") == [str(tsv)]
    with pytest.raises(FileNotFoundError, match=r"--input_glob: '.*nothing\*' matches no file"):
        bp.list_shards(str(tmp_path / "nothing*"))
    with pytest.raises(ValueError, match="unknown input format"):
        bp.shard_format(str(tmp_path / "c.txt"))
    # A byte-order mark is not part of the first column's name; a gzip file named .tsv is named, not read as rows;
    # a directory given as the glob says so.
    bom = tmp_path / "bom.tsv"
    bom.write_bytes("\ufeffsentence\tid\nGood.\tx1\n".encode("utf-8"))
    assert [(r.text_a, r.id) for r in bp.read_rows(str(bom), "tsv", fields)] == [("Good.", "x1")]
    with pytest.raises(ValueError, match=r"bom.tsv:1: header has no column 'text' \(columns: sentence, id\)"):
        list(bp.read_rows(str(bom), "tsv", bp.Fields.parse("text")))
    packed = tmp_path / "packed.tsv"
    packed.write_bytes(gzip.compress(tsv.read_bytes()))
    for fmt in ("tsv", "jsonl"):
        with pytest.raises(ValueError, match=rf"packed.tsv: a gzip file, not {fmt.upper()} text: decompress it"):
            bp.check_header(str(packed), fmt, fields)
    with pytest.raises(ValueError, match=rf"--input_glob: '{tmp_path}' is a directory: give a glob of its files"):
        bp.list_shards(str(tmp_path))


class _LengthPredictor(bp.Predictor):
    """A raw-text "model" (no TensorFlow model to build): probabilities from the text's length, for the engine's
    tests that need no real model."""
    takes_text, pair = True, False
    identity = {"sha256": "length"}

    def __init__(self):
        from xlnet_tf import tasks

        self.family = tasks.get("classification")
        self.meta = {"labels": ["0", "1"]}
        self._describe(["probabilities"])

    def __call__(self, batch):
        odd = np.asarray([len(t) % 2 for t in np.asarray(batch["text_a"])], np.float32)
        return {"probabilities": np.stack([1 - odd, odd], axis=1)}


def test_a_truncated_output_is_predicted_again_on_resume(tmp_path):
    """A rerun skipped a finished shard whose predictions file had been cut (a partial copy or sync: 6,886 of
    25,000 lines) and reported all its rows, complete: the size written is recorded and compared."""
    (tmp_path / "in").mkdir()
    for k in range(2):
        (tmp_path / "in" / f"part-{k}.tsv").write_text("sentence\n" + "".join(f"row {i}\n" for i in range(50)))
    out, fields = tmp_path / "out", bp.Fields.parse("sentence")
    first = bp.predict_shards(_LengthPredictor(), str(tmp_path / "in" / "*.tsv"), str(out), fields, batch_size=16)
    whole = (out / "part-1.tsv.predictions.jsonl").read_bytes()
    assert [s["output_bytes"] for s in first["shards"]][1] == len(whole)
    (out / "part-1.tsv.predictions.jsonl").write_bytes(whole[:100])
    untouched = (out / "part-0.tsv.predictions.jsonl").stat().st_ino
    with absl_messages() as logs:
        again = bp.predict_shards(_LengthPredictor(), str(tmp_path / "in" / "*.tsv"), str(out), fields,
                                  batch_size=16)
    assert (out / "part-1.tsv.predictions.jsonl").read_bytes() == whole
    assert (out / "part-0.tsv.predictions.jsonl").stat().st_ino == untouched  # the intact shard is skipped
    assert again["complete"] and again["rows"] == 100
    assert any("part-1.tsv.predictions.jsonl: 100 bytes, written with" in m and "truncated" in m for m in logs), logs


def test_a_row_over_max_line_bytes_is_skipped_and_named_without_being_read_whole(tmp_path):
    """One 55 MB TSV row cost 2.5 GB of memory and was predicted from its first tokens, with nothing said."""
    from xlnet_tf.batch import inputs

    (tmp_path / "in").mkdir()
    tsv = tmp_path / "in" / "part-0.tsv"
    tsv.write_bytes(b"sentence\tlabel\n" + b"good film. " * 300 + b"\t1\nbad film\t0\n" + b"x" * 1000)
    fields = bp.Fields.parse("sentence")
    asked = []
    real_open = inputs.io_utils.open

    class Recorded:  # the sizes read_rows asks readline for: never the whole over-long row
        def __init__(self, f):
            self.f = f

        def readline(self, size=-1):
            asked.append(size)
            return self.f.readline(size)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    inputs.io_utils.open = lambda path, mode="r", **kw: Recorded(real_open(path, mode, **kw))
    try:
        rows = list(bp.read_rows(str(tsv), "tsv", fields, max_line_bytes=500))
    finally:
        inputs.io_utils.open = real_open
    assert [(r.line, r.text_a, r.problem) for r in rows] == [
        (2, "", "3303 bytes, longer than --max_line_bytes=500"), (3, "bad film", ""),
        (4, "", "1000 bytes, longer than --max_line_bytes=500")]
    assert rows[-1].end == tsv.stat().st_size and max(asked) <= 1 << 20 and -1 not in asked
    summary = bp.predict_shards(_LengthPredictor(), str(tsv), str(tmp_path / "out"), fields, max_line_bytes=500)
    assert summary["rows"] == 1 and summary["shards"][0]["skipped_rows"] == [
        f"{tsv}:2: 3303 bytes, longer than --max_line_bytes=500", f"{tsv}:4: 1000 bytes, longer than "
        "--max_line_bytes=500"]
    with pytest.raises(InputError, match=r"part-0.tsv:1: the header is 15 bytes, longer than --max_line_bytes=10"):
        bp.check_header(str(tsv), "tsv", fields, max_line_bytes=10)
    # The default bound leaves every usual row alone.
    assert [r.line for r in bp.read_rows(str(tsv), "tsv", fields) if not r.problem] == [2, 3]


def test_tsv_line_endings_and_duplicate_columns_are_named(tmp_path):
    """A CR-only file was one header line: 0 rows, complete, exit 0. A column named twice: the last one was read."""
    fields = bp.Fields.parse("sentence", "id")
    cr = tmp_path / "cr.tsv"
    cr.write_bytes(b"sentence\tid\rgood film\t1\rbad film\t2\r")
    with pytest.raises(ValueError, match=r"cr\.tsv:1: a carriage return \(\\r\) inside the header \(CR-only"):
        bp.check_header(str(cr), "tsv", fields)
    mixed = tmp_path / "mixed.tsv"
    mixed.write_bytes(b"sentence\tid\r\nhalf\rline\t1\r\nfine\t2\r\n")
    assert [(r.line, r.text_a, r.problem) for r in bp.read_rows(str(mixed), "tsv", fields)] == [
        (2, "", "a carriage return (\\r) inside the row (mixed line endings?)"), (3, "fine", "")]
    twice = tmp_path / "twice.tsv"
    twice.write_text("sentence\tsentence\nfirst\tsecond\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"twice\.tsv:1: header names column 'sentence' more than once"):
        bp.check_header(str(twice), "tsv", bp.Fields.parse("sentence"))


def test_saved_model_version_is_the_highest(tmp_path):
    for version in ("3", "12", "7"):
        os.makedirs(tmp_path / version)
    for version in ("3", "12"):
        (tmp_path / version / "saved_model.pb").write_bytes(b"")
    (tmp_path / "100.tmp").mkdir()  # not a version, nor is 7 (no saved_model.pb)
    assert bp.resolve_saved_model(str(tmp_path)) == (str(tmp_path / "12"), 12)
    assert bp.resolve_saved_model(str(tmp_path / "3")) == (str(tmp_path / "3"), 3)  # a version, named itself
    assert bp.resolve_saved_model(str(tmp_path / "3") + "/") == (str(tmp_path / "3"), 3)
    os.makedirs(tmp_path / "plain")
    (tmp_path / "plain" / "saved_model.pb").write_bytes(b"")
    assert bp.resolve_saved_model(str(tmp_path / "plain")) == (str(tmp_path / "plain"), None)
    with pytest.raises(FileNotFoundError, match="no saved_model.pb there nor in a numbered version"):
        bp.resolve_saved_model(str(tmp_path / "7"))


def test_a_damaged_export_metadata_file_is_one_line_naming_it(fine_tuned, tmp_path):
    """labels.json holding a list (or bytes that are not UTF-8) crashed in .get or with a UnicodeDecodeError."""
    export = str(tmp_path / "export")
    shutil.copytree(os.path.join(fine_tuned[1], "3"), export)
    labels = os.path.join(export, "assets.extra", "labels.json")
    for content, why in ((b'["0", "1"]', "expected a JSON object, got list"), (b"\xff{}", "cannot read it")):
        with open(labels, "wb") as f:
            f.write(content)
        with pytest.raises(InputError, match=re.escape(labels) + f": {why}"):
            bp.SavedModelPredictor(export)


def test_checkpoint_and_saved_model_predict_the_same(fine_tuned, tmp_path):
    settings, export, model, _ = fine_tuned
    pattern = write_shards(tmp_path / "in", shards=2, rows=40, ext="jsonl")
    with open(tmp_path / "in" / "part-01.jsonl", "a", encoding="utf-8") as f:
        f.write('{"id": "bad"}\nnot json\n')
    s = make_flags(tmp_path, task_name="sst-2", do_predict=True, model_dir=settings.model_dir,
                   predict_input_glob=pattern, predict_id_field="id", predict_dir=str(tmp_path / "ckpt"))
    written = runner.run(s)["predict"]
    assert [os.path.basename(p) for p in written] == ["part-00.jsonl.predictions.jsonl",
                                                      "part-01.jsonl.predictions.jsonl"]
    # The run's directory named by a relative path: the same checkpoint, its shards done (not refused as another).
    inode = os.stat(written[0]).st_ino
    s_relative = make_flags(tmp_path, task_name="sst-2", do_predict=True, predict_input_glob=pattern,
                            model_dir=os.path.relpath(settings.model_dir), predict_id_field="id",
                            predict_dir=str(tmp_path / "ckpt"))
    assert runner.run(s_relative)["predict"] == written and os.stat(written[0]).st_ino == inode
    # A checkpoint is told by its weights, not its name: the same prefix written again with others differs.
    prefix, weight = str(tmp_path / "again" / "model-1"), model.weights[0]
    original = weight.numpy()
    tf.train.Checkpoint(model=model).write(prefix)
    first = bp.checkpoint_sha256(prefix, model)
    try:
        weight.assign(original + 1)
        tf.train.Checkpoint(model=model).write(prefix)
    finally:
        weight.assign(original)
    assert bp.checkpoint_sha256(prefix, model) != first
    predictor = bp.SavedModelPredictor(export, max_seq_length=s.max_seq_length)
    assert (predictor.version, predictor.signature, predictor.takes_text) == (3, "serving_default", False)
    summary = bp.predict_shards(predictor, pattern, str(tmp_path / "sm"), bp.Fields.parse("sentence", "id"),
                                batch_size=16)
    assert summary["complete"] and summary["rows"] == 80 and summary["skipped"] == 2
    assert summary["shards"][1]["skipped_rows"] == [f"{tmp_path}/in/part-01.jsonl:41: no 'sentence'",
                                                    f"{tmp_path}/in/part-01.jsonl:42: not valid JSON (Expecting "
                                                    "value)"]
    for path in written:
        ckpt, sm = read_jsonl(path), read_jsonl(tmp_path / "sm" / os.path.basename(path))
        shard = int(os.path.basename(path)[5:7])
        assert [r["id"] for r in ckpt] == [r["id"] for r in sm] == [f"r{shard}-{i}" for i in range(40)]
        assert [r["line"] for r in ckpt] == list(range(1, 41))
        assert [r["prediction"] for r in ckpt] == [r["prediction"] for r in sm]
        np.testing.assert_allclose([r["probabilities"] for r in ckpt], [r["probabilities"] for r in sm],
                                   atol=2e-6)
    # A rerun skips finished shards, unless their input changed since.
    with open(tmp_path / "in" / "part-00.jsonl", "a", encoding="utf-8") as f:
        f.write('{"id": "new", "sentence": "One more."}\n')
    again = bp.predict_shards(predictor, pattern, str(tmp_path / "sm"), bp.Fields.parse("sentence", "id"),
                              batch_size=16)
    assert [s["rows"] for s in again["shards"]] == [41, 40]
    assert read_jsonl(tmp_path / "sm" / "part-00.jsonl.predictions.jsonl")[-1]["id"] == "new"
    assert again["outputs_of_other_inputs"] == []
    # An input deleted since: its old output stays (the user's file) but the summary names it.
    os.remove(tmp_path / "in" / "part-01.jsonl")
    fewer = bp.predict_shards(predictor, pattern, str(tmp_path / "sm"), bp.Fields.parse("sentence", "id"))
    assert fewer["complete"] and fewer["outputs_of_other_inputs"] == ["part-01.jsonl.predictions.jsonl"]
    # One job per output directory: a live holder of the lock refuses the second job; a dead one's is taken over.
    lock = tmp_path / "sm" / bp.LOCK_FILE
    assert not lock.exists()  # released after each job
    lock.write_text(json.dumps(dict(host=socket.gethostname(), pid=os.getpid(), started="earlier")))
    with pytest.raises(ValueError, match=rf"another batch prediction is writing there \(pid {os.getpid()} on "):
        bp.predict_shards(predictor, pattern, str(tmp_path / "sm"), bp.Fields.parse("sentence", "id"))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(json.dumps(dict(host=socket.gethostname(), pid=int(gone.stdout), started="earlier")))
    bp.predict_shards(predictor, pattern, str(tmp_path / "sm"), bp.Fields.parse("sentence", "id"))
    assert not lock.exists()
    # A shard whose every row is bad (a TSV read as JSON Lines) is an error, not "done, all rows skipped".
    tsv_as_jsonl = tmp_path / "tsv" / "rows.jsonl"
    tsv_as_jsonl.parent.mkdir()
    tsv_as_jsonl.write_text("id\tsentence\nx1\tGood.\nx2\tBad.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"rows.jsonl: all 3 rows are bad, e.g. .*rows.jsonl:1: not valid JSON.*"
                                         r"is it JSONL\? --input_format"):
        bp.predict_shards(predictor, str(tsv_as_jsonl), str(tmp_path / "tsv_out"), bp.Fields.parse("sentence"))
    assert not (tmp_path / "tsv_out" / "rows.jsonl.predictions.jsonl").exists()
    # Another model into the same output directory is refused, not mixed in.
    with pytest.raises(ValueError, match=r"holds predictions made with other settings \(model\.sha256: there"):
        bp.predict_shards(predictor, pattern, str(tmp_path / "ckpt"), bp.Fields.parse("sentence", "id"))
    with pytest.raises(ValueError, match="--predict_text_fields: the model reads single sentences"):
        runner.run(make_flags(tmp_path, task_name="sst-2", do_predict=True, model_dir=settings.model_dir,
                              predict_input_glob=pattern, predict_text_fields="sentence,id"))


def test_streamed_prediction_runs_in_the_strategy_and_equals_the_eval_split_path(fine_tuned, tmp_path):
    """--do_predict --predict_input_glob runs the model in strategy.run on batches of one static shape: over two
    replicas (batches of 4, 2 rows a replica: the last batch's 2 rows padded, the second replica all padding) and
    with --jit_compile (XLA), its
    predictions equal --do_predict over the same sentences as --eval_split; the step is traced once for shards
    whose last batches differ in length, and padded rows never reach the output."""
    settings, *_ = fine_tuned
    glue = os.path.join(REPO, "tests", "fixtures", "glue", "SST-2")
    sentences = [line.split("\t")[0] for line in open(os.path.join(glue, "dev.tsv"), encoding="utf-8")][1:]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "dev.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "sentence": t}) + "\n"
                                                       for i, t in enumerate(sentences)), encoding="utf-8")
    common = dict(task_name="sst-2", do_predict=True, model_dir=settings.model_dir)
    runner.run(make_flags(tmp_path, data_dir=glue, predict_dir=str(tmp_path / "split"), **common))
    with open(tmp_path / "split" / "sst-2.dev.logits.json") as f:
        expected = json.load(f)
    assert len(expected) == len(sentences) == 6
    for name, flags in (("mirrored", dict(strategy="mirrored", predict_batch_size=4)),
                        ("xla", dict(jit_compile=True, predict_batch_size=4))):
        runner.run(make_flags(tmp_path, predict_input_glob=str(tmp_path / "in" / "*.jsonl"), predict_id_field="id",
                              predict_dir=str(tmp_path / name), **common, **flags))
        rows = read_jsonl(tmp_path / name / "dev.jsonl.predictions.jsonl")
        assert [r["id"] for r in rows] == [f"d{i}" for i in range(6)], name
        assert [r["prediction"] for r in rows] == [e["prediction"] for e in expected], name
        np.testing.assert_allclose([r["probabilities"] for r in rows],
                                   tf.nn.softmax([e["logits"] for e in expected]).numpy(), atol=2e-6, err_msg=name)
    _, _, model, bundle = fine_tuned
    predictor = bp.KerasPredictor(model, bundle.family, {"labels": bundle.labels}, bundle.tokenizer,
                                  settings.max_seq_length, identity={}, batch_size=4, jit_compile=True)
    pattern = write_shards(tmp_path / "odd", shards=2, rows=5)  # batches of 4 and 1 rows, twice
    summary = bp.predict_shards(predictor, pattern, str(tmp_path / "odd_out"), bp.Fields.parse("sentence", "id"),
                                batch_size=predictor.batch_size)
    assert summary["rows"] == 10 and predictor._forward.experimental_get_tracing_count() == 1
    shapes = predictor._forward.get_concrete_function().structured_input_signature[0]
    assert [s.shape.as_list() for s in shapes] == [[4, settings.max_seq_length]] * 3  # static: XLA/TPU-legal
    assert len(read_jsonl(tmp_path / "odd_out" / "part-01.tsv.predictions.jsonl")) == 5


def test_raw_text_signature_of_the_versioned_export(fine_tuned, tmp_path):
    """``python -m xlnet_tf.cli.export``'s layout: ``serving_default`` takes the sentences (tokenized in the graph)."""
    settings, _, model, bundle = fine_tuned
    exporter.export_serving(model, str(tmp_path / "export"), bundle.serving_info(5), SPIECE)
    pattern = write_shards(tmp_path / "in", shards=1, rows=24)
    text = bp.SavedModelPredictor(str(tmp_path / "export"))
    ids = bp.SavedModelPredictor(str(tmp_path / "export"), signature="serve_ids")
    assert (text.version, text.signature, text.takes_text, ids.takes_text) == (5, "serving_default", True, False)
    assert ids.max_seq_length == settings.max_seq_length == 32  # the fine-tuning run's, from metadata.json
    fields = bp.Fields.parse("sentence", "id")
    bp.predict_shards(text, pattern, str(tmp_path / "text"), fields, batch_size=5)
    bp.predict_shards(ids, pattern, str(tmp_path / "ids"), fields, batch_size=7)
    a, b = read_jsonl(tmp_path / "text" / "part-00.tsv.predictions.jsonl"), read_jsonl(
        tmp_path / "ids" / "part-00.tsv.predictions.jsonl")
    assert len(a) == 24 and [r["id"] for r in a] == [r["id"] for r in b]
    np.testing.assert_allclose([r["probabilities"] for r in a], [r["probabilities"] for r in b], atol=2e-6)


def test_a_rerun_names_the_model_either_way_and_reads_no_output_as_input(fine_tuned, tmp_path):
    """The rerun of a job predicting next to its inputs (the glob matches its outputs) with the version directory
    instead of the base path: the same model, nothing to predict again, and its outputs read as no input. Raw
    text is cut inside the export's graph: its truncated rows are not counted (None), not reported as 0. A
    damaged summary and settings that changed are refused in one line with the entry point's own flags."""
    _, _, model, bundle = fine_tuned
    version = exporter.export_serving(model, str(tmp_path / "export"), bundle.serving_info(5), SPIECE)
    pattern = write_shards(tmp_path / "in", shards=1, rows=6)
    fields, out = bp.Fields.parse("sentence", "id"), str(tmp_path / "in")
    first = bp.predict_shards(bp.SavedModelPredictor(str(tmp_path / "export")), str(tmp_path / "in" / "*"), out,
                              fields, batch_size=4)
    again = bp.predict_shards(bp.SavedModelPredictor(version), str(tmp_path / "in" / "*"), out, fields,
                              batch_size=4)
    assert [s["input"] for s in again["shards"]] == [pattern.replace("*", "00")] and again["complete"]
    assert first["settings"] == again["settings"] and first["rows"] == again["rows"] == 6
    with absl_messages() as logged:  # tokenizer flags a raw-text signature does not read: said, not ignored
        bp.SavedModelPredictor(version, uncased=True, spiece_model_file=SPIECE)
    assert [m for m in logged if m.startswith(f"--uncased=True, --spiece_model_file={SPIECE} not used: signature "
                                              "serving_default tokenizes in the graph")], logged
    assert again["truncated"] is None and again["shards"][0]["truncated"] is None
    with pytest.raises(InputError, match=r"--predict_dir=.* holds predictions made with other settings .*use "
                                            r"another --predict_dir, or delete its predict_summary.json"):
        bp.predict_shards(bp.SavedModelPredictor(version, signature="serve_ids"), pattern, out, fields,
                          glob_flag="--predict_input_glob")
    with open(os.path.join(out, bp.SUMMARY_FILE), "w") as f:
        f.write("[1, 2]\n")
    with pytest.raises(InputError, match=r"predict_summary.json: damaged \(a JSON list, not an object\); "
                                            r"delete it"):
        bp.predict_shards(bp.SavedModelPredictor(version), pattern, out, fields)


def test_a_resumed_job_is_the_model_by_its_content_and_tokenizer(fine_tuned, tmp_path):
    """A resumed job goes on with the same export named by another path (a copy, a relative path), and is refused
    where the export at the same path and version is another model (trained again), where --uncased changes the
    token ids, or where an older summary names the model by its path only. A fixed-length signature refuses
    another --max_seq_length before any work. --overwrite deletes every earlier output, a Beam job's too: no glob
    over the directory reads two models' rows."""
    _, export, model, bundle = fine_tuned
    weight = model.weights[0]
    original = weight.numpy()
    try:
        weight.assign(original + 1)
        save_ids_export(model, str(tmp_path / "retrained" / "3"), bundle.labels, seq=32)
    finally:
        weight.assign(original)
    served = tmp_path / "serving"
    shutil.copytree(os.path.join(export, "3"), served / "3")
    pattern = write_shards(tmp_path / "in", shards=2, rows=3)
    fields, out = bp.Fields.parse("sentence", "id"), str(tmp_path / "out")
    first = bp.predict_shards(bp.SavedModelPredictor(str(served), max_seq_length=32), pattern.replace("*", "00"),
                              out, fields)
    assert first["model_source"] == {"saved_model": str(served / "3"), "version": 3}
    relative = os.path.relpath(export)  # from the working directory
    again = bp.predict_shards(bp.SavedModelPredictor(relative, max_seq_length=32), pattern, out, fields)
    assert again["complete"] and again["shards"][0] == first["shards"][0]
    with pytest.raises(InputError, match=r"other settings \(model\.uncased: there False, now True; the earlier "
                                            rf"model: saved_model={relative}/3 version=3\)"):
        bp.predict_shards(bp.SavedModelPredictor(relative, max_seq_length=32, uncased=True), pattern, out, fields)
    shutil.rmtree(served / "3")
    shutil.copytree(tmp_path / "retrained" / "3", served / "3")
    with pytest.raises(InputError, match=r"other settings \(model\.sha256: there '[0-9a-f]{64}', now "):
        bp.predict_shards(bp.SavedModelPredictor(str(served)), pattern, out, fields)
    with pytest.raises(InputError, match=rf"--max_seq_length=16: signature serving_default of {served}/3 takes "
                                            "exactly 32 tokens"):
        bp.SavedModelPredictor(str(served), max_seq_length=16)
    retrained = bp.SavedModelPredictor(str(served))
    assert retrained.max_seq_length == 32  # the signature's length, where the export records none
    with open(os.path.join(out, bp.SUMMARY_FILE)) as f:
        summary = json.load(f)
    summary["settings"]["model"] = dict(saved_model=f"{served}/3", version=3, signature="serving_default",
                                        max_seq_length=32, spiece_sha256=retrained.identity["spiece_sha256"])
    with open(os.path.join(out, bp.SUMMARY_FILE), "w") as f:
        json.dump(summary, f)  # as xlnet_tf wrote it before models were told by their content
    with pytest.raises(InputError, match=rf"holds predictions of a model recorded by its path only \({served}/3; "):
        bp.predict_shards(retrained, pattern, out, fields)
    for name in ("predictions-00000-of-00001.jsonl", "dead_letters-00000-of-00001.txt", "gone.tsv.predictions.jsonl"):
        (tmp_path / "out" / name).write_text("{}\n")
    replaced = bp.predict_shards(retrained, pattern, out, fields, overwrite=True)
    assert sorted(os.listdir(out)) == ["part-00.tsv.predictions.jsonl", "part-01.tsv.predictions.jsonl",
                                       bp.SUMMARY_FILE]
    assert replaced["complete"] and replaced["outputs_of_other_inputs"] == []
    (tmp_path / "out" / "predictions-00000-of-00002.jsonl").write_text("{}\n")  # a Beam job's, without its summary
    assert bp.predict_shards(retrained, pattern, out, fields)["outputs_of_other_inputs"] == [
        "predictions-00000-of-00002.jsonl"]


def _cli(args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen([sys.executable, "-m", "xlnet_tf.cli.predict", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


# `python -m xlnet_tf.cli.predict ARGS` that SIGKILLs itself part-way through its second shard: once the summary
# records the first shard, at the third batch of the next. (Killed from inside, at a fixed point: a kill from here
# would race the job's progress against this process's polling.)
_KILLED_IN_SECOND_SHARD = """
import os, runpy, signal, sys
from xlnet_tf.batch import prediction
write_json, format_rows, state = prediction.write_json_atomic, prediction._format_rows, {"shards": 0, "batches": 0}
def write_summary(path, summary, *args, **kwargs):
    state["shards"] = len(summary["shards"])
    return write_json(path, summary, *args, **kwargs)
def rows_or_death(*args, **kwargs):
    if state["shards"] == 1:
        state["batches"] += 1
        if state["batches"] == 3:
            os.kill(os.getpid(), signal.SIGKILL)
    return format_rows(*args, **kwargs)
prediction.write_json_atomic, prediction._format_rows = write_summary, rows_or_death
sys.argv[0] = "xlnet_tf.cli.predict"
runpy.run_module("xlnet_tf.cli.predict", run_name="__main__", alter_sys=True)
"""


@pytest.mark.multiprocess
@pytest.mark.slow
@background
def test_killed_job_reruns_to_identical_output(tmp_path):
    """3 shards x 2k rows: a job SIGKILLed while it writes its second shard and then rerun gives files
    byte-identical to an uninterrupted run's (started beside the killed one); the rerun skips the finished shard,
    does not rewrite it, and removes the killed shard's temporary file."""
    export = str(micro_classifier.value() / "export")
    pattern = write_shards(tmp_path / "in", shards=3, rows=2000)
    args = [f"--saved_model={export}", f"--input_glob={pattern}", "--max_seq_length=32", "--batch_size=64",
            "--id_field=id", "--progress_every_s=0.5"]
    out = tmp_path / "killed"
    first = out / "part-00.tsv.predictions.jsonl"
    killed = subprocess.Popen([sys.executable, "-c", _KILLED_IN_SECOND_SHARD, *args, f"--output_dir={out}"],
                              cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    whole = _cli(args + [f"--output_dir={tmp_path / 'whole'}"])
    try:
        out_whole = whole.communicate(timeout=300)[0]
        stderr = killed.communicate(timeout=300)[1]
    finally:
        killed.kill()
        whole.kill()
    assert whole.returncode == 0, out_whole[-3000:]
    assert killed.returncode == -signal.SIGKILL, stderr[-3000:]
    summary = json.loads((out / bp.SUMMARY_FILE).read_text())
    assert [shard["output"] for shard in summary["shards"]] == [str(first)] and not summary["complete"]
    assert [n for n in os.listdir(out) if n.startswith(".part-01.tsv.predictions.jsonl.tmp-")], os.listdir(out)
    inode = first.stat().st_ino
    rerun = _cli(args + [f"--output_dir={out}"])
    out_rerun = rerun.communicate(timeout=300)[0]
    assert rerun.returncode == 0, out_rerun
    assert "1 of 3 shards already done" in out_rerun, out_rerun
    assert first.stat().st_ino == inode  # the finished shard is not rewritten
    assert "shard 3/3 part-02.tsv done | 4000 rows this run" in out_rerun and "examples/s" in out_rerun
    for k in range(3):
        name = f"part-{k:02d}.tsv.predictions.jsonl"
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert len((out / "part-01.tsv.predictions.jsonl").read_text().splitlines()) == 2000
    assert sorted(os.listdir(out)) == sorted(os.listdir(tmp_path / "whole"))  # no temporary file left
    summary = json.loads((out / bp.SUMMARY_FILE).read_text())
    assert summary["complete"] and summary["rows"] == 6000 and summary["skipped"] == 0


@pytest.mark.slow
def test_squad_questions_from_the_raw_text_export(squad_run, tmp_path):
    """A SQuAD export's serving_default (question, context -> answer; run_squad.py's, conftest.py): a SQuAD file's
    questions are streamed with their ids, and each answer is the export's own for that question."""
    predictor = bp.SavedModelPredictor(os.path.dirname(squad_run["export"]))
    assert (predictor.family.name, predictor.pair, predictor.takes_text) == ("squad", True, True)
    squad_file = os.path.join(REPO, "tests", "fixtures", "squad", "dev-v2.0.json")
    summary = bp.predict_shards(predictor, squad_file, str(tmp_path / "out"), bp.Fields.parse("question,context"),
                                batch_size=4)
    assert summary["shards"][0]["format"] == "squad" and summary["skipped"] == 0
    rows = read_jsonl(tmp_path / "out" / "dev-v2.0.json.predictions.jsonl")
    with open(squad_file, encoding="utf-8") as f:
        questions = [(qa["id"], qa["question"], p["context"]) for a in json.load(f)["data"]
                     for p in a["paragraphs"] for qa in p["qas"]]
    assert [r["id"] for r in rows] == [q[0] for q in questions] and len(rows) == summary["rows"] > 4
    serving = tf.saved_model.load(predictor.path).signatures["serving_default"]
    direct = serving(question=tf.constant([q[1] for q in questions]), context=tf.constant([q[2] for q in questions]))
    assert [r["prediction"] for r in rows] == [t.decode("utf-8") for t in direct["text"].numpy()]
    np.testing.assert_allclose([r["null_odds"] for r in rows], direct["null_odds"].numpy(), atol=2e-6)
    for (_, _, context), r in zip(questions, rows):
        assert context[r["start_char"]:r["end_char"]] == r["prediction"] if r["prediction"] else r["start_char"] == -1
    # The same questions as JSONL, each context behind spaces and a newline: the offsets count them (the text
    # goes to the model as written)
    with open(tmp_path / "padded.jsonl", "w", encoding="utf-8") as f:
        f.write("".join(json.dumps({"id": i, "question": q, "context": "   \n  " + c}) + "\n" for i, q, c in questions))
    bp.predict_shards(predictor, str(tmp_path / "padded.jsonl"), str(tmp_path / "padded"),
                      bp.Fields.parse("question,context", "id"), batch_size=4)
    padded = read_jsonl(tmp_path / "padded" / "padded.jsonl.predictions.jsonl")
    assert [r["prediction"] for r in padded] == [r["prediction"] for r in rows]
    answered = [r["start_char"] + 6 for r in rows if r["prediction"]]
    assert [r["start_char"] for r in padded if r["prediction"]] == answered and answered
    with pytest.raises(ValueError, match="--text_fields: the model reads sentence pairs"):
        bp.predict_shards(predictor, squad_file, str(tmp_path / "x"), bp.Fields.parse("question"))
