"""Batch prediction over large, sharded inputs: from a SavedModel (``python -m xlnet_tf.cli.predict``) or from a
fine-tuned checkpoint (``run_classifier.py --do_predict --predict_input_glob=...``), one engine for both.

    python -m xlnet_tf.cli.predict --saved_model=serving/sst2 --input_glob='big/part-*.tsv' --output_dir=out/sst2

* **Inputs**: every file matching ``--input_glob`` (comma-separated globs; local paths or ``gs://`` through
  ``tf.io.gfile``), TSV with a header row (no quoting, GLUE's layout) or JSON Lines (one object a line), the text
  in named fields (``--text_fields=sentence`` or ``sentence,sentence2`` for pairs) and optionally an id field.
  Files are read line by line into ``tf.data`` (``from_generator``, batched, prefetched): memory does not grow
  with the input's size.
* **Outputs**: one ``<output_dir>/<input file name>.predictions.jsonl`` per input shard, a line per usable row in
  input order (``{"line": 7, "id": ..., "prediction": "1", "probabilities": [0.1, 0.9]}``; regression:
  ``"prediction": 3.25``), written under a temporary name and renamed when the shard is complete; and
  ``predict_summary.json`` (settings, per-shard counts, skipped rows with file:line), rewritten after each shard.
  What a row's prediction holds is the task family's (``xlnet_tf.tasks``: ``batch.row``).
* **Resuming**: a rerun skips the shards whose output exists (unless their input file changed since); the one being
  written when a job was killed is predicted again from its start, so a rerun's files equal an uninterrupted run's. A rerun with another model or
  other settings than ``predict_summary.json`` records is an error (``--overwrite`` predicts every shard again).
* **Bad rows** (wrong column count, empty text, invalid JSON, not UTF-8) are skipped, counted and listed with
  file:line in the summary and the log; a missing field in a TSV header is an error naming the file.

SavedModels: ``--saved_model`` is a SavedModel directory or a base path of numbered versions
(``<base>/<version>/saved_model.pb``, TF Serving's layout; the highest version is used). ``--signature=auto``
sends the raw strings (``sentence``, ``sentence2``) to ``serving_default`` if it takes strings, else tokenizes
here (SentencePiece model from the export's ``assets.extra/`` or ``--spiece_model_file``; the fine-tuning run's
``max_seq_length`` from its ``metadata.json``) for ``serve_ids``, or for a ``serving_default`` that takes ids
(``input_ids``, ``segment_ids``, ``padding_mask``). A SQuAD export's raw-text ``serving_default`` (``question``,
``context``) answers SQuAD files' questions (``--text_fields=question,context``; docs/batch.md). The task family
of an export is the one of the ``kind`` its ``metadata.json`` records (``--task_module`` loads a family of your
own); an export that records none is recognised by its signature's inputs.
"""

from __future__ import annotations

import abc
import codecs
import contextlib
import dataclasses
import json
import os
import socket
import time
from typing import Callable, Iterator, Optional

import numpy as np
import tensorflow as tf
from absl import logging

# Defined in the package (no TensorFlow there) so the command line checks flags before TensorFlow loads.
from xlnet_tf.batch import DEFAULT_MAX_SEQ_LENGTH, FORMATS, SIGNATURES, SUMMARY_FILE  # noqa: F401
from xlnet_tf.errors import InputError
from xlnet_tf import tasks
from xlnet_tf.io_utils import GZIP_MAGIC, atomic_write, write_json_atomic
from xlnet_tf.tasks.base import MetadataInfo, Row

OUTPUT_SUFFIX = ".predictions.jsonl"
MAX_LISTED_SKIPS = 100  # skipped rows listed per shard in the summary (all are counted)


# --- inputs ------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Fields:
    """Where a row's text is: ``text_a`` (and ``text_b`` for pairs) and an optional ``id``, by column name (TSV
    header) or key (JSON Lines)."""
    text_a: str = "sentence"
    text_b: Optional[str] = None
    id: Optional[str] = None

    @classmethod
    def parse(cls, text_fields: str, id_field: Optional[str] = None, flag: str = "--text_fields") -> "Fields":
        names = [n.strip() for n in (text_fields or "").split(",")]
        if not 1 <= len(names) <= 2 or not all(names):
            raise InputError(f"{flag}={text_fields!r}: give one field name, or two for sentence pairs (a,b)")
        return cls(names[0], names[1] if len(names) > 1 else None, id_field or None)


def list_shards(input_glob: str, flag: str = "--input_glob") -> list:
    """The files matching the comma-separated globs of ``input_glob``, sorted, each once; an error naming the
    pattern if one matches nothing."""
    files = []
    for pattern in (p.strip() for p in (input_glob or "").split(",")):
        if not pattern:
            continue
        matched = sorted(f for f in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(f))
        if not matched and tf.io.gfile.isdir(pattern):
            raise InputError(f"{flag}: {pattern!r} is a directory: give a glob of its files, e.g. "
                             f"{os.path.join(pattern, '*.tsv')!r}")
        if not matched:
            raise FileNotFoundError(f"{flag}: {pattern!r} matches no file")
        files += [f for f in matched if f not in files]
    if not files:
        raise InputError(f"{flag} is empty")
    return files


def _family_formats() -> dict:
    """Input formats of the registered task families: name -> reader(path) of ``Row``s."""
    return {name: reader for family in tasks.families() if family.batch is not None
            for name, reader in family.batch.input_formats().items()}


def shard_format(path: str, input_format: str = "auto", family=None) -> str:
    """The format of a shard: ``input_format``, or by its name (a format of the model's task ``family``, e.g. a
    ``*.json`` file is a SQuAD file for a SQuAD model; else TSV or JSON Lines)."""
    if input_format != "auto":
        return input_format
    if path.endswith(".tsv"):
        return "tsv"
    own = family.batch.input_format_of(path) if family is not None and family.batch is not None else None
    if own:
        return own
    if path.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise InputError(f"{path}: unknown input format (name TSV files *.tsv, JSON Lines *.jsonl, SQuAD files *.json, "
                     "or set --input_format)")


def check_header(path: str, fmt: str, fields: Fields) -> None:
    """A TSV shard's header must name the fields, and a shard must not be a gzip file: checked for every shard
    before any is predicted (inside the tf.data generator the error would surface as an opaque iterator error)."""
    if fmt not in ("tsv", "jsonl"):
        return
    for row in read_rows(path, fmt, fields):  # read_rows raises on a bad header or a gzip file, before its first row
        break


def read_rows(path: str, fmt: str, fields: Fields) -> Iterator[Row]:
    """Streams the rows of one shard, line by line (1-based line numbers; TSV line 1 is the header). Blank lines
    are ignored. A TSV header without a named field is an error naming the file. A task family's own format (e.g.
    SQuAD files): its reader, whose rows carry their ids."""
    readers = _family_formats()
    if fmt in readers:
        yield from readers[fmt](path)
        return
    wanted = [n for n in (fields.text_a, fields.text_b, fields.id) if n]
    columns = None
    offset = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            offset += len(raw)
            if line_no == 1:
                if raw.startswith(GZIP_MAGIC):
                    raise InputError(f"{path}: a gzip file, not {fmt.upper()} text: decompress it first")
                if raw.startswith(codecs.BOM_UTF8):  # a byte-order mark (spreadsheet exports): not text
                    raw = raw[len(codecs.BOM_UTF8):]
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                yield Row(line_no, offset, problem=f"not UTF-8 ({e.reason})")
                continue
            if not text.strip():
                continue
            if fmt == "tsv":
                cells = text.split("\t")
                if columns is None:
                    columns = {name.strip(): i for i, name in enumerate(cells)}
                    missing = [n for n in wanted if n not in columns]
                    if missing:
                        raise InputError(f"{path}:{line_no}: header has no column {', '.join(map(repr, missing))} "
                                         f"(columns: {', '.join(columns)}); set the text/id field flags")
                    width = len(cells)
                    continue
                if len(cells) != width:
                    yield Row(line_no, offset, problem=f"{len(cells)} columns, header has {width}")
                    continue
                values = {n: cells[columns[n]] for n in wanted}
            else:
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    yield Row(line_no, offset, problem=f"not valid JSON ({e.msg})")
                    continue
                if not isinstance(obj, dict):
                    yield Row(line_no, offset, problem="not a JSON object")
                    continue
                absent = [n for n in wanted if n not in obj]
                if absent:
                    yield Row(line_no, offset, problem=f"no {', '.join(map(repr, absent))}")
                    continue
                problem = _json_fields_problem(obj, [n for n in (fields.text_a, fields.text_b) if n], fields.id)
                if problem:
                    yield Row(line_no, offset, problem=problem)
                    continue
                values = {n: obj[n] if isinstance(obj[n], str) else str(obj[n]) for n in wanted}
            text_a = values[fields.text_a].strip()
            text_b = values[fields.text_b].strip() if fields.text_b else ""
            if not text_a or (fields.text_b and not text_b):
                yield Row(line_no, offset, problem="empty text")
                continue
            yield Row(line_no, offset, text_a, text_b, values[fields.id].strip() if fields.id else "")


def _json_fields_problem(obj: dict, text_fields: list, id_field: str) -> str:
    """Why a JSON row's fields cannot be used ("" if they can): a text must be a string (predicting on the JSON text
    of 123, null or an object would be a silent wrong answer); an id a string or a number; no string may hold a
    lone surrogate ("\\ud800" is valid JSON but not Unicode TensorFlow can encode)."""
    for name in text_fields:
        if not isinstance(obj[name], str):
            kind = "null" if obj[name] is None else type(obj[name]).__name__
            return f"{name!r} is {kind}, not a string"
    if id_field and (isinstance(obj[id_field], bool) or not isinstance(obj[id_field], (str, int, float))):
        return f"{id_field!r} (the id) is {type(obj[id_field]).__name__}, not a string or number"
    for name in [*text_fields, id_field]:
        if name and isinstance(obj[name], str):
            try:
                obj[name].encode("utf-8")
            except UnicodeEncodeError:
                return f"{name!r} holds a lone surrogate (not valid Unicode)"
    return ""


# --- models --------------------------------------------------------------------------------------------------------

class Predictor(abc.ABC):
    """What the engine needs of a model. ``family``: its task family (``xlnet_tf.tasks``), which formats the rows;
    ``meta``: what the export records for clients (``metadata.json``). ``takes_text``: batches carry the raw strings
    (``text_a``, ``text_b`` [B]), else encoded ids (``input_ids``, ``segment_ids`` int32 [B, L], ``padding_mask``
    float32 [B, L]); ``__call__(batch)`` returns the family's ``batch.outputs`` (numpy). ``identity`` names the
    model and settings, ``described`` what it predicts (the family's ``batch.identity``; a resumed job must use
    the same)."""
    family = None
    meta: dict = {}
    takes_text: bool = False
    pair: Optional[bool] = None  # the model reads sentence pairs (None: unknown)
    tokenizer = None
    max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH
    identity: dict = {}
    described: dict = {}

    def _describe(self, output_names) -> None:
        self.described = self.family.batch.identity(self.meta, output_names)

    @abc.abstractmethod
    def __call__(self, batch: dict) -> dict:
        """The predictions of one batch (see the class docstring)."""


class KerasPredictor(Predictor):
    """A restored task model (the checkpoint path; the fast kernels apply) of ``family``, fed token ids; ``meta``:
    the ``ServingInfo`` (as a dict) an export of it would record.

    It runs as ``--do_predict`` over ``--eval_split`` does (``trainer.predict``): the model's inference step in
    ``strategy.run`` (default: the current strategy), each local replica on its slice of a batch of static shape
    [``batch_size``, L] (``batch_size`` rounded up to a multiple of them), compiled with XLA when
    ``jit_compile``. A shorter batch (a shard's last) is padded with rows of zeros to that shape and the padded
    rows' outputs are dropped, so a shard of any length compiles once. The family's ``batch.outputs`` is applied
    on the host to the model's outputs (classification: its logits)."""

    def __init__(self, model, family, meta: dict, tokenizer, max_seq_length: int, identity: dict,
                 strategy: Optional[tf.distribute.Strategy] = None, batch_size: int = 128,
                 jit_compile: bool = False):
        from xlnet_tf.finetuning.trainer import make_predict_step
        from xlnet_tf.training.xla import check_jit_compile

        self.family, self.meta, self.tokenizer, self.max_seq_length = family, meta, tokenizer, max_seq_length
        self.identity, self.pair = identity, meta.get("pair")
        replicas = 1  # the default strategy (one device) has no worker devices to list or check
        if strategy is not None:
            check_jit_compile(strategy, jit_compile)
            replicas = len(strategy.extended.worker_devices)
        strategy = strategy or tf.distribute.get_strategy()
        self.batch_size = -(-batch_size // replicas) * replicas
        per_replica = self.batch_size // replicas
        spec = family.serving.ids_spec(MetadataInfo(meta))
        names = list(spec)
        step = make_predict_step(model, (), jit_compile)

        @tf.function(input_signature=[tf.TensorSpec([self.batch_size, max_seq_length], s.dtype)
                                      for s in spec.values()])
        def forward(*features):
            features = dict(zip(names, features))

            def replica_slice(context):
                # this worker's replicas (their ids follow one another): every worker predicts the whole batch
                start = context.replica_id_in_sync_group % replicas * per_replica
                return {k: v[start:start + per_replica] for k, v in features.items()}

            outputs = strategy.run(step, args=(strategy.experimental_distribute_values_from_function(replica_slice),))
            return {k: tf.concat(strategy.experimental_local_results(v), 0) for k, v in outputs.items()}

        self._forward, self._names = forward, names
        self._describe(())

    def __call__(self, batch):
        rows = int(batch[self._names[0]].shape[0])
        if rows > self.batch_size:
            raise ValueError(f"a batch of {rows} rows for a predictor of batches of {self.batch_size}")
        padded = [tf.pad(batch[k], [[0, self.batch_size - rows], [0, 0]]) for k in self._names]
        outputs = self._forward(*padded)
        return self.family.batch.outputs({k: v[:rows] for k, v in outputs.items()}, self.meta)


def resolve_saved_model(path: str) -> tuple:
    """(SavedModel directory, version or None): ``path`` itself if it holds ``saved_model.pb``, else its highest
    numbered version directory that does (TF Serving's ``<base>/<version>/``)."""
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        return path, None
    if not tf.io.gfile.isdir(path):
        raise FileNotFoundError(f"--saved_model={path}: no such directory")
    versions = sorted(int(name.rstrip("/")) for name in tf.io.gfile.listdir(path) if name.rstrip("/").isdigit()
                      and tf.io.gfile.exists(os.path.join(path, name.rstrip("/"), "saved_model.pb")))
    if not versions:
        raise FileNotFoundError(f"--saved_model={path}: no saved_model.pb there nor in a numbered version "
                                "directory (<base>/<version>/saved_model.pb)")
    return os.path.join(path, str(versions[-1])), versions[-1]


class SavedModelPredictor(Predictor):
    """A SavedModel's signature (see the module docstring for which one ``auto`` picks)."""

    def __init__(self, path: str, signature: str = "auto", spiece_model_file: Optional[str] = None,
                 max_seq_length: Optional[int] = None, uncased: Optional[bool] = None):
        import tensorflow_text  # noqa: F401  (registers the text ops that raw-text signatures hold)

        self.path, self.version = resolve_saved_model(path)
        try:
            loaded = tf.saved_model.load(self.path)
        except (OSError, tf.errors.OpError) as e:  # a truncated or foreign saved_model.pb, missing variables
            message = " ".join(str(e).split())
            raise InputError(f"--saved_model={self.path}: cannot load it ({message[:300]})") from None
        self._loaded = loaded  # the signatures' variables live as long as the loaded object
        signatures = dict(loaded.signatures)

        def inputs_of(name):
            return signatures[name].structured_input_signature[1]

        def is_text(name):
            return any(spec.dtype == tf.string for spec in inputs_of(name).values())

        if signature == "auto":
            if "serving_default" in signatures and is_text("serving_default"):
                signature = "serving_default"
            elif "serve_ids" in signatures:
                signature = "serve_ids"
            elif "serving_default" in signatures:
                signature = "serving_default"
        if signature not in signatures:
            raise InputError(f"{self.path}: no signature {signature!r} (it has: {', '.join(signatures) or 'none'})")
        self.signature = signature
        self._fn = signatures[signature]
        self._inputs = inputs_of(signature)
        self.takes_text = is_text(signature)
        meta = self.meta = self._read_metadata()
        self.family = self._family(meta, signature)
        if self.takes_text:
            self._text_inputs = self.family.batch.text_inputs(meta)
            if self._text_inputs[0] not in self._inputs or not set(self._inputs) <= set(self._text_inputs):
                raise InputError(f"{self.path}: signature {signature!r} takes {sorted(self._inputs)}; batch "
                                 f"prediction of a {self.family.name} export sends {', '.join(self._text_inputs)}")
        else:
            ids = ("input_ids", "segment_ids", "padding_mask")
            if set(self._inputs) != set(ids) or self._inputs["input_ids"].shape.rank != 2:
                shapes = {k: v.shape.as_list() for k, v in self._inputs.items()}
                raise InputError(f"{self.path}: signature {signature!r} takes {shapes}; batch prediction from token "
                                 f"ids needs {', '.join(ids)} [batch, seq] (a classification or regression export; "
                                 "other exports: their raw-text serving_default)")
        self._describe(self._fn.structured_outputs)
        # Sentence pairs: a text signature says so by its inputs; an ids one only through metadata.json.
        self.pair = (len(self._text_inputs) > 1 and self._text_inputs[1] in self._inputs if self.takes_text
                     else meta.get("pair"))
        if not self.takes_text and max_seq_length is None:
            # The fine-tuning run's length, as the export records it; a shorter or longer one changes predictions.
            max_seq_length = meta.get("max_seq_length")
            if max_seq_length is None:
                max_seq_length = DEFAULT_MAX_SEQ_LENGTH
                logging.warning("%s does not record the fine-tuning run's max_seq_length; tokenizing to %d tokens "
                                "(set --max_seq_length to the run's)", self.path, max_seq_length)
        elif self.takes_text and max_seq_length is not None:
            logging.warning("--max_seq_length=%d is not used: signature %s tokenizes in the graph to the fine-tuning "
                            "run's length (%s)", max_seq_length, signature, meta.get("max_seq_length", "unrecorded"))
        elif not self.takes_text and meta.get("max_seq_length") not in (None, max_seq_length):
            logging.warning("--max_seq_length=%d differs from the fine-tuning run's %d (%s)", max_seq_length,
                            meta["max_seq_length"], self.path)
        self.max_seq_length = max_seq_length
        if not self.takes_text:
            from xlnet_tf.tokenization import XLNetTokenizer
            model_file = spiece_model_file or self._asset_spiece()
            self.tokenizer = XLNetTokenizer(model_file, lower=meta.get("lower_case", False) if uncased is None
                                            else uncased)
        self.identity = dict(saved_model=self.path, version=self.version, signature=signature,
                             max_seq_length=None if self.takes_text else max_seq_length,
                             spiece_sha256=self.tokenizer.fingerprint() if self.tokenizer else None)

    def _family(self, meta: dict, signature: str):
        """The export's task family: that of the kind it records, else the one whose signature takes these inputs."""
        if meta.get("kind"):
            family = tasks.for_kind(meta["kind"])
        else:
            family = tasks.for_signature(self._inputs)
            if family is None:
                raise InputError(f"{self.path}: signature {signature!r} takes {sorted(self._inputs)} and the export "
                                 "records no kind (assets.extra/metadata.json): no task family serves these inputs")
        if family.batch is None:
            raise InputError(f"{self.path}: a {family.name} export; batch prediction handles "
                             f"{', '.join(f.name for f in tasks.families() if f.batch is not None)} exports")
        return family

    def _read_metadata(self) -> dict:
        """What the export's ``assets.extra/`` says for clients: ``metadata.json`` (kind, labels, lower_case,
        pair; ``python -m xlnet_tf.cli.export``) or the older ``labels.json`` (kind, labels); {} if neither."""
        for name in ("metadata.json", "labels.json"):
            path = os.path.join(self.path, "assets.extra", name)
            if tf.io.gfile.exists(path):
                with tf.io.gfile.GFile(path) as f:
                    try:
                        return json.load(f)
                    except json.JSONDecodeError as e:
                        raise InputError(f"{path}: not valid JSON ({e})") from None
        return {}

    def _asset_spiece(self) -> str:
        extra = os.path.join(self.path, "assets.extra")
        models = tf.io.gfile.glob(os.path.join(extra, "*.model"))
        if len(models) != 1:
            raise FileNotFoundError(f"{self.path}: signature {self.signature!r} takes token ids and "
                                    f"{'no' if not models else 'more than one'} SentencePiece model is in "
                                    "assets.extra/: give --spiece_model_file")
        return models[0]  # XLNetTokenizer reads it through tf.io.gfile

    def __call__(self, batch):
        if self.takes_text:
            args = {name: batch[key] for name, key in zip(self._text_inputs, ("text_a", "text_b"))
                    if name in self._inputs}
        else:
            args = {k: tf.cast(batch[k], self._inputs[k].dtype) for k in ("input_ids", "segment_ids", "padding_mask")}
        return self.family.batch.outputs(self._fn(**args), self.meta)


# --- the engine -------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ShardStats:
    """What one shard's pass saw; the generator fills it while tf.data reads ahead."""
    rows: int = 0
    skipped: int = 0
    truncated: int = 0
    skipped_rows: list = dataclasses.field(default_factory=list)


def shard_dataset(predictor: Predictor, path: str, fmt: str, fields: Fields, batch_size: int,
                  stats: ShardStats) -> tf.data.Dataset:
    """Batches of one shard, streamed: ``line``, ``end`` int64 [B], ``id`` string [B] and the model inputs
    (``text_a``, ``text_b`` string [B], or ``input_ids``, ``segment_ids`` int32 [B, L], ``padding_mask`` float32
    [B, L]). Skipped rows are counted in ``stats``, never batched."""
    L = predictor.max_seq_length
    meta = {"line": tf.TensorSpec([], tf.int64), "end": tf.TensorSpec([], tf.int64), "id": tf.TensorSpec([], tf.string)}
    if predictor.takes_text:
        signature = dict(meta, text_a=tf.TensorSpec([], tf.string), text_b=tf.TensorSpec([], tf.string))
    else:
        signature = dict(meta, input_ids=tf.TensorSpec([L], tf.int32), segment_ids=tf.TensorSpec([L], tf.int32),
                         padding_mask=tf.TensorSpec([L], tf.float32))

    def generate():
        for row in read_rows(path, fmt, fields):
            if row.problem:
                stats.skipped += 1
                if len(stats.skipped_rows) < MAX_LISTED_SKIPS:
                    stats.skipped_rows.append(f"{path}:{row.line}: {row.problem}")
                continue
            item = {"line": row.line, "end": row.end, "id": row.id}
            if predictor.takes_text:
                item.update(text_a=row.text_a, text_b=row.text_b)
            else:
                ids, segs, mask, cut = predictor.family.batch.encode_ids(
                    predictor.tokenizer, row.text_a, row.text_b if fields.text_b else None, L)
                stats.truncated += cut
                item.update(input_ids=np.asarray(ids, np.int32), segment_ids=np.asarray(segs, np.int32),
                            padding_mask=np.asarray(mask, np.float32))
            yield item

    return tf.data.Dataset.from_generator(generate, output_signature=signature).batch(batch_size).prefetch(2)


def output_name(path: str) -> str:
    return os.path.basename(path) + OUTPUT_SUFFIX


def _format_rows(batch: dict, outputs: dict, predictor: Predictor, with_id: bool) -> list:
    """JSON lines of one batch; floats rounded to 6 decimals (stable text across runs and machines' last bits)."""
    lines = []
    ids = batch["id"].numpy()
    for i, line in enumerate(batch["line"].numpy()):
        row = {"line": int(line)}
        if with_id:
            row["id"] = ids[i].decode("utf-8")
        row.update(predictor.family.batch.row(outputs, i, predictor.meta))
        lines.append(json.dumps(row, ensure_ascii=False))
    return lines


def _write_output(path: str, write_fn: Callable) -> None:
    """Atomic (``io_utils.atomic_write``: a temporary name in the same directory, renamed)."""
    atomic_write(path, write_fn)


def _remove_stale_temporaries(output_dir: str, names: list) -> None:
    """Deletes temporary outputs a killed job left (``.<output>.tmp-*``), only of this job's shard names."""
    for name in names:
        for stale in tf.io.gfile.glob(os.path.join(output_dir, f".{name}.tmp-*")):
            tf.io.gfile.remove(stale)


class Progress:
    """Progress lines every ``every_s`` seconds: rows and examples/s of this run, the share of the input bytes
    done (shards finished before included) and the ETA from this run's bytes per second."""

    def __init__(self, total_bytes: int, done_bytes: int, every_s: float):
        self.total, self.done, self.run_start_bytes, self.every = max(total_bytes, 1), done_bytes, done_bytes, every_s
        self.start = self.last = time.monotonic()
        self.rows = 0

    def rate(self) -> float:
        return self.rows / max(time.monotonic() - self.start, 1e-9)

    def update(self, rows: int, shard_bytes: int, label: str, force: bool = False) -> None:
        """``rows`` more predicted; ``shard_bytes`` of the current shard read."""
        from xlnet_tf.training.progress import _duration
        self.rows += rows
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        done = self.done + shard_bytes
        read = done - self.run_start_bytes
        eta = _duration((self.total - done) * (now - self.start) / read) if read > 0 else "?"
        logging.info("predict %s | %d rows this run, %.1f examples/s | %.1f%% of input | ETA %s", label, self.rows,
                     self.rate(), 100.0 * done / self.total, eta)

    def shard_done(self, shard_bytes: int) -> None:
        self.done += shard_bytes


def predict_shards(predictor: Predictor, input_glob: str, output_dir: str, fields: Fields, batch_size: int = 128,
                   input_format: str = "auto", overwrite: bool = False, progress_every_s: float = 30.0,
                   glob_flag: str = "--input_glob") -> dict:
    """Predicts every shard matching ``input_glob`` into ``output_dir`` (see the module docstring); returns the
    summary written to ``predict_summary.json``. One job at a time writes into an output directory
    (``output_lock``)."""
    if input_format not in FORMATS:
        raise InputError(f"--input_format={input_format!r} must be one of {', '.join(FORMATS)}")
    if predictor.pair is not None and predictor.pair != bool(fields.text_b):
        flag = "--predict_text_fields" if glob_flag == "--predict_input_glob" else "--text_fields"
        wanted = "sentence pairs: name two fields (a,b)" if predictor.pair else "single sentences: name one field"
        raise InputError(f"{flag}: the model reads {wanted}")
    shards = list_shards(input_glob, glob_flag)
    tf.io.gfile.makedirs(output_dir)
    with output_lock(output_dir):
        return _predict_shards(predictor, shards, input_glob, output_dir, fields, batch_size, input_format,
                               overwrite, progress_every_s, glob_flag)


LOCK_FILE = ".predict.lock"


@contextlib.contextmanager
def output_lock(output_dir: str):
    """Holds ``<output_dir>/.predict.lock`` (host, pid, start time) while a job writes there; a second job is
    refused with a message naming the first. Local disks: created exclusively (``O_EXCL``); a lock left by a dead
    process of this host is taken over. Object stores (a URI): tf.io.gfile has no create-if-absent, so the check
    and the write are two steps and two jobs starting in the same instant could both pass."""
    path = os.path.join(output_dir, LOCK_FILE)
    me = dict(host=socket.gethostname(), pid=os.getpid(), started=time.strftime("%Y-%m-%d %H:%M:%S"))
    for _ in range(2):
        holder = _lock_holder(path)
        if holder is None:
            if "://" in path:
                with tf.io.gfile.GFile(path, "w") as f:
                    f.write(json.dumps(me))
                break
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                continue  # taken meanwhile: read who holds it
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(me))
            break
        if holder.get("host") == me["host"] and isinstance(holder.get("pid"), int) and not _alive(holder["pid"]):
            logging.warning("%s: taking over the lock of process %d, which is gone", path, holder["pid"])
            tf.io.gfile.remove(path)
            continue
        raise InputError(f"--output_dir={output_dir}: another batch prediction is writing there (pid "
                         f"{holder.get('pid')} on {holder.get('host')}, since {holder.get('started')}); wait for it "
                         f"or use another --output_dir (if that job is gone, delete {path})")
    else:
        raise InputError(f"--output_dir={output_dir}: could not take {path}")
    try:
        yield
    finally:
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)


def _lock_holder(path: str) -> Optional[dict]:
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as f:
            holder = json.loads(f.read() or "{}")
        return holder if isinstance(holder, dict) else {}
    except (ValueError, tf.errors.NotFoundError):  # being written, or removed meanwhile
        return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _predict_shards(predictor: Predictor, shards: list, input_glob: str, output_dir: str, fields: Fields,
                    batch_size: int, input_format: str, overwrite: bool, progress_every_s: float,
                    glob_flag: str) -> dict:
    formats = {path: shard_format(path, input_format, predictor.family) for path in shards}
    names = [output_name(p) for p in shards]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise InputError(f"{glob_flag}: input files with the same name in different directories would write the "
                         f"same output ({', '.join(clashes)}); predict them into separate --output_dir")
    settings = dict(model=predictor.identity, text_fields=[fields.text_a] + ([fields.text_b] if fields.text_b else []),
                    id_field=fields.id, **predictor.described)
    summary_path = os.path.join(output_dir, SUMMARY_FILE)
    previous = {}
    if tf.io.gfile.exists(summary_path) and not overwrite:
        with tf.io.gfile.GFile(summary_path) as f:
            previous = json.load(f)
        if previous.get("settings") != settings and previous.get("shards"):  # no shard done: nothing to mix
            diff = {k: (previous.get("settings", {}).get(k), v) for k, v in settings.items()
                    if previous.get("settings", {}).get(k) != v}
            raise InputError(f"--output_dir={output_dir} holds predictions made with other settings ("
                             + "; ".join(f"{k}: there {a!r}, now {b!r}" for k, (a, b) in diff.items())
                             + "): use another --output_dir, or --overwrite to predict every shard again")
    _remove_stale_temporaries(output_dir, names)
    # Outputs of inputs no longer matched (a deleted or renamed shard): kept (they are the user's), but named in the
    # log and the summary, so that "complete" is not read as covering them.
    stale = sorted(n for n in tf.io.gfile.listdir(output_dir) if n.endswith(OUTPUT_SUFFIX) and n not in names)
    if stale:
        logging.warning("%s holds predictions of inputs %s does not match: %s (delete them, or use another "
                        "--output_dir)", output_dir, glob_flag, ", ".join(stale))
    done_before = {s["input"]: s for s in previous.get("shards", [])}
    stats_of = {p: tf.io.gfile.stat(p) for p in shards}
    sizes = {p: st.length for p, st in stats_of.items()}
    identity = {p: [st.length, st.mtime_nsec] for p, st in stats_of.items()}  # an input rewritten since: again
    records, todo = [], []
    for path, name in zip(shards, names):
        out = os.path.join(output_dir, name)
        if not overwrite and tf.io.gfile.exists(out) and path in done_before:
            if done_before[path].get("input_identity") == identity[path]:
                records.append(done_before[path])
                continue
            logging.warning("%s changed since its predictions were written; predicting it again", path)
        todo.append(path)
    if len(todo) < len(shards):
        logging.info("predict: %d of %d shards already done in %s; skipping them", len(shards) - len(todo),
                     len(shards), output_dir)
    for path in todo:
        check_header(path, formats[path], fields)
    progress = Progress(sum(sizes.values()), sum(sizes[p] for p in shards if p not in todo), progress_every_s)
    summary = dict(settings=settings, input_glob=input_glob, shards=records, outputs_of_other_inputs=stale)
    own_formats = _family_formats()

    def write_summary():
        totals = {k: sum(s[k] for s in summary["shards"]) for k in ("rows", "skipped", "truncated")}
        summary.update(complete=len(summary["shards"]) == len(shards), shards_total=len(shards), **totals,
                       examples_per_s_this_run=round(progress.rate(), 2))
        summary["shards"].sort(key=lambda s: shards.index(s["input"]) if s["input"] in shards else len(shards))
        if "://" in summary_path:
            _write_output(summary_path, lambda f: f.write(json.dumps(summary, indent=2) + "\n"))
        else:
            write_json_atomic(summary_path, summary)

    write_summary()
    for path in todo:
        k = shards.index(path) + 1
        label = f"shard {k}/{len(shards)} {os.path.basename(path)}"
        stats = ShardStats()
        dataset = shard_dataset(predictor, path, formats[path], fields, batch_size, stats)
        started = time.monotonic()

        def write(f):
            for batch in dataset:
                with_id = fields.id is not None or formats[path] in own_formats  # e.g. SQuAD questions' ids
                lines = _format_rows(batch, predictor(batch), predictor, with_id)
                f.write("\n".join(lines) + "\n")
                stats.rows += len(lines)
                progress.update(len(lines), int(batch["end"].numpy()[-1]), label)
            if stats.skipped and not stats.rows:  # not a shard with a few bad rows: the wrong file or format
                raise InputError(f"{path}: all {stats.skipped} rows are bad, e.g. {'; '.join(stats.skipped_rows[:3])} "
                                 f"(is it {formats[path].upper()}? --input_format names the format)")

        _write_output(os.path.join(output_dir, output_name(path)), write)
        progress.shard_done(sizes[path])
        progress.update(0, 0, f"{label} done", force=True)
        if stats.skipped:
            logging.warning("%s: skipped %d bad row(s), e.g. %s", path, stats.skipped,
                            "; ".join(stats.skipped_rows[:3]))
        summary["shards"].append(dict(input=path, input_identity=identity[path],
                                      output=os.path.join(output_dir, output_name(path)),
                                      format=formats[path], rows=stats.rows, skipped=stats.skipped,
                                      truncated=stats.truncated if not predictor.takes_text else 0,
                                      skipped_rows=stats.skipped_rows,
                                      seconds=round(time.monotonic() - started, 2)))
        write_summary()
    skipped = sum(s["skipped"] for s in summary["shards"])
    logging.info("predict: %d shards, %d rows predicted, %d bad row(s) skipped%s; summary in %s", len(shards),
                 summary["rows"], skipped, " (listed with file:line there)" if skipped else "", summary_path)
    return summary
