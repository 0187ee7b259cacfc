"""The SQuAD head's HuggingFace names: ``XLNetSquad`` is ``XLNetForQuestionAnswering`` (its start, end and answer-class
poolers under the original's TF1 scopes). No TensorFlow here: registered with ``xlnet_tf.hf`` when the family
loads."""

from xlnet_tf.hf import HFHead

NAMES = {
    "start_logits.dense.weight": ("start_logits/dense/kernel", True),
    "start_logits.dense.bias": ("start_logits/dense/bias", False),
    "end_logits.dense_0.weight": ("end_logits/dense_0/kernel", True),
    "end_logits.dense_0.bias": ("end_logits/dense_0/bias", False),
    "end_logits.LayerNorm.weight": ("end_logits/LayerNorm/gamma", False),
    "end_logits.LayerNorm.bias": ("end_logits/LayerNorm/beta", False),
    "end_logits.dense_1.weight": ("end_logits/dense_1/kernel", True),
    "end_logits.dense_1.bias": ("end_logits/dense_1/bias", False),
    "answer_class.dense_0.weight": ("answer_class/dense_0/kernel", True),
    "answer_class.dense_0.bias": ("answer_class/dense_0/bias", False),
    "answer_class.dense_1.weight": ("answer_class/dense_1/kernel", True),
}


def mapping(task_scope: str, regression: bool) -> dict:
    return dict(NAMES)


HEAD = HFHead(head="XLNetSquad", architecture="XLNetForQuestionAnswering", module="start_logits", mapping=mapping)
