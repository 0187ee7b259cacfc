"""Shared by the SQuAD tests: a small config, a batch in the head's layout (paragraph, question, CLS, padding), and
the run several files check (``squad_release``, made on the background thread: tests/background.py)."""

import os

import numpy as np

from background import resource, run_python
from classifier_helpers import FIXTURES, REPO, SPIECE
from xlnet_tf.config import XLNetConfig

SQUAD = os.path.join(FIXTURES, "squad")

SMALL = XLNetConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=8000, dropout=0.0, dropatt=0.0)


def inference_batch(seq=24, batch=3, seed=0):
    rng = np.random.default_rng(seed)
    p_mask = np.ones((batch, seq), np.float32)
    p_mask[:, :12] = 0
    p_mask[:, 20] = 0
    padding = np.ones((batch, seq), np.float32)
    padding[:, 21:] = 0
    return dict(input_ids=rng.integers(9, 8000, (batch, seq)).astype(np.int32),
                segment_ids=np.array([[0] * 13 + [1] * 7 + [2] + [3] * 3] * batch, np.int32),
                padding_mask=padding, p_mask=p_mask, cls_index=np.full([batch], 20, np.int32))


# The run's flags: the tiny model trained 2 steps on the SQuAD 2.0 fixture, --do_predict on its dev file, an export.
RELEASE_FLAGS = dict(
    model_config_path=os.path.join(REPO, "configs", "tiny.json"), spiece_model_file=SPIECE,
    train_file=os.path.join(SQUAD, "train-v2.0.json"), predict_file=os.path.join(SQUAD, "dev-v2.0.json"),
    do_train=True, do_predict=True, max_seq_length=64, max_query_length=16, doc_stride=24, max_answer_length=12,
    train_batch_size=8, iterations=2, train_steps=2, learning_rate=1e-3, predict_batch_size=16, dropout=0.0,
    dropatt=0.0, start_n_top=3, end_n_top=3)


# Where squad_release's export is, under its ``tmp_path``: an export's version is its checkpoint's step (2 here).
RELEASE_EXPORT = os.path.join("serving", "2")


@resource
def squad_release(tmp_path):
    """run_squad.py as a user runs it, with RELEASE_FLAGS and its directories under ``tmp_path``: model/,
    features/, predict/ and serving/ (a SQuAD export takes half a minute to write on 2 cores). A test module whose
    tests use conftest's ``squad_run`` imports this name (the background thread makes it when such a module is
    collected). Returns ``tmp_path``."""
    dirs = dict(model_dir="model", output_dir="features", predict_dir="predict", export_dir="serving")
    run_python("run_squad.py", *(f"--{name}={value}" for name, value in RELEASE_FLAGS.items()),
               *(f"--{name}={tmp_path / folder}" for name, folder in dirs.items()), cwd=REPO)
    return tmp_path
