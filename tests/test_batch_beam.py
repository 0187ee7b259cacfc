"""Batch prediction as a Beam pipeline (xlnet_tf.batch.beam, ``python -m xlnet_tf.cli.predict --runner=...``): its
rows equal cli.predict's row for row (as sets keyed by file and line; numbers to round-off) on the DirectRunner's
engine (FnApiRunner) in memory and with two worker processes, for a classifier, a regression, a long-document, a
tagging, a token-id and a SQuAD export; bad rows land in the dead letters with file:line; a bundle that fails once
is retried and the output is still exact; Beam's own options pass through the command line while a typo in ours is
an error."""

import glob
import json
import os
import subprocess
import sys

import pytest

from needs import require

require("apache_beam")

from apache_beam.internal.cloudpickle import cloudpickle as beam_cloudpickle  # noqa: E402
from background import background, resource  # noqa: E402
from classifier_helpers import REPO, SPIECE, build_model, make_flags, micro_config  # noqa: E402
from squad_helpers import squad_release  # noqa: E402,F401 (conftest's squad_run: made on the background thread)
from xlnet_tf.batch import beam as bb  # noqa: E402
from xlnet_tf.batch import prediction as bp  # noqa: E402
from xlnet_tf.batch.rows import earlier_outputs  # noqa: E402
from xlnet_tf.cli import predict as cli_predict  # noqa: E402
from xlnet_tf.errors import InputError  # noqa: E402
from xlnet_tf.finetuning import serving as exporter  # noqa: E402
from xlnet_tf.tasks.tagging import TaggingSettings  # noqa: E402

SENTENCES = [line.split("\t")[0] for line in open(os.path.join(REPO, "data", "sentiment", "train.tsv"),
                                                  encoding="utf-8").read().splitlines()[1:]]


# The fixture's export, written by a process (``sst2_release``): a micro SST-2 classifier (random weights) with its
# raw-text serving_default, as ``python -m xlnet_tf.cli.export`` writes it.
_EXPORT_SST2 = """
import os, sys
import keras
from classifier_helpers import SPIECE, build_model, make_flags
from xlnet_tf.finetuning import serving as exporter
tmp = sys.argv[1]
keras.utils.set_random_seed(0)  # the same weights at every run
model, task = build_model(make_flags(tmp, task_name="sst-2"))
exporter.export_serving(model, os.path.join(tmp, "export"), task.serving_info(1), SPIECE)
"""


def _started(args):
    """``python ARGS`` from the repository with this checkout's xlnet_tf and the tests' helpers; its finished
    process (output captured)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), REPO]))
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@resource
def sst2_release(tmp_path):
    """The micro SST-2 export and ``write_inputs`` predicted by ``python -m xlnet_tf.cli.predict`` (the rows the
    Beam runs must equal): made by processes on the background thread, for the tests in front (``sst2_export``,
    ``cli_run``) and ``test_command_line``'s body there. (export, inputs' glob, rows keyed by (file, line),
    summary)."""
    done = _started(["-c", _EXPORT_SST2, str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    export, inputs = str(tmp_path / "export"), write_inputs(tmp_path / "in")
    done = _started(["-m", "xlnet_tf.cli.predict", f"--saved_model={export}", f"--input_glob={inputs}",
                     f"--output_dir={tmp_path / 'cli'}", "--id_field=id", "--batch_size=4"])
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "cli" / bp.SUMMARY_FILE, encoding="utf-8") as f:
        summary = json.load(f)
    return export, inputs, read_rows(summary), summary


@pytest.fixture(scope="module")
def sst2_export():
    return sst2_release.value()[0]


@pytest.fixture(scope="module")
def cli_run():
    """``write_inputs`` predicted by cli.predict: (their glob, its rows keyed by (file, line), its summary)."""
    return sst2_release.value()[1:]


def write_inputs(directory) -> str:
    """Two shards of the bundled sentences, a TSV and a JSON Lines file, each with poison rows; their glob."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "a.tsv"), "w", encoding="utf-8") as f:
        f.write("id\tsentence\n" + "".join(f"a{i}\t{t}\n" for i, t in enumerate(SENTENCES[:13])))
        f.write("poison\tthree\tcolumns\n" + f"a13\t{SENTENCES[13]}\n")
    with open(os.path.join(directory, "b.jsonl"), "w", encoding="utf-8") as f:
        f.write("".join(json.dumps({"id": f"b{i}", "sentence": t}) + "\n" for i, t in enumerate(SENTENCES[14:25])))
        f.write('{"id": "b-bad", "sentence": null}\nnot json\n')
    return os.path.join(directory, "*")


def settings(export, inputs, out, **kw):
    values = dict(saved_model=export, input_glob=inputs, output_dir=str(out), id_field="id", batch_size=4)
    values.update(kw)
    return cli_predict.PredictSettings(**values).validate()


def read_rows(summary) -> dict:
    """The rows cli.predict wrote for the shards of its ``summary``, keyed by (input file, line)."""
    rows = {}
    for shard in summary["shards"]:
        with open(shard["output"], encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                rows[(shard["input"], row["line"])] = row
    return rows


def cli_rows(export, inputs, out) -> dict:
    """cli.predict's rows, keyed by (input file, line), and its summary."""
    s = settings(export, inputs, out)
    predictor = bb.ModelSpec(s.saved_model).load()  # cli.predict's (its defaults), loaded once for both engines
    summary = bp.predict_shards(predictor, s.input_glob, s.output_dir, bp.Fields.parse(s.text_fields, s.id_field),
                                s.batch_size, progress_every_s=1e9)
    return read_rows(summary), summary


def beam_rows(out) -> dict:
    rows = {}
    for path in glob.glob(os.path.join(out, "predictions-*-of-*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                key = (row.pop("file"), row["line"])
                assert key not in rows, f"{key} written twice"
                rows[key] = row
    return rows


# Rows hold numbers rounded to 6 decimals; a row's last bits depend on the batch it ran in (the matmuls' shapes
# choose their summation order), and Beam batches rows as its bundles fall, not as cli.predict does: a value on a
# rounding boundary then reads one unit of the 6th decimal apart (seen: 0.49817 against 0.498169).
ROUND_OFF = 2e-6


def same_row(got, expected) -> bool:
    """``got`` is ``expected`` with its numbers to ``ROUND_OFF``; a class label may differ only where the expected
    probabilities of its two top classes are within that of each other (a tie at round-off)."""
    if isinstance(expected, dict) and isinstance(got, dict) and "probabilities" in expected:
        top = sorted(expected["probabilities"])[-2:]
        if len(top) == 2 and top[1] - top[0] <= ROUND_OFF:
            got, expected = dict(got, prediction=None), dict(expected, prediction=None)
    if isinstance(expected, bool) or isinstance(got, bool):
        return got is expected
    if isinstance(expected, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and isinstance(expected, (int, float)) and abs(got - expected) <= ROUND_OFF
    if isinstance(expected, (list, tuple)):
        return type(got) is type(expected) and len(got) == len(expected) and all(map(same_row, got, expected))
    if isinstance(expected, dict):
        return isinstance(got, dict) and got.keys() == expected.keys() and all(
            same_row(got[k], expected[k]) for k in expected)
    return got == expected


def assert_same_rows(got: dict, expected: dict):
    """The same rows (keyed by file and line), equal but for round-off (``same_row``)."""
    assert sorted(got) == sorted(expected)
    differ = {key: (got[key], expected[key]) for key in expected if not same_row(got[key], expected[key])}
    assert not differ, differ


def dead_letters(out) -> list:
    return sorted(line.rstrip("\n") for path in glob.glob(os.path.join(out, "dead_letters-*-of-*.txt"))
                  for line in open(path, encoding="utf-8"))


def check_same(expected, summary, out, inputs):
    """The Beam run in ``out`` wrote cli.predict's rows, its bad rows as dead letters and its counts."""
    assert_same_rows(beam_rows(out), expected)
    directory = os.path.dirname(inputs)
    assert dead_letters(out) == [f"{directory}/a.tsv:15: 3 columns, header has 2",
                                 f"{directory}/b.jsonl:12: 'sentence' is null, not a string",
                                 f"{directory}/b.jsonl:13: not valid JSON (Expecting value)"]
    with open(os.path.join(out, bp.SUMMARY_FILE), encoding="utf-8") as f:
        written = json.load(f)
    assert written["settings"] == summary["settings"]
    for key in ("rows", "skipped", "truncated", "complete", "shards_total"):
        assert written[key] == summary[key], key
    assert [(s["input"], s["rows"], s["skipped"], s["skipped_rows"]) for s in written["shards"]] == [
        (s["input"], s["rows"], s["skipped"], s["skipped_rows"]) for s in summary["shards"]]


@pytest.mark.slow
def test_pipeline_rows_equal_cli_predict(sst2_export, cli_run, tmp_path):
    """The DirectRunner's engine (FnApiRunner: DirectRunner would try to download Prism first) in memory, in this
    process: every usable row once, equal to cli.predict's; the poison rows
    as dead letters with file:line; the summary's counts and settings are cli.predict's. A second run into the
    same directory is refused without --overwrite."""
    inputs, expected, summary = cli_run
    assert len(expected) == 25 and summary["skipped"] == 3
    s = settings(sst2_export, inputs, tmp_path / "beam", runner="FnApiRunner")
    bb.predict(s, ["--direct_running_mode=in_memory"])
    check_same(expected, summary, str(tmp_path / "beam"), inputs)
    with pytest.raises(ValueError, match=r"holds results \(dead_letters-00000-of-00001.txt, ...\): a Beam job"):
        bb.predict(s)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["serve_ids", "regression_pairs", "long_documents", "tagging"])
def test_other_exports_equal_cli_predict(kind, sst2_export, tmp_path):
    """The token-id signature (tokenized in the worker; truncation counted), a sentence-pair regression export,
    a long-document export (--long_document=memory: documents of several 16-token segments) and a tagging export
    (random weights, its tags from a one-sentence train file) on the pipeline in memory: their rows and counts
    are cli.predict's."""
    export, fields, overrides = sst2_export, "sentence", {}
    if kind == "serve_ids":
        overrides = dict(signature="serve_ids", max_seq_length=8)  # most sentences are cut to 8 tokens
    else:
        if kind == "tagging":
            (tmp_path / "train.jsonl").write_text(json.dumps(
                {"tokens": ["Peter", "has", "3", "cats"], "tags": ["B-NAME", "O", "B-NUM", "O"]}) + "\n")
            settings_ = TaggingSettings.from_values(dict(
                model_config_path=micro_config(tmp_path), spiece_model_file=SPIECE, data_dir=str(tmp_path),
                model_dir=str(tmp_path / "model"), max_seq_length=16, dropout=0.0, dropatt=0.0))
        else:
            settings_ = make_flags(tmp_path / "model", **(
                dict(task_name="sts-b") if kind == "regression_pairs" else
                dict(task_name="sst-2", long_document="memory", max_seq_length=16, max_segments=4, mem_len=24)))
        model, task = build_model(settings_)
        export = str(tmp_path / "export")
        exporter.export_serving(model, export, task.serving_info(1), SPIECE)
    (tmp_path / "in").mkdir()
    with open(tmp_path / "in" / "rows.tsv", "w", encoding="utf-8") as f:
        if kind == "regression_pairs":
            fields = "sentence,sentence2"
            f.write("id\tsentence\tsentence2\n" + "".join(f"p{i}\t{SENTENCES[i]}\t{SENTENCES[i + 1]}\n"
                                                           for i in range(12)))
        else:
            documents = [" ".join(SENTENCES[i:i + (5 if kind == "long_documents" else 1)]) for i in range(12)]
            f.write("id\tsentence\n" + "".join(f"d{i}\t{t}\n" for i, t in enumerate(documents)))
    inputs = str(tmp_path / "in" / "*.tsv")
    s = settings(export, inputs, tmp_path / "cli", text_fields=fields, **overrides)
    spec = bb.ModelSpec(export, s.signature, max_seq_length=s.max_seq_length)
    summary = bp.predict_shards(spec.load(), inputs, s.output_dir, bp.Fields.parse(fields, "id"), s.batch_size,
                                progress_every_s=1e9)
    with open(summary["shards"][0]["output"], encoding="utf-8") as f:
        expected = {(summary["shards"][0]["input"], row["line"]): row for row in map(json.loads, f)}
    s = settings(export, inputs, tmp_path / "beam", text_fields=fields, runner="FnApiRunner", **overrides)
    written = bb.predict(s)
    assert_same_rows(beam_rows(str(tmp_path / "beam")), expected)
    assert len(expected) == 12
    # token ids: counted where the text was cut; raw text: cut inside the export's graph, not counted (None)
    assert written["truncated"] == summary["truncated"]
    assert written["truncated"] > 0 if kind == "serve_ids" else written["truncated"] is None
    assert written["settings"] == summary["settings"]


class FailsOnce(bb.ExportHandler):
    """The first batch's inference fails once (a worker lost mid-bundle): the marker file says it happened."""

    def __init__(self, marker, *args, **kw):
        super().__init__(*args, **kw)
        self.marker = marker

    def run_inference(self, batch, model, inference_args=None):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise ConnectionError("injected: the first bundle's first batch fails once")
        return super().run_inference(batch, model, inference_args)


@pytest.mark.slow
def test_failed_bundle_is_retried_and_output_is_exact(sst2_export, cli_run, tmp_path):
    """The runner that retries failed bundles here (BundleBasedDirectRunner; the FnApi DirectRunner does not
    retry): the injected failure happens, the bundle runs again, and each row is written once, equal to
    cli.predict's."""
    inputs, expected, summary = cli_run
    s = settings(sst2_export, inputs, tmp_path / "beam", runner="BundleBasedDirectRunner")
    marker = str(tmp_path / "failed-once")
    handler = FailsOnce(marker, bb.ModelSpec(sst2_export), pair=False, batch_size=s.batch_size)
    bb.predict(s, [], handler=handler)
    assert os.path.exists(marker)
    check_same(expected, summary, str(tmp_path / "beam"), inputs)


class RecordsLoads(bb.ExportHandler):
    """Writes a file named by the process id of each model load into ``directory``."""

    def __init__(self, directory, *args, **kw):
        super().__init__(*args, **kw)
        self.directory = directory

    def load_model(self):
        open(os.path.join(self.directory, str(os.getpid())), "w").close()
        return super().load_model()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_worker_processes(sst2_export, cli_run, tmp_path):
    """The DirectRunner's engine with two worker processes (multi_processing): the model is loaded there, not
    here, and the rows equal cli.predict's."""
    inputs, expected, summary = cli_run
    s = settings(sst2_export, inputs, tmp_path / "beam", runner="FnApiRunner")
    (tmp_path / "loads").mkdir()
    handler = RecordsLoads(str(tmp_path / "loads"), bb.ModelSpec(sst2_export), pair=False, batch_size=s.batch_size)
    # RecordsLoads travels by value: the workers cannot import this file (a PYTHONPATH naming the tests' folder would
    # change this process's environment, which the background tests' processes inherit).
    beam_cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        bb.predict(s, ["--direct_running_mode=multi_processing", "--direct_num_workers=2"], handler=handler)
    finally:
        beam_cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    loads = os.listdir(tmp_path / "loads")
    assert loads and str(os.getpid()) not in loads
    check_same(expected, summary, str(tmp_path / "beam"), inputs)


@pytest.mark.slow
@pytest.mark.multiprocess
@background
def test_command_line(tmp_path):
    """``python -m xlnet_tf.cli.predict --runner=DirectRunner`` with one of Beam's options (its value after a
    space): the rows equal cli.predict's, on the FnApiRunner without trying to download Prism; a typo in one of our
    flags is an error naming it, before TensorFlow."""
    sst2_export, inputs, expected, summary = sst2_release.value()
    out = tmp_path / "beam"
    args = [sys.executable, "-m", "xlnet_tf.cli.predict", "--runner=DirectRunner", f"--saved_model={sst2_export}",
            f"--input_glob={inputs}", f"--output_dir={out}", "--id_field=id", "--direct_running_mode", "in_memory"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(args + ["--batch_size=4"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # (Beam's DirectRunner logs "Running pipeline with PrismRunner." before it downloads Prism)
    assert "predict on FnApiRunner" in done.stderr and "with PrismRunner" not in done.stderr, done.stderr[-3000:]
    check_same(expected, summary, str(out), inputs)
    typo = subprocess.run(args + ["--batch_sise=4"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert typo.returncode == 1 and ("--batch_sise: not a flag of this tool nor a Beam pipeline option (did you mean "
                                     "--batch_size?)") in typo.stderr, typo.stderr[-3000:]


def test_beam_options_pass_through_and_typos_in_ours_are_errors(tmp_path):
    """With --runner, options that are not this tool's go to Beam, with their values; one Beam does not know
    either is an error naming it (and the flag meant). Without --runner nothing is taken out of the arguments."""
    argv = ["predict", "--runner=DataflowRunner", "--saved_model=m", "--project", "p", "--region=r",
            "--save_main_session", "--nooverwrite", "--batch_size", "8"]
    ours, beam_args = cli_predict.split_beam_args(argv)
    assert ours == ["predict", "--runner=DataflowRunner", "--saved_model=m", "--nooverwrite", "--batch_size", "8"]
    assert beam_args == ["--project", "p", "--region=r", "--save_main_session"]
    cli_predict.check_pipeline_args(beam_args + ["--flink_master=localhost:8081", "--direct_num_workers=2"])
    with pytest.raises(ValueError, match=r"--batch_sise: not a flag of this tool nor a Beam pipeline option "
                                         r"\(did you mean --batch_size\?\)"):
        cli_predict.check_pipeline_args(["--batch_sise=3"])
    assert cli_predict.split_beam_args(["predict", "--batch_sise=3"]) == (["predict", "--batch_sise=3"], [])
    config = tmp_path / "beam.yaml"  # the runner from --config_file: Beam's options still go to Beam
    config.write_text("runner: DirectRunner\nbatch_size: 4\n")
    assert cli_predict.split_beam_args(["predict", "--config_file", str(config), "--direct_num_workers=2"]) == (
        ["predict", "--config_file", str(config)], ["--direct_num_workers=2"])
    config.write_text("batch_size: 4\n")
    assert cli_predict.split_beam_args(["predict", f"--config_file={config}", "--project=p"])[1] == []
    with pytest.raises(ValueError, match="--share_model shares a model .*: it needs --runner"):
        cli_predict.PredictSettings(share_model=True).validate()


def test_runner_without_beam_installed_is_one_line_saying_how_to_install_it(monkeypatch):
    for name in [m for m in sys.modules if m == "apache_beam" or m.startswith("apache_beam.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # what an environment without the [beam] extra imports
    with pytest.raises(ValueError, match=r"--runner runs the prediction on Apache Beam, which is not importable "
                                         r"\(.*\): pip install 'xlnet_tf\[beam\]'"):
        cli_predict.check_pipeline_args(["--project=p"])


def test_runner_options_and_output_dir_are_checked_before_the_job(tmp_path):
    """What Beam would raise from Pipeline() or run(), after the model loaded and --overwrite deleted the earlier
    results, as tracebacks: one line each, before anything is loaded or touched."""
    from apache_beam.io.filesystems import FileSystems

    out = str(tmp_path / "out")
    with pytest.raises(ValueError, match=r"apache-beam\[gcp\]|Beam's pipeline options: .*project"):
        bb.check_runner("DataflowRunner", ["--project=p", "--temp_location=gs://b/tmp"], out)
    try:
        FileSystems.get_filesystem("gs://b/out")
    except ValueError:  # this environment has no [gcp] extra: Beam's sinks cannot write gs://
        with pytest.raises(ValueError, match=r"--output_dir=gs://b/out: Beam has no file system for it here"):
            bb.check_runner("DirectRunner", [], "gs://b/out")
    with pytest.raises(ValueError, match=r"--job_endpoint=localhost:1: no Beam job server answered within 1 s"):
        bb.check_runner("PortableRunner", ["--job_endpoint=localhost:1", "--job_server_timeout=1"], out)
    # Flink/Spark without --job_endpoint: Beam's job server (java -jar of a jar from Maven), checked without fetching
    with pytest.raises(ValueError, match=r"--runner=FlinkRunner without --job_endpoint starts .*'/no/java', which is "
                                         r"not on PATH"):
        bb.check_runner("FlinkRunner", ["--flink_master=localhost:1", "--job_server_java_launcher=/no/java"], out)
    with pytest.raises(ValueError, match=r"--runner=SparkRunner: Beam's job server jar cannot be fetched .*"
                                         r"--spark_job_server_jar=<a local copy>"):
        bb.check_runner("SparkRunner", ["--job_server_java_launcher=sh", "--spark_job_server_jar=/no/such.jar"], out)
    with pytest.raises(ValueError, match=r"--runner=PrismRunner: Beam's Prism binary cannot be fetched .*"
                                         r"--prism_location=<a local copy>"):
        bb.check_runner("PrismRunner", ["--prism_location=/no/such/prism"], out)
    assert bb.check_runner("DirectRunner", ["--direct_num_workers=2"], out)[0] == "FnApiRunner"
    assert not os.path.exists(out)


def test_overwrite_replaces_cli_predict_results_too(sst2_export, tmp_path):
    """Earlier results a Beam job refuses, and --overwrite removes, include cli.predict's per-input files: left
    beside the job's own, a glob over the directory would read both predictions. An input glob matching the output
    directory reads none of them as inputs (they were deleted before being read), and one matching only them is
    refused before anything is deleted."""
    names = ["a.tsv.predictions.jsonl", "dead_letters-00000-of-00001.txt", "predict_summary.json",
             "predictions-00000-of-00002.jsonl"]
    others = ["a.jsonl", "notes.txt", "predictions-2024.csv"]
    for name in names + others:
        (tmp_path / name).write_text('{"sentence": "Good."}\n')
    assert [os.path.basename(p) for p in earlier_outputs(str(tmp_path))] == names
    with pytest.raises(InputError, match=r"--input_glob=.*/predictions-\*.jsonl matches only what batch prediction "
                                         r"wrote in --output_dir="):
        bb.plan_of(settings(sst2_export, str(tmp_path / "predictions-*.jsonl"), tmp_path, id_field=None,
                            overwrite=True))
    assert sorted(os.listdir(tmp_path)) == sorted(names + others)
    plan = bb.plan_of(settings(sst2_export, str(tmp_path / "*.jsonl"), tmp_path, id_field=None, overwrite=True))
    assert plan.shards == [str(tmp_path / "a.jsonl")] and sorted(os.listdir(tmp_path)) == others


@pytest.mark.slow
def test_a_file_of_bad_rows_fails_the_job_and_cli_predict_keeps_off_its_results(sst2_export, tmp_path):
    """An input whose every row is bad is the wrong file or format: an error naming it (as cli.predict's), not
    a success, once the job wrote its outputs; cli.predict into that directory is refused, not mixed in."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "bad.tsv").write_text("sentence\tlabel\n\t0\nthree\tcolumns\there\n")
    (inputs / "good.tsv").write_text("sentence\n" + "".join(t + "\n" for t in SENTENCES[:3]))
    s = settings(sst2_export, str(inputs / "*.tsv"), tmp_path / "beam", id_field=None, runner="FnApiRunner")
    with pytest.raises(ValueError, match=r"bad.tsv: all 2 rows are bad, e.g. .*bad.tsv:2: empty text"):
        bb.predict(s)
    assert len(beam_rows(s.output_dir)) == 3 and len(dead_letters(s.output_dir)) == 2
    with pytest.raises(ValueError, match=r"holds the results of a Beam job \(--runner=FnApiRunner\)"):
        bp.predict_shards(bb.ModelSpec(sst2_export).load(), str(inputs / "good.tsv"), s.output_dir,
                          bp.Fields.parse("sentence"), 4, progress_every_s=1e9)


@pytest.mark.slow
def test_squad_questions_equal_cli_predict(squad_run, tmp_path):
    """A SQuAD export's raw-text serving_default (conftest's run, shared with the export tests) on the bundled
    SQuAD file: the same answers as cli.predict's, keyed by the questions' ids."""
    squad_file = os.path.join(REPO, "tests", "fixtures", "squad", "dev-v2.0.json")
    export = os.path.dirname(squad_run["export"])
    s = settings(export, squad_file, tmp_path / "cli", text_fields="question,context", id_field=None, batch_size=16)
    predictor = bb.ModelSpec(export).load()
    summary = bp.predict_shards(predictor, squad_file, s.output_dir, bp.Fields.parse(s.text_fields), s.batch_size,
                                progress_every_s=1e9)
    with open(summary["shards"][0]["output"], encoding="utf-8") as f:
        expected = {(squad_file, row["line"]): row for row in map(json.loads, f)}
    s = settings(export, squad_file, tmp_path / "beam", text_fields="question,context", id_field=None,
                 batch_size=16, runner="FnApiRunner")
    written = bb.predict(s)
    assert_same_rows(beam_rows(str(tmp_path / "beam")), expected)
    assert len(expected) == summary["rows"] > 4
    assert written["shards"][0]["format"] == "squad" and written["skipped"] == 0
