"""The multiple-choice head's HuggingFace names: ``XLNetMultipleChoice`` is ``XLNetForMultipleChoice`` (the sequence
summary, then ``logits_proj``: the original's ``logits/dense``). Its weights share ``logits_proj`` with a sequence
classifier's, so only config.json's architecture tells them apart (``module`` None). No TensorFlow here:
registered with ``xlnet_tf.hf`` when the family loads."""

from xlnet_tf.hf import SUMMARY_NAMES, HFHead


def mapping(task_scope: str, regression: bool) -> dict:
    return {**SUMMARY_NAMES, "logits_proj.weight": ("logits/dense/kernel", True),
            "logits_proj.bias": ("logits/dense/bias", False)}


HEAD = HFHead(head="XLNetMultipleChoice", architecture="XLNetForMultipleChoice", module=None, mapping=mapping,
              summary=True)
