"""Pretraining objectives on the one XLNet backbone: the base class, and the registry the reader, the trainer,
``flops.py`` and the command line ask.

* ``plm``: XLNet's permutation language model (the default), ``xlnet_tf.objectives.plm``.
* ``pmlm``: UniLMv2's pseudo-masked language model (Bao et al., 2020), ``xlnet_tf.objectives.pmlm``.
* ``mpnet``: MPNet's masked and permuted language model (Song et al., 2020), ``xlnet_tf.objectives.mpnet``.

An objective is one module: a subclass of ``Objective`` that says which model inputs it builds from the records
of ``create_pretraining_data`` (``make_batch``), the streams the model runs on them (``stream_layout``, from which
``flops.py`` counts the step's FLOPs), its loss terms, and whether Transformer-XL memory is defined for it; plus
one line in ``OBJECTIVES``' built-ins below (``xlnet_tf.registry``: the mechanism the task families use too).
Every objective trains the same network, so checkpoints (which record the objective's name), fine-tuning and
export do not depend on it.

No TensorFlow is imported here or when an objective module is imported: the settings check the objective before
TensorFlow loads, so the objective modules import it inside the functions that build tensors.
"""

from __future__ import annotations

import abc
import re
from typing import Mapping, NamedTuple

from xlnet_tf.data.batch_shape import BatchShape
from xlnet_tf.registry import Registry


# A shape setting as ``shape_errors`` names it ("reuse_len=24", not "seq_len-reuse_len=40"): the flag of that name.
_SHAPE_SETTING = re.compile(r"(?<![\w-])(seq_len|reuse_len|perm_size|num_predict)=")


class StreamLayout(NamedTuple):
    """What the model computes for one sequence of an objective (what ``flops.py`` counts)."""

    content: int      # content-stream tokens
    query: int        # query-stream rows (0: none)
    head_rows: int    # rows the LM head scores
    query_keys: bool  # whether the query rows are attention keys (and values) too
    # With a query stream: whether the LM head reads content-stream rows too. If not, the last layer's content
    # stream past its keys and values feeds nothing, and is not computed.
    head_on_content: bool = False


class Objective(abc.ABC):
    """A pretraining objective. Subclasses set the class attributes and implement ``make_batch`` and
    ``stream_layout``; the rest has defaults that fit an objective scoring its prediction rows with the LM head.

    Attributes:
      name: the ``--objective`` value, recorded in checkpoints.
      description: one line for ``--help``.
      model_inputs: batch keys the model reads (``make_batch`` also returns ``target`` and ``target_mask``).
      loss_terms: the prediction rows [B, P] split into equal parts, one loss term each, in this order; the loss
        is the sum of the terms' means.
      has_memory: whether Transformer-XL memory is defined for it (its masks reach across sequences).
    """

    name: str
    description: str = ""
    model_inputs: tuple[str, ...]
    loss_terms: tuple[str, ...]
    has_memory: bool = False

    # -- settings and data -------------------------------------------------------------------------------
    def settings_errors(self, settings) -> list[str]:
        """Messages naming the flags of ``PretrainSettings`` that cannot work with this objective (checked before
        TensorFlow loads): the shape ``make_batch`` needs too, so that a run whose batches cannot be built fails
        before it writes its data (hours, from a large --input_glob) or claims its --model_dir."""
        errors = []
        if settings.mem_len and not self.has_memory:
            errors.append(f"--objective={self.name} has no Transformer-XL memory (its masks are defined within one "
                          f"sequence): set --mem_len=0 (got {settings.mem_len})")
        shape = BatchShape(settings.seq_len, settings.reuse_len, settings.permutation_size, settings.num_predict)
        if None not in shape:  # (a missing one is reported as missing)
            for error in self.shape_errors(shape):
                if "perm_size" in error and not settings.perm_size:
                    error += " (--perm_size defaults to --reuse_len)"
                errors.append(_SHAPE_SETTING.sub(r"--\1=", error))
        return errors

    def shape_errors(self, shape: BatchShape) -> list[str]:
        """Messages naming the settings of ``shape`` with which ``make_batch`` cannot build a batch."""
        return []

    def record_fields(self, shape: BatchShape) -> dict:
        """The data-writing settings (besides ``seq_len`` and ``bi_data``) the batches depend on, by manifest field:
        the reader checks the data was written with them."""
        return {}

    @abc.abstractmethod
    def make_batch(self, records: Mapping, shape: BatchShape, seed, vocab_size: int,
                   perm_mask_dtype="float32") -> dict:
        """The model inputs, ``target`` int32 [B, P] and ``target_mask`` float32 [B, P] for a batch of records:
        ``records["input"]``, ``["is_masked"]`` (the writer's targets), ``["seg_id"]`` int [B, seq_len]. ``seed``:
        the batch's stateless seed [2] (the same seed gives the same batch); ``vocab_size``: the data's vocabulary;
        ``perm_mask_dtype``: of the attention masks (the model tests ``> 0`` only). Static shapes."""

    # -- cost --------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def stream_layout(self, seq_len: int, num_predict: int) -> StreamLayout:
        """The streams of one sequence of ``seq_len`` text tokens (``num_predict``: the setting)."""

    # -- loss and metrics --------------------------------------------------------------------------------
    def loss(self, outputs: Mapping, batch: Mapping) -> dict:
        """``{term: (sum of losses, number correct, number of targets)}`` (float32 scalars) of the model's
        ``outputs`` on ``batch``: cross-entropy and accuracy of the LM logits [B, P, V] against ``target``,
        weighted by ``target_mask``, per ``loss_terms`` part of the P rows. The sums (not means) make the mean
        over the global batch exact under any replica split. Traced as written, without autograph: a branch on a
        tensor's value is a ``tf.where`` or ``tf.cond``, not a Python ``if``."""
        from xlnet_tf.objectives.losses import prediction_terms

        return prediction_terms(outputs["lm_logits"], batch["target"], batch["target_mask"], self.loss_terms)

    def target_counts(self, batch: Mapping) -> dict:
        """``{term: number of targets}`` of ``batch``, as ``loss`` counts them, from the batch alone: gradient
        accumulation divides each micro-batch's loss sums by the whole step's counts before any forward pass. An
        objective that overrides ``loss`` with other counts overrides this too."""
        from xlnet_tf.objectives.losses import target_counts

        return target_counts(batch["target_mask"], self.loss_terms)

    def metrics(self, sums: Mapping) -> dict:
        """``{name: (numerator, denominator)}`` from ``loss``'s ``{term: (loss sum, correct, count)}``: ``accuracy``
        for one term (its loss is the loss), else ``loss_<term>`` and ``accuracy_<term>`` for each."""
        if len(sums) == 1:
            (_, correct, count), = sums.values()
            return {"accuracy": (correct, count)}
        return {f"{metric}_{term}": (value, count) for term, (loss_sum, correct, count) in sums.items()
                for metric, value in (("loss", loss_sum), ("accuracy", correct))}

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The names ``metrics`` returns."""
        return tuple(self.metrics({term: (0.0, 0.0, 0.0) for term in self.loss_terms}))

    def __repr__(self):
        return f"<objective {self.name}>"


def _problems(objective) -> list:
    """What the reader, trainer or ``flops.py`` would miss, refused at registration, not at the first batch."""
    if not isinstance(objective, Objective):
        return [f"expected an Objective (instance or subclass), got {type(objective).__name__}"]
    unset = [attr for attr in ("name", "model_inputs", "loss_terms") if not getattr(objective, attr, None)]
    return [f"{type(objective).__name__} sets no {', '.join(unset)}"] if unset else []


# name -> objective, in registration order (``--objective``'s choices); the built-in ones load on first use.
OBJECTIVES = Registry("objective", "objectives.register", "objectives.Objective", check=_problems,
                      builtins=("xlnet_tf.objectives.plm:PermutationLM", "xlnet_tf.objectives.pmlm:PseudoMaskedLM",
                                "xlnet_tf.objectives.mpnet:MaskedPermutedLM"),
                      unknown="an objective of your own is registered with xlnet_tf.objectives.register")
register = OBJECTIVES.register
get_objective = OBJECTIVES.named
