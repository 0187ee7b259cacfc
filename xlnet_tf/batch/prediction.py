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
* **Resuming**: a rerun skips the shards whose output exists (unless their input file changed since, or the output's
  size is not the one recorded when it was written: a truncated copy is predicted again); the one being
  written when a job was killed is predicted again from its start, so a rerun's files equal an uninterrupted run's.
  A rerun with another model or other settings than ``predict_summary.json`` records is an error (``--overwrite``
  deletes every earlier output and predicts every shard again); a model is told by its files' content, not the path
  naming it (``Predictor.identity``).
* **Bad rows** (wrong column count, empty text, invalid JSON, not UTF-8, longer than ``--max_line_bytes``, which is
  never read whole) are skipped, counted and listed with file:line in the summary and the log; a missing field in
  a TSV header is an error naming the file.

SavedModels: ``--saved_model`` is a SavedModel directory or a base path of numbered versions
(``<base>/<version>/saved_model.pb``, TF Serving's layout; the highest version is used). ``--signature=auto``
sends the raw strings (``sentence``, ``sentence2``) to ``serving_default`` if it takes strings, else tokenizes
here (SentencePiece model from the export's ``assets.extra/`` or ``--spiece_model_file``; the fine-tuning run's
``max_seq_length`` from its ``metadata.json``) for ``serve_ids``, or for a ``serving_default`` that takes ids
(``input_ids``, ``segment_ids``, ``padding_mask``). A SQuAD export's raw-text ``serving_default`` (``question``,
``context``) answers SQuAD files' questions (``--text_fields=question,context``; docs/batch.md). The task family
of an export is the one of the ``kind`` its ``metadata.json`` records (``--task_module`` loads a family of your
own); an export that records none is recognised by its signature's inputs.

The inputs (``xlnet_tf.batch.inputs``), the rows between input and output (``xlnet_tf.batch.rows``) and the models
(``xlnet_tf.batch.predictors``) are shared with the Beam pipeline (``xlnet_tf.batch.beam``); this module is the
engine of one machine (shards in turn, resumable, one job per output directory) and names them for its callers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional

import numpy as np
import tensorflow as tf
from absl import logging

# Defined in the package (no TensorFlow there) so the command line checks flags before TensorFlow loads.
from xlnet_tf.batch import DEFAULT_MAX_SEQ_LENGTH, SIGNATURES, SUMMARY_FILE, input_format_error
# The parts shared with the Beam pipeline, named here for this engine's callers (run_classifier.py, tests, bench/).
from xlnet_tf.batch.inputs import DEFAULT_MAX_LINE_BYTES, Fields, check_header, list_shards, read_rows, shard_format
from xlnet_tf.batch.predictors import (KerasPredictor, Predictor, SavedModelPredictor, checkpoint_sha256,
                                       resolve_saved_model)
from xlnet_tf.batch.rows import (LOCK_FILE, OUTPUT_SUFFIX, earlier_outputs, input_shards, model_inputs, output_lines,
                                 output_name, settings_of, stack_inputs, totals, with_id)
from xlnet_tf.errors import InputError
from xlnet_tf.progress_lines import Progress
from xlnet_tf import io_utils
from xlnet_tf.io_utils import atomic_write, write_json_atomic

__all__ = ["DEFAULT_MAX_SEQ_LENGTH", "SIGNATURES", "SUMMARY_FILE", "Fields", "KerasPredictor", "LOCK_FILE",
           "OUTPUT_SUFFIX", "Predictor", "SavedModelPredictor", "check_header", "checkpoint_sha256", "list_shards",
           "output_lock", "predict_shards", "read_rows", "resolve_saved_model", "shard_format"]

MAX_LISTED_SKIPS = 100  # skipped rows listed per shard in the summary (all are counted)


# --- the engine -------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ShardStats:
    """What one shard's pass saw; the generator fills it while tf.data reads ahead."""
    rows: int = 0
    skipped: int = 0
    truncated: Optional[int] = 0  # None: not counted (rows.model_inputs)
    skipped_rows: list = dataclasses.field(default_factory=list)


def shard_dataset(predictor: Predictor, path: str, fmt: str, fields: Fields, batch_size: int,
                  stats: ShardStats, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tf.data.Dataset:
    """Batches of one shard, streamed: ``line``, ``end`` int64 [B], ``id`` string [B] and the model inputs
    (``text_a``, ``text_b`` string [B], or ``input_ids``, ``segment_ids`` int32 [B, L], ``padding_mask`` float32
    [B, L]). Skipped rows are counted in ``stats``, never batched. The generator yields whole batches: tf.data's
    per-element cost of ``from_generator`` (a Python call and a conversion per tensor) is paid once a batch, not
    once a row (where the model is small, it cost more than the forward pass)."""
    L = predictor.max_seq_length
    meta = {"line": tf.TensorSpec([None], tf.int64), "end": tf.TensorSpec([None], tf.int64),
            "id": tf.TensorSpec([None], tf.string)}
    if predictor.takes_text:
        signature = dict(meta, text_a=tf.TensorSpec([None], tf.string), text_b=tf.TensorSpec([None], tf.string))
    else:
        signature = dict(meta, input_ids=tf.TensorSpec([None, L], tf.int32),
                         segment_ids=tf.TensorSpec([None, L], tf.int32),
                         padding_mask=tf.TensorSpec([None, L], tf.float32))

    def generate():
        lines, ends, ids, inputs = [], [], [], []

        def batch():  # the model inputs stacked as the Beam pipeline stacks them (rows.stack_inputs)
            return dict(stack_inputs(inputs), line=np.asarray(lines, np.int64), end=np.asarray(ends, np.int64),
                        id=np.asarray(ids, object))

        for row in read_rows(path, fmt, fields, max_line_bytes):
            if row.problem:
                stats.skipped += 1
                if len(stats.skipped_rows) < MAX_LISTED_SKIPS:
                    stats.skipped_rows.append(f"{path}:{row.line}: {row.problem}")
                continue
            item, cut = model_inputs(predictor, row, bool(fields.text_b))
            stats.truncated = None if cut is None else stats.truncated + cut
            lines.append(row.line)
            ends.append(row.end)
            ids.append(row.id)
            inputs.append(item)
            if len(inputs) == batch_size:
                yield batch()
                lines, ends, ids, inputs = [], [], [], []
        if inputs:
            yield batch()

    return tf.data.Dataset.from_generator(generate, output_signature=signature).prefetch(2)


def _format_rows(batch: dict, outputs: dict, predictor: Predictor, with_ids: bool) -> list:
    """JSON lines of one batch (``rows.output_lines``)."""
    ids = [i.decode("utf-8") if with_ids else None for i in batch["id"].numpy()]
    return output_lines(predictor, outputs, batch["line"].numpy(), ids)


def _read_summary(path: str, flags: _Flags) -> dict:
    """The summary a job in the output directory wrote (what it predicted, with which settings)."""
    try:
        with tf.io.gfile.GFile(path) as f:
            summary = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        summary = e
    if not isinstance(summary, dict):
        why = summary if isinstance(summary, Exception) else f"a JSON {type(summary).__name__}, not an object"
        raise InputError(f"{path}: damaged ({why}); delete it (every shard in {flags.output_dir} is then "
                         "predicted again)")
    return summary


def _refuse_other_settings(previous: dict, settings: dict, output_dir: str, flags: _Flags) -> None:
    """The error for a rerun whose ``settings`` differ from those of the shards done in ``output_dir``."""
    earlier = previous.get("settings", {})
    model = earlier.get("model", {})
    if "sha256" not in model and model.get("saved_model", model.get("checkpoint")):
        # An older summary named the model by its path only, under which another model may sit now.
        raise InputError(f"{flags.output_dir}={output_dir} holds predictions of a model recorded by its path only "
                         f"({model.get('saved_model', model.get('checkpoint'))}; by an earlier xlnet_tf), not by its "
                         f"content: whether this model made them cannot be told; use another {flags.output_dir}, or "
                         f"{flags.redo}")
    there, now = _flat(earlier), _flat(settings)
    diff = {k: (there.get(k), now.get(k)) for k in [*now, *there] if there.get(k) != now.get(k)}
    source = " ".join(f"{k}={v}" for k, v in previous.get("model_source", {}).items())
    source = f"; the earlier model: {source}" if source and any(k.startswith("model.") for k in diff) else ""
    raise InputError(f"{flags.output_dir}={output_dir} holds predictions made with other settings ("
                     + "; ".join(f"{k}: there {a!r}, now {b!r}" for k, (a, b) in diff.items())
                     + f"{source}): use another {flags.output_dir}, or {flags.redo}")


def _flat(settings: dict) -> dict:
    """``settings`` with the model's entries as ``model.<key>``: a difference is named by its key."""
    flat = {}
    for key, value in settings.items():
        flat.update({f"{key}.{k}": v for k, v in value.items()} if key == "model" else {key: value})
    return flat


def _remove_stale_temporaries(output_dir: str, names: list) -> None:
    """Deletes temporary outputs a killed job left (``.<output>.tmp-*``), only of this job's shard names."""
    for name in names:
        for stale in tf.io.gfile.glob(os.path.join(output_dir, f".{name}.tmp-*")):
            tf.io.gfile.remove(stale)


class _InputProgress(Progress):
    """Progress through the input's bytes (its share and the ETA; shards finished before count as done), with
    the rows predicted from them this run and their rate."""

    def __init__(self, total_bytes: int, done_bytes: int, every_s: float):
        super().__init__("predict", total_bytes, "MB", every_s, scale=1e-6, done=done_bytes)
        self.rows, self.shard_start = 0, done_bytes

    def row_rate(self) -> float:
        return self.rows / max(self.clock() - self.start, 1e-9)

    def update(self, rows: int, shard_bytes: int, label: str, force: bool = False) -> None:
        """``rows`` more predicted; ``shard_bytes`` of the current shard read."""
        self.rows += rows
        self.advance(self.shard_start + shard_bytes - self.done, force=force,
                     note=f"{label} | {self.rows} rows this run, {self.row_rate():.1f} examples/s")

    def shard_done(self, shard_bytes: int, label: str) -> None:
        self.update(0, shard_bytes, f"{label} done", force=True)
        self.shard_start = self.done


@dataclasses.dataclass(frozen=True)
class _Flags:
    """The names a job's messages give: ``cli.predict``'s flags, or run_classifier.py ``--do_predict``'s."""
    glob: str
    text_fields: str = "--text_fields"
    output_dir: str = "--output_dir"
    redo: str = "--overwrite to predict every shard again"

    @classmethod
    def of(cls, glob_flag: str) -> "_Flags":
        if glob_flag == "--predict_input_glob":
            return cls(glob_flag, "--predict_text_fields", "--predict_dir",
                       f"delete its {SUMMARY_FILE} to predict every shard again")
        return cls(glob_flag)


def predict_shards(predictor: Predictor, input_glob: str, output_dir: str, fields: Fields, batch_size: int = 128,
                   input_format: str = "auto", overwrite: bool = False, progress_every_s: float = 30.0,
                   glob_flag: str = "--input_glob", max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> dict:
    """Predicts every shard matching ``input_glob`` into ``output_dir`` (see the module docstring); returns the
    summary written to ``predict_summary.json``. One job at a time writes into an output directory
    (``output_lock``)."""
    if problem := input_format_error(input_format):
        raise InputError(problem)
    flags = _Flags.of(glob_flag)
    if predictor.pair is not None and predictor.pair != bool(fields.text_b):
        wanted = "sentence pairs: name two fields (a,b)" if predictor.pair else "single sentences: name one field"
        raise InputError(f"{flags.text_fields}: the model reads {wanted}")
    shards = input_shards(input_glob, output_dir, glob_flag, flags.output_dir)
    tf.io.gfile.makedirs(output_dir)
    with output_lock(output_dir, flags.output_dir):
        return _predict_shards(predictor, shards, input_glob, output_dir, fields, batch_size, input_format,
                               overwrite, progress_every_s, flags, max_line_bytes)


def output_lock(output_dir: str, flag: str = "--output_dir"):
    """Holds ``<output_dir>/.predict.lock`` while a job writes there (``io_utils.directory_lock``): a second job is
    refused with a message naming the first; a lock left by a dead or lost job is taken over."""
    def refusal(holder: dict, path: str) -> str:
        return (f"{flag}={output_dir}: another batch prediction is writing there (pid {holder.get('pid')} on "
                f"{holder.get('host')}, since {holder.get('started')}); wait for it or use another {flag} (if "
                f"that job is gone, delete {path})")
    return io_utils.directory_lock(output_dir, LOCK_FILE, refusal)


def _predict_shards(predictor: Predictor, shards: list, input_glob: str, output_dir: str, fields: Fields,
                    batch_size: int, input_format: str, overwrite: bool, progress_every_s: float,
                    flags: _Flags, max_line_bytes: int) -> dict:
    plan = _plan(predictor, shards, output_dir, fields, input_format, overwrite, flags, max_line_bytes)
    sizes = {p: identity[0] for p, identity in plan.identity.items()}
    progress = _InputProgress(sum(sizes.values()), sum(sizes[p] for p in shards if p not in plan.todo),
                              progress_every_s)
    summary = dict(model_source=predictor.source, settings=plan.settings, input_glob=input_glob,
                   shards=plan.records, outputs_of_other_inputs=plan.stale)
    summary_path = os.path.join(output_dir, SUMMARY_FILE)

    def write_summary():
        summary.update(complete=len(summary["shards"]) == len(shards), shards_total=len(shards),
                       **totals(summary["shards"]),
                       examples_per_s_this_run=round(progress.row_rate(), 2))
        summary["shards"].sort(key=lambda s: shards.index(s["input"]) if s["input"] in shards else len(shards))
        write_json_atomic(summary_path, summary)

    write_summary()
    for path in plan.todo:
        label = f"shard {shards.index(path) + 1}/{len(shards)} {os.path.basename(path)}"
        record = _predict_shard(predictor, path, plan.formats[path], fields, batch_size, output_dir, progress, label,
                                max_line_bytes)
        progress.shard_done(sizes[path], label)
        summary["shards"].append(dict(input=path, input_identity=plan.identity[path], **record))
        write_summary()
    skipped = sum(s["skipped"] for s in summary["shards"])
    logging.info("predict: %d shards, %d rows predicted, %d bad row(s) skipped%s; summary in %s", len(shards),
                 summary["rows"], skipped, " (listed with file:line there)" if skipped else "", summary_path)
    return summary


@dataclasses.dataclass
class _Plan:
    """What a job in an output directory is to do: each input's format and identity ([size, mtime]: an input
    rewritten since is predicted again), the settings compared with an earlier job's, the records of the shards
    done before, the shards to predict, and the outputs of inputs no longer matched."""
    formats: dict
    identity: dict
    settings: dict
    records: list
    todo: list
    stale: list


def _plan(predictor: Predictor, shards: list, output_dir: str, fields: Fields, input_format: str, overwrite: bool,
          flags: _Flags, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> _Plan:
    """Checks the inputs against the output directory and an earlier job's summary there (refusing a clash of
    output names, a Beam job's directory, other settings), clears what ``overwrite`` or a killed job left, and
    says what remains to do; every remaining input's header is read (a wrong column is an error now, not after
    hours of the shards before it)."""
    formats = {path: shard_format(path, input_format, predictor.family) for path in shards}
    names = [output_name(p) for p in shards]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise InputError(f"{flags.glob}: input files with the same name in different directories would write the "
                         f"same output ({', '.join(clashes)}); predict them into separate {flags.output_dir}")
    settings = settings_of(predictor, fields)
    summary_path = os.path.join(output_dir, SUMMARY_FILE)
    previous = {}
    if tf.io.gfile.exists(summary_path) and not overwrite:
        previous = _read_summary(summary_path, flags)
        if previous.get("runner"):  # a Beam job's (xlnet_tf.batch.beam): its summary is no resumable state
            raise InputError(f"{flags.output_dir}={output_dir} holds the results of a Beam job (--runner="
                             f"{previous['runner']}), which this run's summary would replace: use another "
                             f"{flags.output_dir}, or {flags.redo}")
        if previous.get("settings") != settings and previous.get("shards"):  # no shard done: nothing to mix
            _refuse_other_settings(previous, settings, output_dir, flags)
    _remove_stale_temporaries(output_dir, names)
    earlier = [p for p in earlier_outputs(output_dir) if os.path.basename(p) != SUMMARY_FILE]
    if overwrite and earlier:  # either engine's: left, a glob over the directory would read two models' rows
        logging.warning("--overwrite: deleting the %d earlier output(s) in %s (%s%s)", len(earlier), output_dir,
                        ", ".join(os.path.basename(p) for p in earlier[:3]), ", ..." if len(earlier) > 3 else "")
        for path in earlier:
            tf.io.gfile.remove(path)
    # Outputs of inputs no longer matched (a deleted or renamed shard): kept (they are the user's), but named in the
    # log and the summary, so that "complete" is not read as covering them.
    stale = [] if overwrite else [n for n in map(os.path.basename, earlier) if n not in names]
    if stale:
        logging.warning("%s holds predictions of inputs %s does not match: %s (delete them, or use another "
                        "%s)", output_dir, flags.glob, ", ".join(stale), flags.output_dir)
    done_before = {s["input"]: s for s in previous.get("shards", [])}
    identity = {p: [st.length, st.mtime_nsec] for p, st in ((p, tf.io.gfile.stat(p)) for p in shards)}
    records, todo = [], []
    for path, name in zip(shards, names):
        out = os.path.join(output_dir, name)
        if not overwrite and tf.io.gfile.exists(out) and path in done_before:
            written = done_before[path].get("output_bytes")
            if done_before[path].get("input_identity") != identity[path]:
                logging.warning("%s changed since its predictions were written; predicting it again", path)
            elif written is not None and tf.io.gfile.stat(out).length != written:
                # A partial copy or sync, a restored backup: the summary's rows would not be in the file.
                logging.warning("%s: %d bytes, written with %d (truncated or replaced); predicting %s again", out,
                                tf.io.gfile.stat(out).length, written, path)
            else:
                records.append(done_before[path])
                continue
        todo.append(path)
    if len(todo) < len(shards):
        logging.info("predict: %d of %d shards already done in %s; skipping them", len(shards) - len(todo),
                     len(shards), output_dir)
    for path in todo:
        check_header(path, formats[path], fields, max_line_bytes)
    return _Plan(formats, identity, settings, records, todo, stale)


def _predict_shard(predictor: Predictor, path: str, fmt: str, fields: Fields, batch_size: int, output_dir: str,
                   progress: _InputProgress, label: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> dict:
    """Predicts one input file into its output (written whole or not at all); returns its summary record (after
    ``input`` and ``input_identity``)."""
    stats = ShardStats()
    dataset = shard_dataset(predictor, path, fmt, fields, batch_size, stats, max_line_bytes)
    started = time.monotonic()

    def write(f):
        for batch in dataset:
            lines = _format_rows(batch, predictor(batch), predictor, with_id(fields, fmt))
            f.write("\n".join(lines) + "\n")
            stats.rows += len(lines)
            progress.update(len(lines), int(batch["end"].numpy()[-1]), label)
        if stats.skipped and not stats.rows:  # not a shard with a few bad rows: the wrong file or format
            raise InputError(f"{path}: all {stats.skipped} rows are bad, e.g. {'; '.join(stats.skipped_rows[:3])} "
                             f"(is it {fmt.upper()}? --input_format names the format)")

    output = os.path.join(output_dir, output_name(path))
    atomic_write(output, write)
    if stats.skipped:
        logging.warning("%s: skipped %d bad row(s), e.g. %s", path, stats.skipped, "; ".join(stats.skipped_rows[:3]))
    return dict(output=output, output_bytes=tf.io.gfile.stat(output).length, format=fmt, rows=stats.rows,
                skipped=stats.skipped,
                truncated=stats.truncated, skipped_rows=stats.skipped_rows,
                seconds=round(time.monotonic() - started, 2))
