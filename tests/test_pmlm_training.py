"""Pretraining with UniLMv2's and MPNet's objectives through the real loop: real text, resume, replicas, and
fine-tuning from their checkpoints."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from background import resource, run_function
from pretraining_helpers import absl_messages, assert_same_weights, scalars
from training_state import ROUND_OFF, stopped_at
from xlnet_tf import XLNetConfig, XLNetPretrainer
from xlnet_tf.checkpoint import load_pretrained, pretraining_objective
from xlnet_tf.objectives import BatchShape, get_objective
from xlnet_tf.training.distribute import create_strategy
from xlnet_tf.training.pretraining import pretrain, run_pretraining
from xlnet_tf.training.settings import PretrainSettings, SettingsError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, VOCAB = 24, 60
CONFIG = XLNetConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=VOCAB, dropout=0.1,
                     dropatt=0.1)


def synthetic_batches(objective, n=64):
    """n examples of ``objective``'s inputs, drawn once (so any batching of them is the same data)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(9, VOCAB, (n, SEQ))
    ids[:, -1] = 3  # <cls>
    seg = np.zeros((n, SEQ), np.int64)
    records = {"input": tf.constant(ids), "is_masked": tf.constant(ids > 40), "seg_id": tf.constant(seg)}
    return get_objective(objective).make_batch(records, BatchShape(SEQ, SEQ // 2, SEQ // 2, 4),
                                               tf.constant([1, 2], tf.int64), VOCAB)


def train(tmp_path, name, strategy, per_replica_batch, objective="pmlm", steps=4, config=CONFIG, **kwargs):
    keras.utils.set_random_seed(0)  # same initial weights in every run
    examples = synthetic_batches(objective)

    def dataset_fn(ctx, start_step):
        per_step = per_replica_batch * ctx.num_replicas_in_sync
        ds = tf.data.Dataset.from_tensor_slices(examples).repeat()
        return ds.skip(start_step * per_step).batch(per_replica_batch, drop_remainder=True)

    settings = PretrainSettings(model_dir=str(tmp_path / name), train_steps=steps, objective=objective,
                                train_batch_size=per_replica_batch * strategy.num_replicas_in_sync, seq_len=SEQ,
                                num_predict=4, iterations=2, learning_rate=3e-3, warmup_steps=1, **kwargs)
    metrics = run_pretraining(strategy, config, settings, dataset_fn)
    model = XLNetPretrainer(config)
    load_pretrained(model, str(tmp_path / name))
    return metrics, model


@pytest.mark.slow
def test_pmlm_on_two_replicas_matches_one_device(tmp_path):
    config = CONFIG.replace(dropout=0.0, dropatt=0.0)  # replicas draw their own dropout masks
    one, model_one = train(tmp_path, "one", create_strategy("one_device"), 4, config=config)
    two, model_two = train(tmp_path, "two", create_strategy("mirrored"), 2, config=config)
    for key in ("loss", "loss_ae", "loss_par", "accuracy_ae", "accuracy_par"):
        np.testing.assert_allclose(one[key], two[key], rtol=1e-5, err_msg=key)
    assert_same_weights(model_one, model_two, round_off=ROUND_OFF)


@pytest.mark.slow
def test_resume_continues_exactly_and_the_checkpoint_fine_tunes_like_an_xlnet_one(tmp_path):
    from xlnet_tf.tasks.classification.classification_head import XLNetClassifier

    strategy = create_strategy("one_device")
    _, model_straight = train(tmp_path, "straight", strategy, 2, steps=4, save_steps=2)
    stopped_at(tmp_path / "straight", 2, tmp_path / "resumed")  # the same run stopped at its step-2 checkpoint
    with absl_messages() as logged:
        resumed, model_resumed = train(tmp_path, "resumed", strategy, 2, steps=4, save_steps=2)
    assert f"resumed from {tmp_path / 'resumed' / 'xlnet_model-2'} at step 2" in logged
    assert resumed["step"] == 4  # (its report covers step 4 only: a run's first host loop reports after a step)
    assert_same_weights(model_straight, model_resumed, round_off=ROUND_OFF)
    # The checkpoint records its objective; resuming it with another one is refused.
    assert pretraining_objective(str(tmp_path / "resumed")) == "pmlm"
    with pytest.raises(SettingsError, match="holds a run of --objective=pmlm"):
        train(tmp_path, "resumed", strategy, 2, "plm", steps=6)
    # Fine-tuning reads the network as from an XLNet checkpoint: nothing to set.
    classifier = XLNetClassifier(CONFIG, num_labels=2)
    load_pretrained(classifier, str(tmp_path / "resumed"))
    assert_same_weights(classifier.xlnet, model_resumed.xlnet, round_off=0)


def test_memory_is_refused_for_objectives_without_it():
    settings = PretrainSettings(model_dir="m", model_config_path=os.path.join(REPO, "configs", "tiny.json"),
                                data_dir="d", train_batch_size=8, seq_len=32, reuse_len=16, num_predict=5,
                                train_steps=10, objective="pmlm", mem_len=16)
    with pytest.raises(SettingsError, match="--objective=pmlm has no Transformer-XL memory"):
        settings.validate()
    with pytest.raises(SettingsError, match="--objective='bert' must be one of plm, pmlm, mpnet"):
        PretrainSettings(**dict(vars(settings), objective="bert", mem_len=0)).validate()


def _pretrain_on_real_text(tmp_path) -> dict:
    """PMLM pretraining of the tiny config, 60 steps on 1,500 lines of the bundled Brown sample, in ``tmp_path``
    (in ``real_text_run``'s process); its final metrics."""
    corpus = tmp_path / "text.txt"
    with open(os.path.join(REPO, "data", "corpus", "brown_sample.txt"), encoding="utf-8") as f:
        corpus.write_text("".join(f.readlines()[:1500]), encoding="utf-8")
    settings = PretrainSettings(
        objective="pmlm", model_config_path=os.path.join(REPO, "configs", "tiny.json"),
        spiece_model_file=os.path.join(REPO, "data", "spiece.model"), input_glob=str(corpus),
        data_dir=str(tmp_path / "data"), model_dir=str(tmp_path / "model"), train_batch_size=8, seq_len=32,
        reuse_len=16, num_predict=5, train_steps=60, iterations=20, learning_rate=3e-3, warmup_steps=5)
    return {name: float(value) for name, value in pretrain(settings).items()}


@resource
def real_text_run(tmp_path):
    """``_pretrain_on_real_text(tmp_path)`` in a process of its own, made on the background thread
    (tests/background.py). Returns ``tmp_path`` and the run's final metrics."""
    return tmp_path, run_function(_pretrain_on_real_text, tmp_path)


@pytest.mark.slow
def test_both_pmlm_terms_fall_on_real_text():
    tmp_path, metrics = real_text_run.value()
    logged = scalars(str(tmp_path / "model"))
    for term in ("ae", "par"):
        first, last = logged[f"loss_{term}"][0][1], logged[f"loss_{term}"][-1][1]
        # (by more than noise; less than from ln(V) when the LM bias starts at the unigram frequencies)
        assert last < first - 0.2, (term, first, last)
        assert 0 <= metrics[f"accuracy_{term}"] <= 1 and f"accuracy_{term}" in logged
    # the loss is L_AE + L_PAR (per step; the terms are token-weighted over the host loop, hence the tolerance)
    np.testing.assert_allclose(metrics["loss"], metrics["loss_ae"] + metrics["loss_par"], rtol=0.02)
