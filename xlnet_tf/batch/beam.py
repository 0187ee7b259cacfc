"""Batch prediction as an Apache Beam pipeline: ``python -m xlnet_tf.cli.predict --runner=...`` (docs/batch.md).

    python -m xlnet_tf.cli.predict --runner=DataflowRunner --saved_model=gs://b/serving/sst2 \\
        --input_glob='gs://b/big/part-*.tsv' --output_dir=gs://b/out/sst2 --project=P --region=R ...

The inputs, the rows and the model are ``cli.predict``'s (``xlnet_tf.batch.inputs``, ``rows``, ``predictors``): the
same files and formats, the same bad-row reasons, the same output row with the input's ``file`` in front. What
differs is what a cluster needs:

* **Outputs** (Beam's file sinks: each bundle writes temporary files that are renamed once the job commits them,
  so a retried bundle leaves no duplicate): ``<output_dir>/predictions-SSSSS-of-NNNNN.jsonl``, one line per usable
  row (``{"file": ..., "line": 7, "id": ..., "prediction": ...}``) in no particular order;
  ``dead_letters-SSSSS-of-NNNNN.txt``, one ``file:line: reason`` per bad row; and ``predict_summary.json``
  (``cli.predict``'s keys where they mean the same: settings, per-input counts, skipped rows listed with
  file:line), computed from the rows themselves, so retries do not count twice.
* **Bad rows** never fail a bundle; they are counted with Beam metrics (namespace ``xlnet_tf.batch.beam``:
  ``rows_read``, ``skipped``, ``rows`` predicted, ``truncated``). An error in a file as a whole (a TSV header
  without the named columns, a gzip file) is found before the job starts, as by ``cli.predict``.
* **The model** is loaded once per worker process by ``ExportHandler`` (a RunInference ``ModelHandler``: the
  tensorflow-text ops registered, batches of ``--batch_size`` from ``BatchElements``), or once per machine with
  ``--share_model`` (one copy that the machine's SDK processes call: see ``ExportHandler``).
* **No resuming**: a job runs every input again; a rerun into an output directory that holds results is refused
  unless ``--overwrite`` (which deletes them first). The runner retries failed bundles instead.
* **Parallelism** is per input file (a file's lines are numbered as they are read, by one worker): give at least
  as many files as worker processes.
"""

from __future__ import annotations

import dataclasses
import heapq
import importlib
import json
import os
import shutil
import threading
from typing import Optional, Sequence

import apache_beam as beam
import tensorflow as tf
from absl import logging
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions

from xlnet_tf import tasks
from xlnet_tf.batch import SUMMARY_FILE, input_format_error
from xlnet_tf.batch.inputs import DEFAULT_MAX_LINE_BYTES, Fields, check_header, read_rows, shard_format
from xlnet_tf.batch.predictors import SavedModelPredictor
from xlnet_tf.batch.rows import (DEAD_LETTERS, PREDICTIONS, earlier_outputs, input_shards, model_inputs, output_lines,
                                 settings_of, stack_inputs, totals, with_id)
from xlnet_tf.errors import InputError
from xlnet_tf.tasks.base import Row

NAMESPACE = __name__  # of the Beam metrics: xlnet_tf.batch.beam
SHARD_TEMPLATE = "-SSSSS-of-NNNNN"
MAX_LISTED_SKIPS = 100  # as cli.predict: per input file, the first by line number (all are counted)


# --- the model -----------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How to load the export (``cli.predict``'s flags): picklable, so each worker loads the model itself."""
    saved_model: str
    signature: str = "auto"
    spiece_model_file: Optional[str] = None
    max_seq_length: Optional[int] = None
    uncased: Optional[bool] = None
    task_module: Optional[str] = None

    def load(self) -> SavedModelPredictor:
        """The predictor, loaded once per process: the launcher's (loaded for its checks) is the one that the
        workers of a runner in the same process use (FnApiRunner in memory), and RunInference's DoFn instances
        of a process share one. A loaded export is stateless to call, from any thread."""
        with _LOADING:
            if self not in _LOADED:
                tasks.load_module(self.task_module)  # a family of the user's own, on every worker
                _LOADED[self] = SavedModelPredictor(self.saved_model, self.signature, self.spiece_model_file,
                                                    self.max_seq_length, self.uncased)
            return _LOADED[self]


_LOADED: dict = {}  # ModelSpec -> SavedModelPredictor, of this process
_LOADING = threading.Lock()


class LoadedExport:
    """A loaded export as RunInference's model: one call (``predict``) per batch with plain Python values in and
    out, so that with ``--share_model`` (the model in one process of the machine, the others calling it through a
    proxy) a batch crosses processes as its strings and its JSON lines, not as tensors."""

    def __init__(self, predictor: SavedModelPredictor, pair: bool):
        self.predictor, self.pair = predictor, pair

    def predict(self, items: Sequence[tuple]) -> list:
        """``(json_line, truncated)`` of each ``(file, line, id, text_a, text_b)`` item."""
        inputs = [model_inputs(self.predictor, Row(line, 0, a, b), self.pair) for _, line, _, a, b in items]
        outputs = self.predictor(stack_inputs([x for x, _ in inputs]))
        lines = output_lines(self.predictor, outputs, [i[1] for i in items], [i[2] for i in items],
                             files=[i[0] for i in items])
        return [(text, cut) for text, (_, cut) in zip(lines, inputs)]


class ExportHandler(ModelHandler):
    """Our raw-text (or token-id) SavedModel for Beam's RunInference: ``load_model`` once per worker process
    (Beam keeps it in the process across bundles; tensorflow-text registered by ``SavedModelPredictor``), batches
    of ``batch_size`` (``BatchElements``; a bundle's last may be shorter), results ``PredictionResult(item,
    (json_line, truncated))``.

    ``share``: one copy per machine (Beam's ``share_model_across_processes``), which pays where a machine runs
    several SDK processes (Dataflow: one per vCPU) and memory, not compute, is what runs out: TensorFlow already
    spreads one model call over the machine's cores, so N copies cost N times the memory for little more
    throughput. Off by default: a process that holds its own model skips a hop (bench/bench_beam.py measures
    both)."""

    def __init__(self, spec: ModelSpec, pair: bool, batch_size: int, share: bool = False):
        super().__init__(min_batch_size=batch_size, max_batch_size=batch_size)
        self.spec, self.pair, self.share = spec, pair, share

    def load_model(self) -> LoadedExport:
        return LoadedExport(self.spec.load(), self.pair)

    def run_inference(self, batch, model, inference_args=None):
        return [PredictionResult(item, result) for item, result in zip(batch, model.predict(list(batch)))]

    def share_model_across_processes(self) -> bool:
        return self.share

    def get_num_bytes(self, batch) -> int:
        return sum(len(a) + len(b) for *_, a, b in batch)

    def get_metrics_namespace(self) -> str:
        return NAMESPACE


# --- the pipeline --------------------------------------------------------------------------------------------------

class ReadShard(beam.DoFn):
    """``(path, format)`` -> its usable rows ``(file, line, id or None, text_a, text_b)``, and its bad ones
    ``(file, line, reason)`` to the ``bad`` output (never an exception: a dead letter)."""

    def __init__(self, fields: Fields, task_module: Optional[str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        self.fields, self.task_module, self.max_line_bytes = fields, task_module, max_line_bytes
        self.rows, self.skipped = Metrics.counter(NAMESPACE, "rows_read"), Metrics.counter(NAMESPACE, "skipped")

    def setup(self):
        tasks.load_module(self.task_module)  # its input formats (read_rows asks the registry)

    def process(self, shard):
        path, fmt = shard
        ids = with_id(self.fields, fmt)
        for row in read_rows(path, fmt, self.fields, self.max_line_bytes):
            if row.problem:
                self.skipped.inc()
                yield beam.pvalue.TaggedOutput("bad", (path, row.line, row.problem))
            else:
                self.rows.inc()
                yield path, row.line, (row.id if ids else None), row.text_a, row.text_b


def _add(count: Optional[int], more: Optional[int]) -> Optional[int]:
    """Truncated rows so far plus ``more``; None (not counted: raw text) stays None."""
    return None if count is None or more is None else count + more


class SummaryFn(beam.CombineFn):
    """Per input file: rows predicted, skipped, truncated, and the first ``MAX_LISTED_SKIPS`` skipped rows by line;
    from ``("row", file, truncated)`` and ``("bad", file, line, reason)`` events. Counted from the data (not the
    metrics, which count a retried bundle's attempts where a runner reports attempted values)."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, event):
        entry = acc.setdefault(event[1], [0, 0, 0, []])
        if event[0] == "row":
            entry[0] += 1
            entry[2] = _add(entry[2], event[2])
        else:
            entry[1] += 1
            entry[3] = heapq.nsmallest(MAX_LISTED_SKIPS, entry[3] + [(event[2], event[3])])
        return acc

    def merge_accumulators(self, accumulators):
        merged = {}
        for acc in accumulators:
            for path, (rows, skipped, truncated, listed) in acc.items():
                entry = merged.setdefault(path, [0, 0, 0, []])
                entry[0] += rows
                entry[1] += skipped
                entry[2] = _add(entry[2], truncated)
                entry[3] = heapq.nsmallest(MAX_LISTED_SKIPS, entry[3] + listed)
        return merged

    def extract_output(self, acc):
        return acc


def _summary(counts: dict, plan: "Plan") -> str:
    """``predict_summary.json``'s text (as ``cli.predict`` writes it: indented, one trailing newline)."""
    shards = []
    for path in plan.shards:
        rows, skipped, truncated, listed = counts.get(path, [0, 0, 0, []])
        shards.append(dict(input=path, format=plan.formats[path], rows=rows, skipped=skipped, truncated=truncated,
                           skipped_rows=[f"{path}:{line}: {reason}" for line, reason in sorted(listed)],
                           all_rows_bad=bool(skipped and not rows)))
    summary = dict(model_source=plan.source, settings=plan.settings, input_glob=plan.input_glob, shards=shards,
                   outputs_of_other_inputs=[], complete=True, shards_total=len(shards), **totals(shards),
                   runner=plan.runner, predictions=os.path.join(plan.output_dir, f"{PREDICTIONS}-*.jsonl"),
                   dead_letters=os.path.join(plan.output_dir, f"{DEAD_LETTERS}-*.txt"))
    return json.dumps(summary, indent=2, ensure_ascii=False)


@dataclasses.dataclass
class Plan:
    """What the launcher checked and the pipeline needs: the input files and their formats, the fields, the
    output directory, the settings and the model's source recorded in the summary, and the model handler."""
    shards: list
    formats: dict
    fields: Fields
    input_glob: str
    output_dir: str
    settings: dict
    handler: ModelHandler
    task_module: Optional[str] = None
    runner: str = "DirectRunner"
    source: dict = dataclasses.field(default_factory=dict)
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES


def build(pipeline: beam.Pipeline, plan: Plan) -> None:
    """The pipeline of ``plan`` on ``pipeline``: read, predict, write (module docstring)."""
    read = (pipeline
            | "Inputs" >> beam.Create([(p, plan.formats[p]) for p in plan.shards])
            | "SpreadInputs" >> beam.Reshuffle()  # input files (few elements) over the workers
            | "ReadRows" >> beam.ParDo(ReadShard(plan.fields, plan.task_module, plan.max_line_bytes))
            .with_outputs("bad", main="rows"))
    predicted = read.rows | "Predict" >> RunInference(plan.handler)
    lines = predicted | "Lines" >> beam.Map(_line)
    _ = lines | "WritePredictions" >> beam.io.WriteToText(
        os.path.join(plan.output_dir, PREDICTIONS), file_name_suffix=".jsonl", shard_name_template=SHARD_TEMPLATE)
    _ = (read.bad | "DeadLetterLines" >> beam.Map(lambda bad: f"{bad[0]}:{bad[1]}: {bad[2]}")
         | "WriteDeadLetters" >> beam.io.WriteToText(os.path.join(plan.output_dir, DEAD_LETTERS),
                                                     file_name_suffix=".txt", shard_name_template=SHARD_TEMPLATE))
    events = ((predicted | "RowEvents" >> beam.Map(_row_event),
               read.bad | "BadEvents" >> beam.Map(lambda bad: ("bad", *bad)))
              | "Events" >> beam.Flatten())
    _ = (events | "Count" >> beam.CombineGlobally(SummaryFn())
         | "Summary" >> beam.Map(_summary, plan)
         | "WriteSummary" >> beam.io.WriteToText(os.path.join(plan.output_dir, SUMMARY_FILE),
                                                 shard_name_template="", num_shards=1))


_truncated = Metrics.counter(NAMESPACE, "truncated")
_predicted = Metrics.counter(NAMESPACE, "rows")


def _line(result: PredictionResult) -> str:
    _predicted.inc()
    if result.inference[1] is not None:  # counted (token ids; a raw-text export cuts unseen)
        _truncated.inc(result.inference[1])
    return result.inference[0]


def _row_event(result: PredictionResult) -> tuple:
    return ("row", result.example[0], result.inference[1])


def plan_of(s, handler: Optional[ModelHandler] = None) -> Plan:
    """Checks ``s`` (``cli.predict``'s settings) as ``cli.predict`` does before it predicts (the model loads here
    once, for its family, signature and whether it reads pairs; every input's header is read) and prepares the
    output directory: a Plan. ``handler``: another model handler (tests)."""
    if problem := input_format_error(s.input_format):
        raise InputError(problem)
    fields = Fields.parse(s.text_fields, s.id_field)
    spec = ModelSpec(s.saved_model, s.signature, s.spiece_model_file, s.max_seq_length, s.uncased, s.task_module)
    predictor = spec.load()
    if predictor.pair is not None and predictor.pair != bool(fields.text_b):
        wanted = "sentence pairs: name two fields (a,b)" if predictor.pair else "single sentences: name one field"
        raise InputError(f"--text_fields: the model reads {wanted}")
    shards = input_shards(s.input_glob, s.output_dir)  # not its own results, which --overwrite deletes
    formats = {path: shard_format(path, s.input_format, predictor.family) for path in shards}
    for path in shards:
        check_header(path, formats[path], fields, s.max_line_bytes)
    settings = settings_of(predictor, fields)
    there = earlier_outputs(s.output_dir)
    if there and not s.overwrite:
        raise InputError(f"--output_dir={s.output_dir} holds results ({os.path.basename(there[0])}, ...): a Beam job "
                         "predicts every input again; use another --output_dir, or --overwrite to replace them")
    for path in there:
        tf.io.gfile.remove(path)
    tf.io.gfile.makedirs(s.output_dir)
    handler = handler or ExportHandler(spec, bool(fields.text_b), s.batch_size, s.share_model)
    return Plan(shards, formats, fields, s.input_glob, s.output_dir, settings, handler, s.task_module, s.runner,
                predictor.source, s.max_line_bytes)


def local_runner(runner: str) -> str:
    """The runner that runs ``runner``'s pipeline: Beam's DirectRunner (2.77) first tries Prism, downloading its
    binary from GitHub, and falls back to the FnApiRunner for a batch pipeline like this one; nothing downloads
    implicitly here, so ``DirectRunner`` is the FnApiRunner at once (``--direct_running_mode``,
    ``--direct_num_workers`` as for DirectRunner). Prism is ``--runner=PrismRunner``, asked for by name."""
    if runner == "DirectRunner":
        logging.info("--runner=DirectRunner: on Beam's FnApiRunner, the engine DirectRunner runs this pipeline on "
                     "(without first downloading Prism; --runner=PrismRunner for Prism)")
        return "FnApiRunner"
    return runner


def check_runner(runner: str, pipeline_args: Sequence[str], output_dir: str) -> tuple:
    """``(the runner's name, the pipeline options)`` once the runner can run here and Beam accepts the options
    (its validation, e.g. Dataflow's project and temp_location) and can write ``output_dir``: checked before the
    model loads and the output directory is touched, each problem an ``InputError`` (Beam raises them from inside
    ``Pipeline()`` or ``run()``, after the work of preparing the job, as tracebacks)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.runner import create_runner

    name = local_runner(runner)
    options = PipelineOptions(list(pipeline_args), runner=name)
    if name == "DataflowRunner":
        try:  # what DataflowRunner.run_pipeline imports, without which it raises after the job is built
            importlib.import_module("apache_beam.runners.dataflow.internal.apiclient")
        except ImportError as e:
            raise InputError(f"--runner=DataflowRunner needs Beam's Google Cloud extra, which is not importable ({e}): "
                             "pip install 'apache-beam[gcp]'") from None
    try:
        FileSystems.get_filesystem(output_dir)  # Beam's file sinks write the outputs, through Beam's file systems
    except ValueError:
        raise InputError(f"--output_dir={output_dir}: Beam has no file system for it here (gs:// needs Beam's Google "
                         "Cloud extra: pip install 'apache-beam[gcp]')") from None
    errors = PipelineOptionsValidator(options, create_runner(name)).validate()
    if errors:
        raise InputError("Beam's pipeline options: " + "; ".join(" ".join(e.split()) for e in errors))
    portable = options.view_as(PortableOptions)
    if name in PORTABLE_RUNNERS and portable.job_endpoint and portable.job_endpoint != "embed":
        _check_job_server(portable.job_endpoint, portable.job_server_timeout)
    elif name in ("FlinkRunner", "SparkRunner") and not portable.job_endpoint:
        _fetch_job_server_jar(name, options)
    elif name == "PrismRunner" and not portable.job_endpoint:
        _fetch_prism(options)
    return name, options


PORTABLE_RUNNERS = ("PortableRunner", "FlinkRunner", "SparkRunner")  # those that submit to a --job_endpoint


def _fetch_prism(options: PipelineOptions) -> None:
    """PrismRunner without ``--job_endpoint``: Beam runs its Prism binary, fetched from GitHub on first use (then
    cached): made sure of here, where a failed download is one line, not a traceback from ``run()``."""
    from apache_beam.runners.portability.prism_runner import PrismJobServer

    try:
        PrismJobServer(options)._get_executable_path()  # pylint: disable=protected-access (what run() calls)
    except (OSError, RuntimeError, ValueError) as e:  # what Beam raises for a binary it cannot fetch
        raise InputError(f"--runner=PrismRunner: Beam's Prism binary cannot be fetched ("
                         f"{' '.join(str(e).split())[:300]}): give --prism_location=<a local copy>, or --job_endpoint "
                         "of a running Prism") from None


def _fetch_job_server_jar(name: str, options: PipelineOptions) -> None:
    """Flink or Spark without ``--job_endpoint``: Beam starts its job server itself, ``java -jar`` of a jar it
    fetches from Maven on first use (then cached): both made sure of here, where a missing ``java`` or a failed
    download is one line, not a traceback from ``run()`` after the model loaded. (The uber-jar modes fetch theirs
    when they submit.)"""
    from apache_beam.options.pipeline_options import FlinkRunnerOptions, JobServerOptions, SparkRunnerOptions
    from apache_beam.runners.portability import flink_runner, job_server, spark_runner

    flink = name == "FlinkRunner"
    if (options.view_as(FlinkRunnerOptions).flink_submit_uber_jar if flink
            else options.view_as(SparkRunnerOptions).spark_submit_uber_jar):
        return
    server_options = options.view_as(JobServerOptions)
    java = server_options.job_server_java_launcher
    if not shutil.which(java):
        raise InputError(f"--runner={name} without --job_endpoint starts Beam's job server with {java!r}, which is "
                         "not on PATH: install a Java runtime (or set --job_server_java_launcher), or give "
                         "--job_endpoint of a running job server")
    server = (flink_runner.FlinkJarJobServer if flink else spark_runner.SparkJarJobServer)(options)
    try:
        job_server.JavaJarJobServer.local_jar(server.path_to_jar(), server_options.jar_cache_dir)
    except (OSError, RuntimeError, ValueError) as e:  # what Beam raises for a jar it cannot fetch
        jar_flag = "--flink_job_server_jar" if flink else "--spark_job_server_jar"
        raise InputError(f"--runner={name}: Beam's job server jar cannot be fetched ({' '.join(str(e).split())[:300]}"
                         f"): give {jar_flag}=<a local copy>, or --job_endpoint of a running job server") from None


def _check_job_server(endpoint: str, timeout_s: int) -> None:
    """The job server at ``endpoint`` answers within ``timeout_s``: else Beam, after the model loaded and an
    ``--overwrite`` deleted the earlier results, waits as long and ends in grpc's FutureTimeoutError traceback."""
    import grpc

    logging.info("waiting up to %d s (--job_server_timeout) for the Beam job server at %s", timeout_s, endpoint)
    channel = grpc.insecure_channel(endpoint)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        raise InputError(f"--job_endpoint={endpoint}: no Beam job server answered within {timeout_s} s "
                         "(--job_server_timeout); is it running, at that address?") from None
    finally:
        channel.close()


def predict(s, pipeline_args: Sequence[str] = (), handler: Optional[ModelHandler] = None) -> dict:
    """Runs the pipeline of ``s`` (``cli.predict``'s settings; ``s.runner`` names the runner) with Beam's
    ``pipeline_args`` (checked by ``cli.predict``) and waits for it; returns the summary it wrote
    (``{"state": ...}`` if the job ended without one). An input file whose every row is bad is an ``InputError``
    naming it once the job is done (as ``cli.predict``: the wrong file or format; the outputs stay)."""
    runner, options = check_runner(s.runner, pipeline_args, s.output_dir)
    plan = plan_of(s, handler)
    logging.info("predict on %s: %d input file(s) into %s", runner, len(plan.shards), s.output_dir)
    pipeline = beam.Pipeline(options=options)
    build(pipeline, plan)
    result = pipeline.run()
    state = result.wait_until_finish()
    summary_path = os.path.join(s.output_dir, SUMMARY_FILE)
    if not tf.io.gfile.exists(summary_path):
        return {"state": str(state)}
    with tf.io.gfile.GFile(summary_path) as f:
        summary = json.load(f)
    logging.info("predict: %d input file(s), %d rows predicted, %d bad row(s) skipped%s; summary in %s",
                 len(summary["shards"]), summary["rows"], summary["skipped"],
                 f" (file:line: reason in {summary['dead_letters']})" if summary["skipped"] else "", summary_path)
    all_bad = [shard for shard in summary["shards"] if shard["all_rows_bad"]]
    if all_bad:  # not a file with a few bad rows: the wrong file or format, which must not end as a success
        first = all_bad[0]
        more = f"; and {len(all_bad) - 1} more input file(s) ({summary_path})" if len(all_bad) > 1 else ""
        raise InputError(f"{first['input']}: all {first['skipped']} rows are bad, e.g. "
                         f"{'; '.join(first['skipped_rows'][:3])} (is it {first['format'].upper()}? --input_format "
                         f"names the format){more}")
    return summary
