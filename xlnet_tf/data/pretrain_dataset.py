"""tf.data input of XLNet pretraining: TFRecords written by ``create_pretraining_data`` -> per-replica batches.

Stream order is what Transformer-XL memory needs, so nothing is shuffled: records are read in manifest order
(shards in stream order, records in host-batch order), and the ``bsz_per_host`` records of a host batch are
consecutive, core by core. Use with ``strategy.distribute_datasets_from_function``::

    def dataset_fn(ctx):
        return pretrain_dataset(data_dir, ctx.get_per_replica_batch_size(global_batch), seq_len=512,
                                reuse_len=256, perm_size=256, num_predict=85, bi_data=True, input_context=ctx)

Each worker (input pipeline) reads a contiguous block of shards (``input_pipeline_id`` of
``num_input_pipelines``), and its per-replica batches are ``bsz_per_host / num_core_per_host`` records. The
strategy hands a worker's consecutive batches round-robin to its replicas, so with ``num_core_per_host``
replicas per worker replica c receives exactly core c's rows of every host batch: row r of step k+1 continues
row r of step k on the same replica, and its memory is the right context. With ``bi_data`` a replica's batch is
``[forward rows ; the same rows reversed]`` (first half forward, second half backward), which is the layout the
model's ``bi_data`` relative position encoding assumes. The data must therefore be written with
``--num_core_per_host`` equal to the number of replicas per worker; this is checked when ``input_context`` is
given.

Factorisation orders are sampled online (a new order every time a record is read, as the original), with
stateless random ops seeded by ``(seed, example index)``: the same seed gives the same batches.
"""

from __future__ import annotations

import random
from typing import Optional

import tensorflow as tf

from xlnet_tf.data.manifest import check_manifest, load_manifest
from xlnet_tf.data.permutation import make_pretraining_features

__all__ = ["pretrain_dataset", "load_manifest", "check_manifest"]


def validate_reader_settings(seq_len: int, reuse_len: int, perm_size: int, num_predict: int) -> None:
    """Raises ValueError naming the setting when the local permutation cannot be built."""
    errors = []
    new_len = seq_len - reuse_len
    if not 0 < reuse_len < seq_len:
        errors.append(f"reuse_len={reuse_len} must be in [1, seq_len={seq_len})")
    elif perm_size <= 0 or reuse_len % perm_size or new_len % perm_size:
        # The original asserted perm_size <= reuse_len and <= seq_len-reuse_len; its reshape also needs both
        # parts to be whole blocks.
        errors.append(f"perm_size={perm_size} must divide reuse_len={reuse_len} and seq_len-reuse_len={new_len}")
    if num_predict <= 0:
        errors.append(f"num_predict={num_predict} must be positive")
    if errors:
        raise ValueError("pretraining input settings:\n  " + "\n  ".join(errors))


def pretrain_dataset(data_dir: str, per_replica_batch_size: int, seq_len: int, reuse_len: int, perm_size: int,
                     num_predict: int, bi_data: bool, input_context: Optional[tf.distribute.InputContext] = None,
                     seed: Optional[int] = None, repeat: bool = True, split: str = "train") -> tf.data.Dataset:
    """Per-replica batches of dicts: ``input_ids`` int32 [B,L], ``segment_ids`` int32 [B,L], ``perm_mask``
    float32 [B,L,L] (1 = may not attend), ``target_mapping`` float32 [B,P,L], ``target`` int32 [B,P],
    ``target_mask`` float32 [B,P]; static shapes, ``B = per_replica_batch_size``.

    Raises ValueError when the data was written with other settings (see ``check_manifest``) or when the batch
    size / replica count does not split host batches into whole cores.
    """
    validate_reader_settings(seq_len, reuse_len, perm_size, num_predict)
    manifest = load_manifest(data_dir, split)
    check_manifest(manifest, seq_len=seq_len, reuse_len=reuse_len, num_predict=num_predict, bi_data=bi_data)
    params = manifest["params"]
    bsz_per_core = params["bsz_per_host"] // params["num_core_per_host"]
    if per_replica_batch_size != bsz_per_core:
        raise ValueError(f"per_replica_batch_size={per_replica_batch_size}, but the data holds host batches of "
                         f"bsz_per_host={params['bsz_per_host']} for num_core_per_host="
                         f"{params['num_core_per_host']} cores, i.e. {bsz_per_core} rows per replica; rewrite the "
                         "data with --bsz_per_host and --num_core_per_host matching training")
    pipeline_id, num_pipelines = 0, 1
    if input_context is not None:
        pipeline_id, num_pipelines = input_context.input_pipeline_id, input_context.num_input_pipelines
        replicas_per_worker = input_context.num_replicas_in_sync // num_pipelines
        if replicas_per_worker != params["num_core_per_host"]:
            raise ValueError(f"each input pipeline feeds {replicas_per_worker} replicas, but the data was written "
                             f"with num_core_per_host={params['num_core_per_host']}: replicas would receive other "
                             "cores' rows and break the memory stream; rewrite the data with "
                             f"--num_core_per_host={replicas_per_worker}")

    shards = [s for s in manifest["shards"] if s["num_records"] > 0]
    if len(shards) < num_pipelines:
        raise ValueError(f"{data_dir}: {len(shards)} non-empty shards for {num_pipelines} input pipelines; write "
                         "the data with a smaller --batches_per_shard")
    # Contiguous blocks of shards per pipeline (as the original's per-host file ranges): each pipeline's stream
    # stays consecutive within its block.
    lo = pipeline_id * len(shards) // num_pipelines
    hi = (pipeline_id + 1) * len(shards) // num_pipelines
    files = [s["path"] for s in shards[lo:hi]]

    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    feature_spec = {
        "input": tf.io.FixedLenFeature([seq_len], tf.int64),
        "is_masked": tf.io.FixedLenFeature([seq_len], tf.int64),
        "seg_id": tf.io.FixedLenFeature([seq_len], tf.int64),
    }

    def parse(index, record):
        ex = tf.io.parse_single_example(record, feature_spec)
        # One stateless seed per (seed, pipeline, example index): reproducible, and different for every read
        # of a record once the dataset repeats (the index keeps growing).
        example_seed = tf.stack([tf.constant(seed, tf.int64), index * num_pipelines + pipeline_id])
        return make_pretraining_features(ex["input"], ex["is_masked"], ex["seg_id"], seq_len, reuse_len,
                                         perm_size, num_predict, example_seed)

    ds = tf.data.TFRecordDataset(files, buffer_size=8 << 20)  # one file after the other: stream order
    if repeat:
        ds = ds.repeat()
    ds = ds.enumerate()
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.batch(per_replica_batch_size, drop_remainder=True)
    return ds.prefetch(tf.data.AUTOTUNE)
