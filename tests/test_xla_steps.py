"""Steps a TPU can run: every training step (pretraining: plm, pmlm, mpnet; fine-tuning: classification,
regression, multiple choice, SQuAD) and every evaluation/prediction step compiles with XLA (``jit_compile=True``,
so the plain kernels) to HLO without dynamic dimensions, on batches of the pipelines the runs use: static shapes,
evaluation padded to whole batches, no int64 inputs, the pretraining masks as uint8."""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from classifier_helpers import FIXTURES, SPIECE, make_flags, micro_config
from xlnet_tf import XLNetConfig, XLNetPretrainer
from xlnet_tf.finetuning import records
from xlnet_tf.finetuning.trainer import make_predict_step, make_replica_step
from xlnet_tf.objectives import BatchShape, get_objective
from xlnet_tf.training import pretraining
from xlnet_tf.training.optimization import create_optimizer

# XLA's element types, then the dimensions: ``f32[<=8,16]`` is bounded-dynamic, ``f32[?,16]`` unbounded.
SHAPE = re.compile(r"\b(?:pred|[su](?:4|8|16|32|64)|f8\w*|bf16|f16|f32|f64|c64|c128)\[([^\]]*)\]")


# A dimension size set from a computed value (tf2xla's TopK sets its k, a constant: static).
SET_SIZE = re.compile(r"set-dimension-size\([^()]*?, s32\[\] %(?!constant)[\w.-]+\)")


def dynamic_shapes(hlo: str) -> list:
    """The shapes in HLO text with a dynamic dimension, and dimension sizes set from computed values."""
    found = [m.group(0) for m in SHAPE.finditer(hlo) if "<=" in m.group(1) or "?" in m.group(1)]
    return found + SET_SIZE.findall(hlo)


def assert_static_step(fn, *args):
    """``fn`` (a ``jit_compile=True`` tf.function) lowered for ``args``: static HLO, inputs without int64."""
    for arg in tf.nest.flatten(args):
        assert arg.shape.is_fully_defined(), arg
        assert arg.dtype != tf.int64, arg
    hlo = fn.experimental_get_compiler_ir(*args)(stage="hlo")
    assert "ENTRY" in hlo
    assert not dynamic_shapes(hlo), dynamic_shapes(hlo)[:5]


def test_the_check_sees_dynamic_dimensions():
    fn = tf.function(lambda x: tf.where(x > 0), jit_compile=True)  # as many rows as positive entries
    hlo = fn.experimental_get_compiler_ir(tf.constant([1.0, -1.0, 2.0]))(stage="hlo")
    assert dynamic_shapes(hlo)


def first(dataset):
    return next(iter(dataset))


def train_step(model, loss_fn):
    optimizer = create_optimizer(model, 1e-3, 10, 1)
    optimizer.build(model.trainable_variables)
    step = make_replica_step(model, optimizer, loss_fn, clip=1.0)
    return tf.function(lambda batch: step(batch, tf.zeros([]))[1:], jit_compile=True)


# -- pretraining ---------------------------------------------------------------------------------------------------

SEQ, REUSE, PREDICT, BATCH, VOCAB = 16, 8, 4, 2, 64


@pytest.mark.parametrize("objective", ["plm", "pmlm", "mpnet"])
def test_pretraining_step_compiles_static(objective):
    spec = get_objective(objective)
    rng = np.random.default_rng(0)
    records_batch = {"input": tf.constant(rng.integers(10, VOCAB, (BATCH, SEQ)), tf.int64),
                     "is_masked": tf.constant(rng.random((BATCH, SEQ)) < 0.3, tf.int64),
                     "seg_id": tf.constant(np.repeat([[0] * (SEQ // 2) + [1] * (SEQ // 2)], BATCH, 0), tf.int64)}
    shape, seed = BatchShape(SEQ, REUSE, REUSE, PREDICT), tf.constant([1, 2], tf.int64)
    batch = spec.make_batch(records_batch, shape, seed, VOCAB, pretraining.PERM_MASK_WIRE_DTYPE)
    float_batch = spec.make_batch(records_batch, shape, seed, VOCAB, tf.float32)
    masks = [k for k in batch if k.endswith("perm_mask")]
    assert masks and all(batch[k].dtype == tf.uint8 for k in masks)
    mem_len = 4 if spec.has_memory else 0
    config = XLNetConfig(n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=VOCAB, mem_len=mem_len,
                         reuse_len=REUSE if mem_len else None)
    keras.utils.set_random_seed(0)
    model = XLNetPretrainer(config)
    optimizer = create_optimizer(model, 1e-3, 10, 1)
    optimizer.build(model.trainable_variables)
    # The compact masks are exact: the model's outputs are bit-identical to float32 masks'.
    logits = [model({k: b[k] for k in spec.model_inputs}, training=False)["lm_logits"].numpy()
              for b in (batch, float_batch)]
    np.testing.assert_array_equal(*logits)
    step = pretraining.make_replica_step(model, optimizer, 1.0, objective)
    mems = pretraining.zero_mems_fn(config, BATCH, model.compute_dtype)()
    assert_static_step(tf.function(step, jit_compile=True), [batch], mems)


def input_checks(fn, *args) -> list:
    """The Assert ops of ``fn``'s trace for ``args``, in its graph and in the functions it calls (nested
    tf.functions, the cond guards TensorFlow builds around an Assert)."""
    graph_def = fn.get_concrete_function(*args).graph.as_graph_def()
    nodes = list(graph_def.node) + [node for f in graph_def.library.function for node in f.node_def]
    return [node.name for node in nodes if node.op == "Assert"]


def test_the_model_checks_its_inputs_in_traced_calls_but_adds_nothing_under_xla():
    """A traced call (predict, serving) asserts what the eager checks check; under XLA nothing is added (XLA drops
    Assert ops, logging each): the jit-compiled steps' HLO is the same as without the checks."""
    model = XLNetPretrainer(XLNetConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, n_token=VOCAB))
    names = ("input_ids", "segment_ids", "position_ids", "lm_positions")
    signature = {name: tf.TensorSpec([None, None], tf.int32) for name in names}
    signature.update(padding_mask=tf.TensorSpec([None, None]), perm_mask=tf.TensorSpec([None, None, None]),
                     target_mapping=tf.TensorSpec([None, None, None]))
    traced = {jit: input_checks(tf.function(lambda x: model(x)["lm_logits"], jit_compile=jit), signature)
              for jit in (False, True)}
    assert len(traced[False]) >= 10 and traced[True] == [], traced  # (the model has no Assert of its own)
    # No cond around them: a graph with control flow is exported without its 16-bit weights (read_in_16_bits).
    graph = tf.function(lambda x: model(x)["lm_logits"]).get_concrete_function(signature).graph
    assert not [op.name for op in graph.get_operations() if op.type in ("If", "StatelessIf")]
    nested = tf.function(lambda x: model(x)["lm_logits"])  # traced inside a jit-compiled function: compiled too
    assert input_checks(tf.function(lambda x: nested(x), jit_compile=True), signature) == []


# -- fine-tuning ---------------------------------------------------------------------------------------------------

def classifier_task(tmp_path, **flags):
    settings = make_flags(tmp_path, do_train=True, do_eval=True, **flags).validate()
    return settings.family().task(settings)


@pytest.mark.parametrize("task_name,data", [("sst-2", "glue/SST-2"), ("sts-b", "glue/STS-B"), ("race", "race")])
def test_finetuning_steps_compile_static(tmp_path, task_name, data):
    """Classification, regression and RACE: the training step on a training batch, the evaluation step on the
    padded last batch (6 or 8 dev examples in batches of 5)."""
    task = classifier_task(tmp_path, task_name=task_name, data_dir=os.path.join(FIXTURES, data),
                           max_seq_length=24, max_qa_length=8)
    dataset_fn, _ = task.training_data(1)
    keras.utils.set_random_seed(0)
    model = task.build_model()
    assert_static_step(train_step(model, task.loss), first(dataset_fn(None, 0)))

    data = task.eval_data()
    dataset = records.eval_dataset(data.path, task.feature_spec, task.dummy_features, data.meta["num_records"], 5)
    batches = list(dataset)
    assert data.meta["num_records"] % 5 and len(batches) == -(-data.meta["num_records"] // 5)
    assert [int(b["is_real_example"].numpy().sum()) for b in batches][-1] == data.meta["num_records"] % 5
    keep = ("label", "is_real_example", "example_index")
    assert_static_step(make_predict_step(model, keep, jit_compile=True), batches[-1])


def test_squad_steps_compile_static(tmp_path):
    from xlnet_tf.tasks.squad import SquadFamily, SquadSettings
    from xlnet_tf.tasks.squad import squad_data

    squad = os.path.join(FIXTURES, "squad")
    settings = SquadSettings(model_dir=str(tmp_path / "model"), model_config_path=micro_config(tmp_path),
                             spiece_model_file=SPIECE, train_file=os.path.join(squad, "train-v2.0.json"),
                             predict_file=os.path.join(squad, "dev-v2.0.json"), max_seq_length=48,
                             max_query_length=16, doc_stride=16, train_batch_size=2, predict_batch_size=4,
                             do_train=True, do_predict=True, start_n_top=2, end_n_top=2).validate()
    task = SquadFamily().task(settings)
    dataset_fn, _ = task.training_data(1)
    keras.utils.set_random_seed(0)
    model = task.build_model()
    assert_static_step(train_step(model, task.loss), first(dataset_fn(None, 0)))

    data = task.eval_data()
    batches = list(squad_data.eval_dataset(data.features, 4))
    assert len(data.features) % 4, "the fixture should leave a partial last batch"
    index = np.concatenate([b["feature_index"].numpy() for b in batches])
    assert list(index[index >= 0]) == list(range(len(data.features)))  # padding rows are marked -1
    assert_static_step(make_predict_step(model, ("feature_index",), jit_compile=True), batches[-1])
    # The host puts the ids back and drops the padding rows.
    results = squad_data.results_by_unique_id(data.features, {"feature_index": index, "x": np.arange(len(index))})
    assert list(results["unique_ids"]) == [f.unique_id for f in data.features]
    assert list(results["x"]) == list(range(len(data.features)))


@pytest.mark.slow
def test_run_classifier_with_jit_compile_trains_as_without(tmp_path):
    """``--jit_compile``: fine-tuning and evaluation through XLA give what the plain run gives (to XLA's fusions)."""
    from xlnet_tf.runner import run

    results = []
    for jit in (False, True):
        keras.utils.set_random_seed(0)
        results.append(run(make_flags(tmp_path / str(jit), task_name="sts-b", do_train=True, do_eval=True,
                                      data_dir=os.path.join(FIXTURES, "glue", "STS-B"), max_seq_length=24,
                                      eval_batch_size=5, jit_compile=jit)))
    plain, xla = (r["eval"]["metrics"] for r in results)
    for key in ("pearson", "mse"):
        assert xla[key] == pytest.approx(plain[key], rel=1e-3, abs=1e-4), key


def test_jit_compile_over_several_cpu_replicas_is_refused_in_one_line():
    """TensorFlow runs a compiled step of the second CPU device's replica on the first device, away from its
    variables (a raw InvalidArgumentError mid-run): refused before any work instead."""
    from xlnet_tf.training.distribute import create_strategy
    from xlnet_tf.training.xla import check_jit_compile
    from xlnet_tf.training.settings import SettingsError

    mirrored = create_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 2
    with pytest.raises(SettingsError, match="--jit_compile with --strategy=mirrored over 2 CPU devices"):
        check_jit_compile(mirrored, True)
    check_jit_compile(mirrored, False)
    check_jit_compile(create_strategy("one_device"), True)
