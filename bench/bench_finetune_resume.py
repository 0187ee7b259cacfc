"""What exact fine-tuning resume costs: the time a resumed run's input pipeline takes to reach its position, and
what the checkpoint holds for it, against saving the tf.data iterator (shuffle buffer and all) instead.

    .venv/bin/python bench/bench_finetune_resume.py [--records=100000] [--seq=128] [--batch=32]

Writes ``--records`` synthetic classifier records (the classifier's feature layout, ``--seq`` tokens) to a
temporary directory, then prints: seconds to the first batch of ``records.train_dataset`` at step 0 and at the
worst position (the last batch of an epoch: the pipeline reads, without parsing, almost a whole epoch), the bytes
the data order adds to a checkpoint, and the size of a ``tf.train.Checkpoint`` of the iterator of the same
records through ``Dataset.shuffle(2048)`` (the alternative: the shuffle buffer is saved with every checkpoint).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from xlnet_tf.finetuning import records  # noqa: E402


def write(path: str, count: int, seq: int) -> dict:
    rng = np.random.default_rng(0)
    spec = {"input_ids": ([seq], tf.int32), "segment_ids": ([seq], tf.int32), "padding_mask": ([seq], tf.float32),
            "label": ([], tf.int32), "is_real_example": ([], tf.int32), "example_index": ([], tf.int32)}

    def features():
        for i in range(count):
            yield dict(input_ids=rng.integers(5, 32000, seq), segment_ids=np.zeros(seq, np.int64),
                       padding_mask=np.ones(seq, np.float32), label=[i % 3], is_real_example=[1], example_index=[i])
    records.write_records(path, features(), {})
    return spec


def first_batch_seconds(path, spec, count, batch, step, buffer) -> float:
    start = time.perf_counter()
    next(iter(records.train_dataset(path, spec, None, batch, buffer, 0, count, step)))
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--shuffle_buffer", type=int, default=2048)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp()
    try:
        path = os.path.join(tmp, "train.tf_record")
        start = time.perf_counter()
        spec = write(path, args.records, args.seq)
        print(f"wrote {args.records} records of seq {args.seq} ({os.path.getsize(path) / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - start:.0f} s")
        per_epoch = args.records // args.batch
        for name, step in (("step 0", 0), (f"step {per_epoch - 1} (last batch of epoch 1)", per_epoch - 1),
                           (f"step {3 * per_epoch} (start of epoch 4)", 3 * per_epoch)):
            seconds = min(first_batch_seconds(path, spec, args.records, args.batch, step, args.shuffle_buffer)
                          for _ in range(2))
            print(f"first batch at {name}: {seconds:.2f} s")
        # What a checkpoint holds is the trainer's own data order (setup.keep_data_order writes it as this JSON),
        # not a copy of its keys typed here: it gained the update settings (adam_bias_correction) since.
        from xlnet_tf.finetuning.trainer import data_order
        from xlnet_tf.tasks.task_settings import ClassifierSettings

        settings = ClassifierSettings(task_name="sst-2", seed=0, shuffle_buffer=args.shuffle_buffer,
                                      train_batch_size=args.batch)
        order = json.dumps(data_order(settings, tf.distribute.get_strategy()), sort_keys=True)
        print(f"data order in each checkpoint: {len(order)} bytes (one string variable)")

        ds = tf.data.TFRecordDataset(path).shuffle(args.shuffle_buffer, seed=0).repeat()
        ds = ds.map(records.parse_fn(spec)).batch(args.batch, drop_remainder=True).prefetch(2)
        iterator = iter(ds)
        for _ in range(10):
            next(iterator)
        prefix = tf.train.Checkpoint(iterator=iterator).write(os.path.join(tmp, "iterator", "ckpt"))
        size = sum(os.path.getsize(os.path.join(tmp, "iterator", f)) for f in os.listdir(os.path.join(tmp, "iterator")))
        print(f"tf.data iterator checkpoint (shuffle({args.shuffle_buffer}) + prefetch(2)): {size / 2**20:.1f} MiB "
              f"({prefix})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
