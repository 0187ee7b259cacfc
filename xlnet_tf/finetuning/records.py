"""Encoded-feature caches (TFRecords, as the original ``file_based_convert_examples_to_features``), the
left-padded XLNet input layout shared by the classifier and RACE. TensorFlow is imported where records are read
or written, so the task definitions (and flag checks) load without it."""

from __future__ import annotations

import json
import os
from typing import Callable, Iterable, Optional

import numpy as np
from absl import logging

from xlnet_tf import io_utils
from xlnet_tf.io_utils import atomic_path, write_json_atomic
from xlnet_tf.progress_lines import Progress
from xlnet_tf.tokenization import CLS_ID, SEG_ID_A, SEG_ID_B, SEG_ID_CLS, SEG_ID_PAD, SEP_ID, file_sha256
from xlnet_tf.errors import InputError


def pack_sequence(tokens_a: list[int], tokens_b: Optional[list[int]], max_seq_length: int):
    """``A <sep> [B <sep>] <cls>`` left-padded to ``max_seq_length`` with id 0: returns (input_ids,
    segment_ids, padding_mask) with segments A=0 (incl. its sep), B=1 (incl. its sep), CLS=2, PAD=4 and
    padding_mask 1 = real token. The caller has already truncated A and B to fit."""
    ids = list(tokens_a) + [SEP_ID]
    segs = [SEG_ID_A] * len(ids)
    if tokens_b is not None:
        ids += list(tokens_b) + [SEP_ID]
        segs += [SEG_ID_B] * (len(tokens_b) + 1)
    ids.append(CLS_ID)
    segs.append(SEG_ID_CLS)
    pad = max_seq_length - len(ids)
    if pad < 0:
        raise ValueError(f"sequence of {len(ids)} tokens exceeds max_seq_length={max_seq_length}")
    return ([0] * pad + ids, [SEG_ID_PAD] * pad + segs, [0.0] * pad + [1.0] * len(ids))


def dummy_sequence(max_seq_length: int):
    """A padding example (the original's ``PaddingInputExample``): ``<sep> <cls>``; excluded from metrics."""
    return pack_sequence([], None, max_seq_length)


def _feature(tf, values: np.ndarray):
    values = np.asarray(values).reshape(-1)
    if values.dtype.kind == "f":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values.tolist()))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values.astype(np.int64).tolist()))


def write_records(path: str, features: Iterable[dict], meta: dict) -> dict:
    """Writes feature dicts (numpy-compatible values) as tf.train.Examples to ``path`` and ``meta`` (plus
    ``num_records``) to ``path + '.json'``, each atomically. Returns the meta written."""
    import tensorflow as tf

    count = 0
    with atomic_path(path) as tmp:
        with tf.io.TFRecordWriter(tmp) as writer:
            for feature in features:
                writer.write(io_utils.example_bytes(tf, {k: _feature(tf, v) for k, v in feature.items()}))
                count += 1
    meta = dict(meta, num_records=count)
    write_json_atomic(path + ".json", meta)
    return meta


def file_identity(path: str) -> list:
    """[absolute path, size, SHA-256] of ``path``, or of every file below it if it is a directory: the input of a
    feature cache, for every task family. A name, size and modification time were not enough: another --data_dir
    holding a file of that name and size (``cp -p``, ``rsync -t``, relabelled data) was served the first one's
    features. The hash streams the file: 0.08 s for 135 MB in the page cache (2 AMD EPYC cores)."""
    if io_utils.isdir(path):
        files = sorted(io_utils.join(d, name) for d, _, names in io_utils.walk(path) for name in names)
    else:
        files = [path] if io_utils.exists(path) else []
    return [[io_utils.abspath(f), io_utils.getsize(f), file_sha256(f)] for f in files]


def _load_meta(path: str, keys: tuple) -> tuple[Optional[dict], str]:
    """``(meta, "")`` of the cache at ``path``, or ``(None, what is wrong with path + '.json')``."""
    try:
        with io_utils.open(path + ".json", encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, UnicodeDecodeError
        return None, " ".join(str(e).split())
    if not isinstance(meta, dict):
        return None, f"a JSON {type(meta).__name__}, not an object"
    missing = [k for k in keys if k not in meta]
    return (None, f"no {', '.join(map(repr, missing))}") if missing else (meta, "")


def read_meta(path: str, *keys: str) -> dict:
    """The metadata of the cache at ``path`` (``path + '.json'``, as ``write_records`` writes it), holding ``keys``;
    one ``InputError`` for a missing, damaged or incomplete one, naming it and asking for --overwrite_data."""
    meta, problem = _load_meta(path, keys)
    if problem:
        raise InputError(f"{path}.json: unreadable cache metadata ({problem}); rerun with --overwrite_data")
    return meta


def differences(meta: dict, expected: dict) -> dict:
    """The settings of ``expected`` a cache's ``meta`` was written with otherwise: name -> (cached, now)."""
    return {k: (meta.get(k), v) for k, v in expected.items() if meta.get(k) != v}


def cached_meta(path: str, expected: dict) -> Optional[dict]:
    """The meta of a cache at ``path`` if it exists and was written with ``expected`` settings; None if there is
    no cache, or if it is one to write again (logged): unreadable metadata, another ``cache_version`` (the layout
    of a cache written by another version of xlnet_tf, never to be misread) or input files changed since
    (``expected['inputs']``); ``InputError`` (asking for --overwrite_data) if it was written with different
    settings."""
    if not (io_utils.exists(path) and io_utils.exists(path + ".json")):
        return None
    meta, problem = _load_meta(path, ())
    if problem:
        logging.warning("%s.json: unreadable cache metadata (%s); encoding the features again", path, problem)
        return None
    if "cache_version" in expected and meta.get("cache_version") != expected["cache_version"]:
        logging.warning("%s: cached in another format (version %s, now %s); encoding the features again", path,
                        meta.get("cache_version"), expected["cache_version"])
        return None
    if "inputs" in expected and meta.get("inputs") != expected["inputs"]:
        logging.warning("%s: cached from other input files (another path, or content changed since); encoding "
                        "the features again", path)
        return None
    diff = differences(meta, expected)
    if diff:
        raise InputError(f"{path}: cached features were written with different settings "
                         f"({', '.join(f'{k}: cached {a!r} != now {b!r}' for k, (a, b) in diff.items())}); "
                         "rerun with --overwrite_data")
    return meta


def cache_features(path: str, expected: dict, overwrite: bool,
                   encode: Callable[[], tuple[dict, Iterable[tuple[dict, bool]]]]) -> tuple[str, dict]:
    """The encoded-feature cache at ``path``: reused if it was written with the ``expected`` settings (unless
    ``overwrite``), else written from ``encode() -> (meta, rows)``, each row a (feature dict, was truncated)
    pair. Returns (path, meta): ``expected``, ``meta``, ``num_records`` and ``num_truncated``."""
    if not overwrite:
        meta = cached_meta(path, expected)
        if meta is not None:
            logging.info("using cached features %s (%d examples)", path, meta["num_examples"])
            return path, meta
    for stale in (path, path + ".json"):  # a failed encoding below must not leave an outdated cache behind
        io_utils.remove(stale)
    meta, rows = encode()
    if not meta["num_examples"]:
        skipped = meta.get("skipped", [])
        raise InputError(f"{meta.get('source', path)}: no usable examples ({meta.get('num_skipped', 0)} rows "
                         f"skipped{', e.g. ' + '; '.join(skipped[:3]) if skipped else ''})")
    truncated = 0
    # Every cache is written here: the classifier's 504,000 rows took 23 s, a 20 MB CoNLL file 19 s, in silence.
    progress = Progress(f"encoding {os.path.basename(path)}", meta["num_examples"])

    def features():
        nonlocal truncated
        for feature, cut in rows:
            truncated += cut
            progress.advance()
            yield feature

    meta = write_records(path, features(), dict(expected, **meta, num_truncated=0))
    meta["num_truncated"] = truncated
    write_json_atomic(path + ".json", meta)
    if truncated:
        logging.info("%s: %d of %d examples truncated to their maximum length", path, truncated,
                     meta["num_examples"])
    return path, meta


def parse_fn(spec: dict):
    """A tf.data map function from ``{name: (shape, tf.dtype)}``; int64 columns come out int32."""
    import tensorflow as tf

    description = {k: tf.io.FixedLenFeature(shape, tf.float32 if dtype.is_floating else tf.int64)
                   for k, (shape, dtype) in spec.items()}

    def parse(record):
        example = tf.io.parse_single_example(record, description)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}
    return parse


def eval_dataset(path: str, spec: dict, dummy: dict, num_records: int, global_batch_size: int) -> tf.data.Dataset:
    """The cached records in order, padded with ``dummy`` (is_real_example=0) to a multiple of the global
    batch, so every replica gets full batches; the dummies are dropped before metrics."""
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(path).map(parse_fn(spec))
    pad = -num_records % global_batch_size
    if pad or num_records == 0:
        pad = pad or global_batch_size
        dummy_ds = tf.data.Dataset.from_tensors({k: tf.constant(v) for k, v in dummy.items()}).repeat(pad)
        ds = ds.concatenate(dummy_ds)
    return ds.batch(global_batch_size, drop_remainder=True)


def pipeline_position(input_context, per_replica_batch: int, start_step: int) -> tuple[int, int, int]:
    """``(pipeline_id, num_pipelines, records)``: this input pipeline of ``input_context`` (None: the only one)
    and how many of its training records ``start_step`` optimizer steps consumed (the strategy hands a
    pipeline's consecutive per-replica batches to its replicas in turn)."""
    if input_context is None:
        return 0, 1, start_step * per_replica_batch
    pipelines = input_context.num_input_pipelines
    replicas = input_context.num_replicas_in_sync // pipelines
    return input_context.input_pipeline_id, pipelines, start_step * replicas * per_replica_batch


def shuffled_epochs(records: tf.data.Dataset, num_records: int, window: int, seed: int, skip: int = 0,
                    pipeline_id: int = 0) -> tf.data.Dataset:
    """``records`` (one epoch of one input pipeline's ``num_records`` serialized examples, in a fixed order)
    repeated forever, each epoch shuffled within consecutive windows of ``window`` records, starting after the
    first ``skip`` records of that stream.

    Why windows rather than ``Dataset.shuffle``: the order is a pure function of (seed, pipeline, epoch,
    position). Window ``w`` of epoch ``e`` is permuted with the stateless seed fold_in(fold_in((seed,
    pipeline), e), w), so a resumed run reaches its position by reading (not parsing) at most one epoch, holds
    no shuffle state of its own and checkpoints none (a shuffle buffer would go into every checkpoint, and
    tf.distribute's iterators cannot be checkpointed at all: bench/reports/finetune_resume.md). Each epoch has a
    new order; records move only within their window, as far as a ``window``-record shuffle buffer moves them."""
    import tensorflow as tf

    if num_records < 1:
        raise ValueError(f"input pipeline {pipeline_id} has no training records")
    window = max(1, min(window, num_records))
    first_epoch, within = divmod(skip, num_records)
    first_window, within = divmod(within, window)
    base = tf.constant([seed, pipeline_id], tf.int64)

    def epoch(index, start_window=0):
        key = tf.random.experimental.stateless_fold_in(base, tf.cast(index, tf.int64))

        def permute(i, block):
            return tf.random.experimental.stateless_shuffle(block, tf.random.experimental.stateless_fold_in(key, i))

        blocks = records.skip(start_window * window).batch(window).enumerate(start=start_window)
        return blocks.map(permute).unbatch()

    later = tf.data.Dataset.range(first_epoch + 1, 2**62).flat_map(epoch)
    return epoch(first_epoch, first_window).concatenate(later).skip(within)


def train_dataset(path: str, spec: dict, input_context: tf.distribute.InputContext, per_replica_batch: int,
                  shuffle_buffer: int, seed: int, num_records: int, start_step: int = 0) -> tf.data.Dataset:
    """Shuffled, repeated per-replica batches of the ``num_records`` records at ``path``, sharded across input
    pipelines, from the batch optimizer step ``start_step`` takes on (``shuffled_epochs``: a resumed run
    continues the uninterrupted run's order)."""
    import tensorflow as tf

    pipeline, pipelines, skip = pipeline_position(input_context, per_replica_batch, start_step)
    ds = tf.data.TFRecordDataset(path)
    if pipelines > 1:
        ds = ds.shard(pipelines, pipeline)
    ds = shuffled_epochs(ds, len(range(pipeline, num_records, pipelines)), shuffle_buffer, seed, skip, pipeline)
    ds = ds.map(parse_fn(spec), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(per_replica_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
