"""One worker of the MultiWorkerMirroredStrategy tests (started per worker by test_multiworker.py with TF_CONFIG):
the tiny pretraining model with dropout on, so that a resumed run equals an uninterrupted one only if the dropout
seeds are restored too."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from xlnet_tf.cli.flags import import_tensorflow  # noqa: E402

import_tensorflow()  # as a tool's worker does (cli.run), ~4 s sooner than a plain import on 2 cores
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import logging  # noqa: E402

from pretraining_helpers import CONFIG, PREDICT, SEQ, make_dataset_fn, synthetic_examples  # noqa: E402
from xlnet_tf.errors import WorkerLostError  # noqa: E402
from xlnet_tf.training.distribute import create_strategy  # noqa: E402
from xlnet_tf.training.pretraining import run_pretraining  # noqa: E402
from xlnet_tf.training.settings import PretrainSettings  # noqa: E402


def main(model_dir, out_path, train_steps=3, iterations=3, save_steps=None):
    strategy = create_strategy("multi_worker")
    keras.utils.set_random_seed(0)
    settings = PretrainSettings(model_dir=model_dir, train_steps=train_steps,
                                train_batch_size=2 * strategy.num_replicas_in_sync, seq_len=SEQ, num_predict=PREDICT,
                                iterations=iterations, save_steps=save_steps, learning_rate=3e-3, warmup_steps=1,
                                # a constant rate after warmup: the runs of the resume test, endless until stopped,
                                # and the uninterrupted one (a fixed train_steps) follow the same schedule
                                min_lr_ratio=1.0)
    try:
        metrics = run_pretraining(strategy, CONFIG.replace(dropout=0.3, dropatt=0.3), settings,
                                  make_dataset_fn(synthetic_examples(32), 2))
    except WorkerLostError as e:  # what the entry points print as their one line
        print(f"error: {e}", flush=True)
        sys.exit(1)
    with open(out_path, "w") as f:
        json.dump({"step": metrics["step"], "loss": metrics["loss"], "replicas": strategy.num_replicas_in_sync,
                   "preempted": metrics.get("preempted", False), "stopped_by": metrics.get("stopped_by")}, f)


if __name__ == "__main__":
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.INFO)  # "resumed from ... at step N": the test reads it (a handful of lines)
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))
