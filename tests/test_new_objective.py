"""A new pretraining objective is one module and one registry line: a toy objective defined in this file alone
(a BERT-style masked LM on the content stream) trains through the real ``pretrain`` on real text, has its FLOPs
counted by ``flops.py``, and is checked by the settings, with no edit anywhere else."""

import glob
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from pretraining_helpers import scalars
from xlnet_tf.checkpoint import pretraining_objective
from xlnet_tf.config import XLNetConfig
from xlnet_tf.flops import train_flops_per_sequence
from xlnet_tf.objectives import OBJECTIVES, BatchShape, Objective, StreamLayout, get_objective, register
from xlnet_tf.tokenization import CLS_ID, MASK_ID, SEP_ID
from xlnet_tf.training.pretraining import pretrain
from xlnet_tf.training.settings import PretrainSettings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------ the module a new objective is


class ContentMaskedLM(Objective):
    """BERT's masked LM on XLNet's content stream: the writer's first ``num_predict`` targets of a sequence are
    replaced by ``<mask>`` and predicted from the content stream's rows (``lm_positions``); no query stream."""

    name = "toy_mlm"
    description = "a masked LM on the content stream"
    model_inputs = ("input_ids", "segment_ids", "lm_positions")
    loss_terms = ("mlm",)

    def record_fields(self, shape):
        return dict(num_predict=shape.num_predict)  # the writer's targets are read: as many as it wrote

    def make_batch(self, records, shape, seed, vocab_size, perm_mask_dtype="float32"):
        ids = tf.cast(records["input"], tf.int32)
        functional = tf.equal(ids, SEP_ID) | tf.equal(ids, CLS_ID)
        masked = tf.cast(records["is_masked"], tf.bool) & tf.logical_not(functional)
        # The first num_predict targets in position order (unmasked positions sort after every masked one).
        order = tf.range(shape.seq_len)[None, :]
        positions = tf.argsort(tf.where(masked, order, order + shape.seq_len), axis=1)[:, :shape.num_predict]
        valid = tf.gather(masked, positions, batch_dims=1)
        chosen = tf.reduce_any(tf.equal(positions[:, :, None], order[:, None, :]) & valid[:, :, None], axis=1)
        return {
            "input_ids": tf.where(chosen, MASK_ID, ids),
            "segment_ids": tf.cast(records["seg_id"], tf.int32),
            "lm_positions": positions,
            "target": tf.where(valid, tf.gather(ids, positions, batch_dims=1), 0),
            "target_mask": tf.cast(valid, tf.float32),
        }

    def stream_layout(self, seq_len, num_predict):
        return StreamLayout(content=seq_len, query=0, head_rows=num_predict, query_keys=False)


@pytest.fixture
def toy_objective():
    objective = register(ContentMaskedLM())  # the one registry line
    yield objective
    OBJECTIVES.unregister(objective.name)  # (the other tests see the package's objectives only)


# ------------------------------------------------------------------------------------------------- its tests


def test_the_toy_batch_masks_the_writers_targets(toy_objective):
    ids = np.array([[10, 11, 12, SEP_ID, 13, 14, SEP_ID, CLS_ID]])
    is_masked = np.array([[0, 1, 0, 1, 1, 1, 0, 1]])  # <sep>/<cls> are never targets
    records = {"input": tf.constant(ids), "is_masked": tf.constant(is_masked), "seg_id": tf.zeros_like(ids)}
    batch = get_objective("toy_mlm").make_batch(records, BatchShape(8, 4, 4, 4), tf.constant([0, 0]), 100)
    np.testing.assert_array_equal(batch["lm_positions"][0, :3], [1, 4, 5])
    np.testing.assert_array_equal(batch["target"][0], [11, 13, 14, 0])
    np.testing.assert_array_equal(batch["target_mask"][0], [1, 1, 1, 0])
    np.testing.assert_array_equal(batch["input_ids"][0], [10, MASK_ID, 12, SEP_ID, MASK_ID, MASK_ID, SEP_ID, CLS_ID])


def test_the_toy_objective_pretrains_through_the_real_trainer(tmp_path, toy_objective):
    corpus = tmp_path / "text.txt"
    with open(os.path.join(REPO, "data", "corpus", "brown_sample.txt"), encoding="utf-8") as f:
        corpus.write_text("".join(f.readlines()[:400]), encoding="utf-8")
    common = dict(objective="toy_mlm", model_config_path=os.path.join(REPO, "configs", "tiny.json"),
                  spiece_model_file=os.path.join(REPO, "data", "spiece.model"), input_glob=str(corpus),
                  data_dir=str(tmp_path / "data"), model_dir=str(tmp_path / "model"), train_batch_size=8,
                  seq_len=32, reuse_len=16, num_predict=5, train_steps=30, iterations=10, learning_rate=3e-3,
                  warmup_steps=3)
    # The settings know it (before TensorFlow's work): memory is refused as for every objective without it.
    with pytest.raises(ValueError, match="--objective=toy_mlm has no Transformer-XL memory"):
        PretrainSettings(**common, mem_len=8).validate()

    metrics = pretrain(PretrainSettings(**common))
    assert metrics["step"] == 30 and math.isfinite(metrics["loss"])
    assert 0 <= metrics["accuracy"] <= 1  # its one loss term's metric
    logged = scalars(str(tmp_path / "model"))
    first, last = logged["loss"][0][1], logged["loss"][-1][1]
    assert last < first - 0.2, (first, last)  # the content stream's rows at lm_positions learn
    assert pretraining_objective(str(tmp_path / "model")) == "toy_mlm"  # recorded in the checkpoint


def test_flops_count_the_toy_objectives_streams(toy_objective):
    c = XLNetConfig.from_json(os.path.join(REPO, "configs", "tiny.json"))
    n, d, f, v = c.n_layer, c.d_model, c.d_inner, c.n_token
    seq_len, predict, batch = 32, 5, 8
    got = train_flops_per_sequence(n, d, f, seq_len, 0, predict, v, batch, objective="toy_mlm")
    # The content stream alone (K = L keys, R = 2L position rows, projected once per batch), the LM head on the
    # predicted rows only, which a one-hot matmul picks from the L rows (lm_positions); the position encodings and
    # the one-hot have no gradient.
    s, r = seq_len, 2 * seq_len
    position = 2 * r * d * d / batch
    layer = 8 * s * d * d + 4 * s * d * f + 2 * s * s * d + 2 * s * r * d + 2 * s * s * d + position
    pick = 2 * predict * s * d
    assert got == 3 * (n * layer + 2 * predict * d * v + pick) - n * position - pick
    # Not XLNet's count on the same shape (a query stream, and a last layer whose content stream no head reads).
    assert got != train_flops_per_sequence(n, d, f, seq_len, 0, predict, v, batch, objective="plm")


def test_an_objective_missing_a_hook_is_refused_when_registered():
    class NoLayout(Objective):
        name, model_inputs, loss_terms = "no_layout", ("input_ids",), ("mlm",)

        def make_batch(self, records, shape, seed, vocab_size, perm_mask_dtype="float32"):
            return {}

    with pytest.raises(ValueError, match="NoLayout does not implement stream_layout"):
        register(NoLayout)

    class NoTerms(NoLayout):
        loss_terms = ()

        def stream_layout(self, seq_len, num_predict):
            return StreamLayout(seq_len, 0, num_predict, False)

    with pytest.raises(ValueError, match="NoTerms sets no loss_terms"):
        register(NoTerms)
    assert "no_layout" not in OBJECTIVES


def test_a_name_is_registered_once():
    """Another class under a taken name is refused; the same class again (its module imported twice) replaces."""
    pmlm = type(OBJECTIVES["pmlm"])

    class Impostor(pmlm):
        pass

    with pytest.raises(ValueError, match="the objective name 'pmlm' is taken by xlnet_tf.objectives.pmlm.PseudoMaske"):
        register(Impostor())
    assert type(OBJECTIVES["pmlm"]) is pmlm
    register(pmlm())
    assert type(OBJECTIVES["pmlm"]) is pmlm and list(OBJECTIVES)[:3] == ["plm", "pmlm", "mpnet"]


def test_no_code_outside_an_objectives_module_tests_objective_names():
    """The reader, the trainer, flops.py, the settings and the command line ask the registry instead."""
    comparison = re.compile(r"""objective\w*\)?(\.name)?\s*(==|!=|\bin\b)\s*[(\['"]""")
    paths = sorted(glob.glob(os.path.join(REPO, "xlnet_tf", "**", "*.py"), recursive=True))
    paths += sorted(glob.glob(os.path.join(REPO, "run_*.py")))
    found = []
    for path in paths:
        if os.path.join("xlnet_tf", "objectives", "") in path:
            continue
        with open(path, encoding="utf-8") as f:
            found += [f"{path}:{i}: {line.strip()}" for i, line in enumerate(f, 1) if comparison.search(line)]
    assert len(paths) > 50 and not found, "\n".join(found)
