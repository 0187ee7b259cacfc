"""Throughput of the pretraining data pipeline at the released settings.

    .venv/bin/python bench/bench_data.py [--corpus='/work/shared/data/corpus/*.txt'] [--read_batches=40]

Writes TFRecords (seq_len 512, reuse_len 256, num_predict 85, bi_data, bsz_per_host 32, 1 core) from the
corpus into a temporary directory, then reads them with ``pretrain_dataset`` (perm_size 256) and prints a table:
tokenisation tokens/s, writing records/s (end to end, including tokenisation; TensorFlow already loaded), and
reading examples/s (per-replica batches of 32 after a warm-up batch).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from xlnet_tf import io_utils  # noqa: E402
from xlnet_tf.data import writer as cpd  # noqa: E402
from xlnet_tf.data import examples as ex  # noqa: E402

SETTINGS = ex.ExampleSettings(seq_len=512, reuse_len=256, bsz_per_host=32, num_core_per_host=1, bi_data=True,
                              mask_alpha=6, mask_beta=1, num_predict=85)
PERM_SIZE = 256


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = "/work/shared/data/corpus/*.txt"
    parser.add_argument("--corpus", default=shared if glob.glob(shared) else os.path.join(ROOT, "data/corpus/*.txt"))
    parser.add_argument("--sp_path", default=os.path.join(ROOT, "data", "spiece.model"))
    parser.add_argument("--num_workers", type=int, default=1)
    parser.add_argument("--read_batches", type=int, default=40)
    parser.add_argument("--keep", default=None, help="write here and keep the data (default: a temp dir)")
    args = parser.parse_args()

    out = args.keep or tempfile.mkdtemp(prefix="bench_data-")
    try:
        files = io_utils.glob_files(args.corpus)
        size_mb = sum(os.path.getsize(f) for f in files) / 2**20
        tok = cpd.XLNetTokenizer(args.sp_path)
        t0 = time.perf_counter()
        num_tokens = sum(len(cpd.tokenize_file(f, tok, True, 200_000).tokens) for f in files)
        tok_s = time.perf_counter() - t0

        import tensorflow as tf  # loaded before timing the writer, as in a training process

        cfg = cpd.WriterConfig(input_glob=args.corpus, sp_path=args.sp_path, save_dir=out, settings=SETTINGS,
                               num_workers=args.num_workers, batches_per_shard=100)
        t0 = time.perf_counter()
        manifest = cpd.run(cfg)
        write_s = time.perf_counter() - t0
        records = manifest["num_records"]

        from xlnet_tf.data.reader import pretrain_dataset
        from xlnet_tf.objectives import get_objective

        def read_rate(perm_mask_dtype):
            it = iter(pretrain_dataset(out, 32, 512, 256, PERM_SIZE, 85, True, seed=0,
                                       perm_mask_dtype=perm_mask_dtype, objective=get_objective("plm")))
            next(it)  # warm-up: graph tracing and the first prefetch
            t0 = time.perf_counter()
            for _ in range(args.read_batches):
                batch = next(it)
            _ = batch["perm_mask"].numpy()
            return time.perf_counter() - t0

        read_s = read_rate(tf.float32)
        read_bool_s = read_rate(tf.bool)
        examples = args.read_batches * 32

        print(f"\ncorpus: {len(files)} files, {size_mb:.1f} MB, {num_tokens:,} tokens; settings: seq_len 512, "
              f"reuse_len 256, num_predict 85, perm_size {PERM_SIZE}, bi_data, bsz_per_host 32, 1 core; "
              f"{os.cpu_count()} CPUs, writer --num_workers={args.num_workers}, TF {tf.__version__}")
        print(f"{'stage':<34}{'amount':>14}{'seconds':>10}{'rate':>22}")
        print(f"{'tokenise (1 process)':<34}{num_tokens:>14,}{tok_s:>10.2f}{num_tokens / tok_s:>15,.0f} tok/s")
        print(f"{'write (tokenise + records)':<34}{records:>14,}{write_s:>10.2f}{records / write_s:>15,.0f} rec/s")
        rec_s = write_s - tok_s
        print(f"{'  of which records (write - tok)':<34}{records:>14,}{rec_s:>10.2f}{records / rec_s:>15,.0f} rec/s")
        print(f"{'read (perm_mask float32)':<34}{examples:>14,}{read_s:>10.2f}{examples / read_s:>15,.0f} ex/s")
        print(f"{'read (perm_mask bool)':<34}{examples:>14,}{read_bool_s:>10.2f}{examples / read_bool_s:>15,.0f} ex/s")
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
