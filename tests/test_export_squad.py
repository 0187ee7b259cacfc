"""The SQuAD export: serve_ids reproduces the Keras head's beam outputs, and the SavedModel holds stock TensorFlow
ops only (TF Serving has neither xlnet_tf's C++ kernels nor XLA)."""

import os

import keras
import numpy as np
import tensorflow as tf

from test_squad import SMALL, _inference_batch  # the head's test batch (P, Q, CLS, padding)
from xlnet_tf.finetune.export import ServingInfo, write_serving_model
from xlnet_tf.finetune.squad_model import INFERENCE_OUTPUTS
from xlnet_tf.models.heads import XLNetSquad


def op_types(path: str) -> set:
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved = saved_model_pb2.SavedModel.FromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    assert not [f.signature.name for f in graph.library.function if f.attr["_XlaMustCompile"].b]
    return {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}


def test_serve_ids_reproduces_keras_outputs_with_stock_ops(tmp_path):
    keras.utils.set_random_seed(1)
    model = XLNetSquad(SMALL, start_n_top=3, end_n_top=2)
    batch = _inference_batch()
    expected = model(batch, training=False)
    info = ServingInfo(kind="squad", task="squad", max_seq_length=24, global_step=0,
                       squad=dict(max_query_length=8, doc_stride=8, max_answer_length=5, start_n_top=3, end_n_top=2,
                                  n_best_size=5))
    path = write_serving_model(model, str(tmp_path / "serving"), info)
    assert int(os.path.basename(path)) > 1_700_000_000  # no global step: a timestamp version
    assert os.listdir(tmp_path / "serving") == [os.path.basename(path)]  # no temporary directories left behind
    serving = tf.saved_model.load(path).signatures["serve_ids"]
    specs = serving.structured_input_signature[1]
    assert {k: (v.dtype, v.shape.as_list()) for k, v in specs.items()} == {
        "input_ids": (tf.int32, [None, None]), "segment_ids": (tf.int32, [None, None]),
        "padding_mask": (tf.float32, [None, None]), "p_mask": (tf.float32, [None, None]),
        "cls_index": (tf.int32, [None])}
    got = serving(**{k: tf.constant(v) for k, v in batch.items()})
    assert set(got) == set(INFERENCE_OUTPUTS)
    for key in INFERENCE_OUTPUTS:
        np.testing.assert_allclose(got[key].numpy(), expected[key].numpy(), rtol=1e-5, atol=1e-5)
    assert got["end_top_index"].shape == (3, 6)
    assert not {t for t in op_types(path) if t.startswith("Xlnet") or t.startswith("_Xla") or t == "XlaLaunch"}
