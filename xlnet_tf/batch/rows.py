"""Batch prediction's rows between input and output, written once for every engine (``xlnet_tf.batch.prediction``
on one machine, ``xlnet_tf.batch.beam`` on a Beam runner): a usable input row as a model's inputs
(``model_inputs``, ``stack_inputs``) and a batch's predictions as output JSON lines (``output_lines``). What a
prediction holds is the task family's (``xlnet_tf.tasks``: ``batch.encode_ids``, ``batch.row``); the engines call the
families' hooks only through here and ``xlnet_tf.batch.predictors``."""

from __future__ import annotations

import fnmatch
import json
import os
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from xlnet_tf import io_utils
from xlnet_tf.batch import SUMMARY_FILE
from xlnet_tf.batch.inputs import Fields, family_formats, list_shards
from xlnet_tf.errors import InputError
from xlnet_tf.tasks.base import Row

OUTPUT_SUFFIX = ".predictions.jsonl"  # cli.predict's, one per input
PREDICTIONS = "predictions"  # a Beam job's: <output_dir>/predictions-SSSSS-of-NNNNN.jsonl
DEAD_LETTERS = "dead_letters"  # <output_dir>/dead_letters-SSSSS-of-NNNNN.txt
LOCK_FILE = ".predict.lock"
# What either engine writes in an output directory: an --overwrite removes it, a job never reads it as an input.
OUTPUT_PATTERNS = (f"{PREDICTIONS}-*-of-*.jsonl", f"{DEAD_LETTERS}-*-of-*.txt", f"*{OUTPUT_SUFFIX}",
                   SUMMARY_FILE)


def output_name(path: str) -> str:
    """The file name of the predictions of input ``path`` (``python -m xlnet_tf.cli.predict``)."""
    return os.path.basename(path) + OUTPUT_SUFFIX


def earlier_outputs(output_dir: str) -> list:
    """The results either engine wrote in ``output_dir`` (its ``OUTPUT_PATTERNS``), sorted: left beside a new
    job's, a glob over the directory would read two jobs' predictions."""
    return sorted({p for pattern in OUTPUT_PATTERNS for p in tf.io.gfile.glob(os.path.join(output_dir, pattern))})


def input_shards(input_glob: str, output_dir: str, glob_flag: str = "--input_glob",
                 output_flag: str = "--output_dir") -> list:
    """``list_shards`` of ``input_glob`` but for the files a job wrote in ``output_dir`` (``written_by_a_job``)."""
    shards = [p for p in list_shards(input_glob, glob_flag) if not written_by_a_job(p, output_dir)]
    if not shards:
        raise InputError(f"{glob_flag}={input_glob} matches only what batch prediction wrote in {output_flag}="
                         f"{output_dir}")
    return shards


def written_by_a_job(path: str, output_dir: str) -> bool:
    """Whether ``path`` is a job's own file in ``output_dir`` (either engine's results, the lock, temporaries),
    which an input glob matching the output directory would otherwise read as inputs on the rerun."""
    folder, name = os.path.split(path)
    return (io_utils.canonical(folder) == io_utils.canonical(output_dir)
            and any(fnmatch.fnmatchcase(name, p) for p in OUTPUT_PATTERNS + (LOCK_FILE, ".*")))


def settings_of(predictor, fields: Fields) -> dict:
    """What a job's predictions depend on (``predict_summary.json``'s ``settings``; a resumed job must have the
    same): the model's identity (its content, not where it was read), the fields, what the model predicts."""
    return dict(model=predictor.identity, text_fields=[fields.text_a] + ([fields.text_b] if fields.text_b else []),
                id_field=fields.id, **predictor.described)


def with_id(fields: Fields, fmt: str) -> bool:
    """Whether the output rows of a shard of format ``fmt`` carry an ``id``: an id field is named, or the format's
    rows carry their own (a task family's format, e.g. SQuAD questions' ids)."""
    return fields.id is not None or fmt in family_formats()


def model_inputs(predictor, row: Row, pair: bool) -> tuple:
    """``(inputs, truncated)``: a usable ``row`` as ``predictor``'s inputs (``text_a``, ``text_b`` strings, or
    ``input_ids``, ``segment_ids`` int32 [L], ``padding_mask`` float32 [L] encoded here by the family, 1 in
    ``truncated`` if its text was cut to ``max_seq_length``; None for raw text, which the export cuts inside its
    graph). ``pair``: the second text is used."""
    if predictor.takes_text:
        return dict(text_a=row.text_a, text_b=row.text_b), None
    ids, segs, mask, cut = predictor.family.batch.encode_ids(predictor.tokenizer, row.text_a,
                                                             row.text_b if pair else None, predictor.max_seq_length)
    return dict(input_ids=np.asarray(ids, np.int32), segment_ids=np.asarray(segs, np.int32),
                padding_mask=np.asarray(mask, np.float32)), int(cut)


def totals(shards: Sequence[dict]) -> dict:
    """A summary's ``rows``, ``skipped`` and ``truncated`` over its shards; ``truncated`` is None (not counted)
    where a shard's is: a raw-text export cuts its text inside its graph, unseen here."""
    cut = [s["truncated"] for s in shards]
    return dict(rows=sum(s["rows"] for s in shards), skipped=sum(s["skipped"] for s in shards),
                truncated=None if None in cut else sum(cut))


def stack_inputs(items: Sequence[dict]) -> dict:
    """A batch (what ``Predictor.__call__`` takes) of ``model_inputs``' dicts: strings [B] or arrays [B, L], as
    NumPy arrays (strings as objects): ``tf.data.Dataset.from_generator`` (``cli.predict``) would convert a tensor
    built here back to NumPy; a SavedModel's signature (Beam) takes either."""
    return {k: np.asarray([item[k] for item in items], object) if isinstance(items[0][k], str)
            else np.stack([item[k] for item in items]) for k in items[0]}


def output_lines(predictor, outputs: dict, lines: Sequence[int], ids: Sequence[Optional[str]],
                 files: Optional[Sequence[str]] = None) -> list:
    """The JSON lines of one batch's predictions (``outputs``: ``predictor(batch)``): row ``i`` is ``{"file"``
    (with ``files``), ``"line", "id"`` (unless ``ids[i]`` is None) and the family's ``batch.row``; floats are
    rounded to 6 decimals there (stable text across runs and machines' last bits)."""
    result = []
    for i, line in enumerate(lines):
        row = {"file": files[i]} if files is not None else {}
        row["line"] = int(line)
        if ids[i] is not None:
            row["id"] = ids[i]
        row.update(predictor.family.batch.row(outputs, i, predictor.meta))
        result.append(json.dumps(row, ensure_ascii=False))
    return result
