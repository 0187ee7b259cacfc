"""Shared by the classifier/RACE tests: a very small model config and run_classifier settings."""

import json
import os
import shutil

from background import run_function
from xlnet_tf.tasks.task_settings import ClassifierSettings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
SPIECE = os.path.join(REPO, "data", "spiece.model")

# task -> (fixture dir, train, dev, test examples)
FIXTURE_TASKS = {
    "cola": ("CoLA", 8, 6, 5), "sst-2": ("SST-2", 8, 6, 5), "mrpc": ("MRPC", 8, 6, 5), "sts-b": ("STS-B", 8, 6, 5),
    "qqp": ("QQP", 8, 6, 5), "mnli_matched": ("MNLI", 9, 6, 5), "mnli_mismatched": ("MNLI", 9, 6, 5),
    "qnli": ("QNLI", 8, 6, 5), "rte": ("RTE", 8, 6, 5), "wnli": ("WNLI", 8, 6, 5), "imdb": ("IMDB", 8, 6, None),
    "yelp5": ("Yelp5", 10, 5, None),
}

MICRO_CONFIG = {"d_head": 8, "d_inner": 32, "d_model": 16, "ff_activation": "gelu", "n_head": 2, "n_layer": 1,
                "n_token": 8000, "untie_r": True}

# run_classifier.py's flag defaults (kept in sync by test_classifier_entry.py).
DEFAULTS = dict(
    config_file=None, strategy="one_device", tpu=None, use_tpu=False, num_hosts=1, num_core_per_host=None,
    dtype="float32", use_bfloat16=False, seed=0, model_config_path=None, dropout=0.1, dropatt=0.1, clamp_len=-1,
    summary_type="last", use_summ_proj=True, cls_scope=None, is_regression=False, long_document="truncate",
    max_segments=8, mem_len=None, task_name=None, task_module=None,
    data_dir=None,
    output_dir=None, overwrite_data=False, init_checkpoint=None, spiece_model_file=None, model_dir=None,
    predict_dir=None, export_dir=None, uncased=False, max_seq_length=128, max_qa_length=128, high_only=False,
    middle_only=False, shuffle_buffer=2048, do_train=False, do_eval=False, do_predict=False, eval_split="dev",
    eval_all_ckpt=False, predict_ckpt=None, predict_threshold=0, train_steps=1000, warmup_steps=0,
    learning_rate=1e-5, lr_layer_decay_rate=1.0, min_lr_ratio=0.0, clip=1.0, max_save=0, save_steps=None,
    iterations=1000, train_batch_size=8, eval_batch_size=128, predict_batch_size=128, weight_decay=0.0,
    adam_epsilon=1e-8, adam_bias_correction=True, decay_method="poly", jit_compile=False)


def micro_config(tmp_path):
    os.makedirs(str(tmp_path), exist_ok=True)
    path = os.path.join(str(tmp_path), "micro_config.json")
    with open(path, "w") as f:
        json.dump(MICRO_CONFIG, f)
    return path


def make_flags(tmp_path, **overrides) -> ClassifierSettings:
    values = dict(DEFAULTS, model_config_path=micro_config(tmp_path), spiece_model_file=SPIECE,
                  model_dir=os.path.join(str(tmp_path), "model"), max_seq_length=32, train_batch_size=4,
                  eval_batch_size=4, predict_batch_size=4, train_steps=2, iterations=2, learning_rate=1e-3,
                  dropout=0.0, dropatt=0.0)
    values.update(overrides)
    return ClassifierSettings.from_values(values)


def build_model(settings):
    """The task model of ``settings`` (random weights), built on its dummy features; and its task."""
    task = settings.family().task(settings)
    model = task.build_model()
    model({k: v[None] for k, v in task.dummy_features.items()}, training=False)
    return model, task


def write_release(folder) -> dict:
    """A release directory as the original ships it: xlnet_config.json (``MICRO_CONFIG``), xlnet_model.ckpt (TF1
    names) of a new micro network (its random weights) and spiece.model. Returns the checkpoint's tensors."""
    import numpy as np

    import xlnet_tf
    from xlnet_tf.checkpoint import write_tf1_checkpoint

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "xlnet_config.json"), "w") as f:
        json.dump(MICRO_CONFIG, f)
    shutil.copy(SPIECE, os.path.join(folder, "spiece.model"))
    network = xlnet_tf.XLNetModel(xlnet_tf.XLNetConfig.from_dict(MICRO_CONFIG))
    network({"input_ids": np.zeros((1, 4), np.int32), "segment_ids": np.zeros((1, 4), np.int32)})
    tensors = {name: v.numpy() for name, v in network.tf1_variables().items()}
    write_tf1_checkpoint(tensors, os.path.join(folder, "xlnet_model.ckpt"))
    return tensors


def _run(tmp_path, **overrides) -> dict:
    from xlnet_tf import runner

    return runner.run(make_flags(tmp_path, **overrides))


def run_in_a_process(tmp_path, **overrides) -> dict:
    """``runner.run(make_flags(tmp_path, **overrides))`` in a process of its own (a background resource's run:
    tests/background.py): its result, through JSON (numbers and paths)."""
    return run_function(_run, tmp_path, **overrides)
