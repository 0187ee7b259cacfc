"""The pretraining objectives on the one XLNet backbone, by name: what the training step needs to know of each.

* ``plm``: XLNet's permutation language model (the default).
* ``pmlm``: UniLMv2's pseudo-masked language model (Bao et al., 2020): ``L_AE + L_PAR``.
* ``mpnet``: MPNet's masked and permuted language model (Song et al., 2020).

Their inputs are built by ``xlnet_tf.objectives.batches``; every objective trains the same network, so checkpoints,
fine-tuning and export do not depend on it. No TensorFlow here: the settings check names before it loads.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Objective:
    name: str
    model_inputs: tuple[str, ...]  # batch keys the model reads (besides them: target, target_mask)
    # The prediction rows [B, P] split into equal parts, one loss term each; the loss is the sum of their means.
    loss_terms: tuple[str, ...]
    has_memory: bool  # whether Transformer-XL memory is defined for it


OBJECTIVES = {
    "plm": Objective("plm", ("input_ids", "segment_ids", "perm_mask", "target_mapping"), ("plm",), True),
    "pmlm": Objective("pmlm", ("input_ids", "segment_ids", "target_mapping", "query_ids", "pseudo_mask",
                               "query_perm_mask", "lm_positions"), ("ae", "par"), False),
    "mpnet": Objective("mpnet", ("input_ids", "segment_ids", "position_ids", "perm_mask", "target_mapping",
                                 "query_perm_mask"), ("mpnet",), False),
}


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {name!r}")
    return OBJECTIVES[name]
