"""Batch prediction's rows between input and output, written once for every engine (``xlnet_tf.batch.prediction``
on one machine, ``xlnet_tf.batch.beam`` on a Beam runner): a usable input row as a model's inputs
(``model_inputs``, ``stack_inputs``) and a batch's predictions as output JSON lines (``output_lines``). What a
prediction holds is the task family's (``xlnet_tf.tasks``: ``batch.encode_ids``, ``batch.row``); the engines call the
families' hooks only through here and ``xlnet_tf.batch.predictors``."""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np

from xlnet_tf.batch.inputs import Fields, family_formats
from xlnet_tf.tasks.base import Row

OUTPUT_SUFFIX = ".predictions.jsonl"


def output_name(path: str) -> str:
    """The file name of the predictions of input ``path`` (``python -m xlnet_tf.cli.predict``)."""
    return os.path.basename(path) + OUTPUT_SUFFIX


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
