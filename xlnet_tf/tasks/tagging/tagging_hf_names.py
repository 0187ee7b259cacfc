"""The tagging head's HuggingFace names: ``XLNetTagger`` is ``XLNetForTokenClassification`` (dropout and one
dense layer, ``classifier``, on every position), its TF1 names ``model/tagging_{scope}/logit/*`` (the original
code has no tagging head). No TensorFlow here: registered with ``xlnet_tf.hf`` when the family loads."""

from xlnet_tf.hf import HFHead


def mapping(task_scope: str, regression: bool) -> dict:
    prefix = f"model/tagging_{task_scope}/logit/"
    return {"classifier.weight": (prefix + "kernel", True), "classifier.bias": (prefix + "bias", False)}


HEAD = HFHead(head="XLNetTagger", architecture="XLNetForTokenClassification", module="classifier", mapping=mapping,
              labelled=True, per_token=True)
