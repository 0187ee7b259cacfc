"""The classification head's HuggingFace names: ``XLNetClassifier`` is ``XLNetForSequenceClassification`` (the
sequence summary, then ``logits_proj``: the original's ``model/{classification,regression}_{scope}/logit``). Its
weights share ``logits_proj`` with multiple choice's, so only config.json's architecture tells them apart
(``module`` None); config.json's ``problem_type`` (or one label) tells a regressor (``regression``). No TensorFlow
here: registered with ``xlnet_tf.hf`` when the family loads."""

from xlnet_tf.hf import SUMMARY_NAMES, HFHead


def mapping(task_scope: str, regression: bool) -> dict:
    prefix = f"model/{'regression' if regression else 'classification'}_{task_scope}/logit/"
    return {**SUMMARY_NAMES, "logits_proj.weight": (prefix + "kernel", True),
            "logits_proj.bias": (prefix + "bias", False)}


HEAD = HFHead(head="XLNetClassifier", architecture="XLNetForSequenceClassification", module=None, mapping=mapping,
              labelled=True, summary=True, regression=True)
