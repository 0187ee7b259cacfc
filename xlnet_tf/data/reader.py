"""tf.data input of XLNet pretraining: TFRecords written by ``create_pretraining_data`` -> per-replica batches.

Stream order is what Transformer-XL memory needs, so nothing is shuffled: records are read in manifest order
(shards in stream order, records in host-batch order), and the ``bsz_per_host`` records of a host batch are
consecutive, core by core. Use with ``strategy.distribute_datasets_from_function``::

    def dataset_fn(ctx):
        return pretrain_dataset(data_dir, ctx.get_per_replica_batch_size(global_batch), seq_len=512,
                                reuse_len=256, perm_size=256, num_predict=85, bi_data=True, input_context=ctx,
                                objective=objectives.get_objective("plm"))

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
stateless random ops seeded by ``(seed, batch index)``: the same seed gives the same batches. ``objective`` (an
``xlnet_tf.objectives.Objective``: its ``make_batch``) builds the model inputs from the records: XLNet's
permutation LM (``plm``), UniLMv2's pseudo-masked LM (``pmlm``) or MPNet (``mpnet``); the last two draw their
masked spans online too, so the same records serve every objective. The reader is handed the objective, and does
not look one up: objectives build on this package (``data.factorization``), not the other way round.
"""

from __future__ import annotations

import random
from typing import Optional

import tensorflow as tf

from xlnet_tf.data.batch_shape import BatchShape
from xlnet_tf.data.manifest import check_manifest, load_manifest
from xlnet_tf.errors import InputError

__all__ = ["pretrain_dataset", "load_manifest", "check_manifest"]


def pretrain_dataset(data_dir: str, per_replica_batch_size: int, seq_len: int, reuse_len: int, perm_size: int,
                     num_predict: int, bi_data: bool, input_context: Optional[tf.distribute.InputContext] = None,
                     seed: Optional[int] = None, repeat: bool = True, split: str = "train",
                     skip_batches: int = 0, perm_mask_dtype=tf.float32, *, objective) -> tf.data.Dataset:
    """Per-replica batches of dicts: ``input_ids`` int32 [B,L], ``segment_ids`` int32 [B,L], ``perm_mask``
    float32 [B,L,L] (1 = may not attend), ``target_mapping`` float32 [B,P,L], ``target`` int32 [B,P],
    ``target_mask`` float32 [B,P]; static shapes, ``B = per_replica_batch_size``: the inputs of XLNet's ``objective``
    (``xlnet_tf.objectives.get_objective("plm")``; the objective itself, not its name). Other objectives: the
    inputs of their ``make_batch`` (``xlnet_tf.objectives.pmlm`` / ``mpnet``: ``reuse_len``, ``perm_size`` and
    ``num_predict`` are then not used, nor checked against the data).

    ``perm_mask_dtype``: float32 by default; ``tf.bool`` or ``tf.uint8`` makes the largest tensor 4x smaller to
    build and to copy to the accelerator (the model only tests ``perm_mask > 0``); run_pretrain.py reads uint8
    (``xlnet_tf.training.pretraining.PERM_MASK_WIRE_DTYPE``).

    ``skip_batches``: per-replica batches of this pipeline already consumed (resuming at a training step:
    ``step * replicas_per_worker * grad_accum_steps``). Whole files are skipped by their manifest record counts,
    and example indices continue where they were, so a resumed run sees exactly the batches, masks included,
    that an uninterrupted run would have seen.

    Raises ValueError when the data was written with other settings (see ``check_manifest``) or when the batch
    size / replica count does not split host batches into whole cores.
    """
    if isinstance(objective, str):
        raise TypeError(f"pretrain_dataset: objective={objective!r} is a name; pass the objective "
                        f"(xlnet_tf.objectives.get_objective({objective!r}))")
    shape = BatchShape(seq_len, reuse_len, perm_size, num_predict)
    errors = objective.shape_errors(shape)
    if errors:
        raise InputError("pretraining input settings:\n  " + "\n  ".join(errors))
    manifest = load_manifest(data_dir, split)
    # Besides seq_len and bi_data, the data-writing settings the objective's batches depend on (plm: reuse_len,
    # num_predict); None is not checked.
    fields = dict(seq_len=seq_len, reuse_len=None, num_predict=None, bi_data=bi_data)
    check_manifest(manifest, **{**fields, **objective.record_fields(shape)})
    params = manifest["params"]
    bsz_per_core = params["bsz_per_host"] // params["num_core_per_host"]
    if per_replica_batch_size != bsz_per_core:
        raise InputError(f"per_replica_batch_size={per_replica_batch_size}, but the data holds host batches of "
                         f"bsz_per_host={params['bsz_per_host']} for num_core_per_host="
                         f"{params['num_core_per_host']} cores, i.e. {bsz_per_core} rows per replica; rewrite the "
                         "data with --bsz_per_host and --num_core_per_host matching training")
    pipeline_id, num_pipelines = 0, 1
    if input_context is not None:
        pipeline_id, num_pipelines = input_context.input_pipeline_id, input_context.num_input_pipelines
        replicas_per_worker = input_context.num_replicas_in_sync // num_pipelines
        if replicas_per_worker != params["num_core_per_host"]:
            raise InputError(f"each input pipeline feeds {replicas_per_worker} replicas, but the data was written "
                             f"with num_core_per_host={params['num_core_per_host']}: replicas would receive other "
                             "cores' rows and break the memory stream; rewrite the data with "
                             f"--num_core_per_host={replicas_per_worker}")

    shards = [s for s in manifest["shards"] if s["num_records"] > 0]
    if len(shards) < num_pipelines:
        batches = sum(s["num_batches"] for s in shards)
        fix = (f"`python -m xlnet_tf.cli.create_data` with --batches_per_shard={batches // num_pipelines} or less"
               if batches >= num_pipelines else "more text (or a smaller batch size)")
        raise InputError(f"{data_dir}: {len(shards)} non-empty shards ({batches} host batches) for {num_pipelines} "
                         f"input pipelines, each of which reads shards of its own: write the data again with {fix}")
    # Contiguous blocks of shards per pipeline (as the original's per-host file ranges): each pipeline's stream
    # stays consecutive within its block.
    lo = pipeline_id * len(shards) // num_pipelines
    hi = (pipeline_id + 1) * len(shards) // num_pipelines
    mine = shards[lo:hi]
    files = [s["path"] for s in mine]
    if skip_batches < 0:
        raise ValueError(f"skip_batches={skip_batches} must be >= 0")

    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    feature_spec = {
        "input": tf.io.FixedLenFeature([seq_len], tf.int64),
        "is_masked": tf.io.FixedLenFeature([seq_len], tf.int64),
        "seg_id": tf.io.FixedLenFeature([seq_len], tf.int64),
    }

    def parse(index, records):
        ex = tf.io.parse_example(records, feature_spec)
        # One stateless seed per (seed, pipeline, batch index): reproducible, and new orders every time a record
        # is read again once the dataset repeats (the index keeps growing).
        batch_seed = tf.stack([tf.constant(seed, tf.int64), index * num_pipelines + pipeline_id])
        out = objective.make_batch(ex, shape, batch_seed, params["vocab_size"], perm_mask_dtype)
        return {k: tf.ensure_shape(v, [per_replica_batch_size] + v.shape[1:]) for k, v in out.items()}

    def records(paths):
        return tf.data.TFRecordDataset(paths, buffer_size=8 << 20)  # one file after the other: stream order

    skip = skip_batches * per_replica_batch_size
    per_epoch = sum(s["num_records"] for s in mine)
    within = skip % per_epoch if repeat else min(skip, per_epoch)
    first_file = 0
    while first_file < len(mine) and within >= mine[first_file]["num_records"]:
        within -= mine[first_file]["num_records"]
        first_file += 1
    ds = records(files[first_file:]).skip(within) if first_file < len(files) else records(files[:1]).take(0)
    if repeat:
        ds = ds.concatenate(records(files).repeat())
    # Batch the serialized records first: parsing and the masks run as a few large vectorised ops per batch
    # rather than many small ops per example. Shards hold whole host batches, so batches never straddle files.
    ds = ds.batch(per_replica_batch_size, drop_remainder=True).enumerate(start=skip_batches)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
