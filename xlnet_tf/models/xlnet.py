"""The XLNet network (``XLNetModel``) and its pretraining model with the tied LM head (``XLNetPretrainer``).

Inputs are batch-major dicts; see ``XLNetModel`` for shapes. Every variable carries a mapping to its name in
the original TF1 release (``tf1_variables``), which is what ``load_original_checkpoint`` reads.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from xlnet_tf import kernels, ops
from xlnet_tf.config import XLNetConfig
from xlnet_tf.layers.attention import RelativeAttention
from xlnet_tf.layers.dropout import Dropout
from xlnet_tf.layers.feedforward import PositionwiseFeedForward
from xlnet_tf.layers.linear import matmul
from xlnet_tf.layers.masks import key_blocked, mask_bias, memory_padding_blocked, stream_masks
from xlnet_tf.layers.position import RelativePositionEncoding


# Other XLNet code's names for our inputs: refused with what they are called here, not left unread (a padding mask
# under another name would leave every padding token visible). Other keys pass (labels in a batch dict).
_THEIR_NAMES = {"attention_mask": "HF's attention_mask is padding_mask here (the same: 1 = token, 0 = padding)",
                "token_type_ids": "HF's token_type_ids are segment_ids here",
                "input_mask": "the original's input_mask (1 = padding) is 1 - padding_mask here",
                "seg_id": "the original's seg_id is segment_ids here"}


def check_inputs(inputs, model: str, config: XLNetConfig | None = None) -> None:
    """A ValueError naming what is wrong unless ``inputs`` is a dict with ``input_ids`` [B, L] and none of
    ``_THEIR_NAMES``; with ``config``, also unless the other inputs' shapes agree with it (``XLNetModel``'s
    docstring), as far as they are known when traced (no op is added to the graph)."""
    if not hasattr(inputs, "keys") or "input_ids" not in inputs:
        raise ValueError(f"inputs: {model} takes a dict with input_ids [B, L] (and segment_ids, padding_mask, ...), "
                         f"got {type(inputs).__name__}" + ("" if not hasattr(inputs, "keys") else
                                                            f" with keys {sorted(inputs)}"))
    shape = _shape(inputs["input_ids"])
    if shape.rank not in (None, 2):
        raise ValueError(f"inputs: {model}'s input_ids must be [batch, length], got shape {shape.as_list()}")
    if shape.rank == 2 and shape[1] == 0:
        raise ValueError(f"inputs: {model}'s input_ids hold no tokens (shape {shape.as_list()}): every sequence "
                         "needs at least one")
    refuse_their_names(inputs, model)
    for name in ("input_ids", "query_ids", "lm_positions"):
        _check_integer(inputs.get(name), name, model)
    mems = inputs.get("mems")
    if mems is not None and not isinstance(mems, (list, tuple)):
        raise ValueError(f"inputs: {model}'s mems must be a list of n_layer tensors [batch, memory, d_model], one "
                         f"per layer, got a {type(mems).__name__} of shape {_shape(mems).as_list()}")
    if config is not None and shape.rank == 2:
        _check_shapes(inputs, model, config, *shape)


def _check_integer(value, name: str, model: str) -> None:
    """Ids and positions are read by tf.cast, which fails on strings with TensorFlow's words: refused when traced,
    where the dtype is known (no op is added). Floats pass here, their values are checked (``_Rules.whole``):
    Keras' own SavedModel signature of a subclassed model traces every input as float32."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and not (tf.as_dtype(dtype).is_integer or tf.as_dtype(dtype).is_floating):
        raise ValueError(f"inputs: {model}'s {name} must be integers, got dtype {tf.as_dtype(dtype).name}")


def _shape(value) -> tf.TensorShape:
    return tf.TensorShape(getattr(value, "shape", None))


def _check_shapes(inputs, model: str, config: XLNetConfig, batch, length) -> None:
    """The shapes of ``inputs`` against ``input_ids``' [batch, length]: a mismatch otherwise fails deep in the
    attention with the kernels' shapes, or, for ``target_mapping``, not at all."""
    def expect(name, value, names, dims):
        if value is not None and not _shape(value).is_compatible_with(dims):
            raise ValueError(f"inputs: {model}'s {name} must be [{', '.join(names)}] = "
                             f"{tf.TensorShape(dims).as_list()} for input_ids {[batch, length]}, got "
                             f"{_shape(value).as_list()}")

    for name in ("segment_ids", "padding_mask", "position_ids"):
        expect(name, inputs.get(name), ("batch", "length"), [batch, length])
    expect("perm_mask", inputs.get("perm_mask"), ("batch", "length", "length"), [batch, length, length])
    if inputs.get("target_mapping") is not None:  # the query stream's inputs (unread without it)
        expect("target_mapping", inputs["target_mapping"], ("batch", "predicted", "length"), [batch, None, length])
        predict = _shape(inputs["target_mapping"])[1]
        for name in ("query_ids", "pseudo_mask"):
            expect(name, inputs.get(name), ("batch", "predicted"), [batch, predict])
        query_mask = inputs.get("query_perm_mask")
        with_query_keys = None if predict is None or length is None else length + predict  # its rows keys too
        if query_mask is not None and not _shape(query_mask).is_compatible_with([batch, predict, with_query_keys]):
            expect("query_perm_mask", query_mask, ("batch", "predicted", "length [+ predicted]"),
                   [batch, predict, length])
    if inputs.get("lm_positions") is not None:
        expect("lm_positions", inputs["lm_positions"], ("batch", "predictions"), [batch, None])
    memory = None
    for i, mem in enumerate(inputs.get("mems") or ()):
        expect(f"mems[{i}]", mem, ("batch", "memory", "d_model"), [batch, memory, config.d_model])
        memory = _shape(mem)[1] if memory is None else memory
    if inputs.get("mems") is not None:
        expect("mems_padding_mask", inputs.get("mems_padding_mask"), ("batch", "memory"), [batch, memory])


def refuse_their_names(keys, model: str):
    """A ValueError if ``keys`` hold other XLNet code's name for one of our inputs (see ``_THEIR_NAMES``)."""
    theirs = sorted(k for k in keys if k in _THEIR_NAMES)
    if theirs:
        raise ValueError(f"inputs: {model} does not read {', '.join(theirs)}; "
                         + "; ".join(_THEIR_NAMES[k] for k in theirs))


def _numbers(value) -> bool:
    """Whether ``value`` is a (nested) list or tuple of Python numbers."""
    return isinstance(value, (list, tuple)) and all(
        isinstance(e, (int, float, np.number)) or _numbers(e) for e in value)


class NamedInputs:
    """A model of a dict of named inputs, as users give them and as Keras exports them.

    ``__call__`` takes Python lists in the dict too (as arrays: Keras takes only tensors and arrays there, and
    said "Only input tensors may be passed as positional arguments" of a list). Keras' ``export()`` for a model
    that builds itself in ``__init__`` (Keras then records no input shapes to export with): by default the
    signature is the model's own inputs (``serving_inputs``), and the model is traced with the plain kernels,
    stock TensorFlow ops that TF Serving or a TensorFlow without this package loads."""

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, dict):  # nested lists of numbers; mems stays a list of per-layer tensors
            inputs = {k: np.asarray(v) if _numbers(v) else v for k, v in inputs.items()}
        return super().__call__(inputs, *args, **kwargs)

    def serving_inputs(self, shape=(None, None)) -> dict[str, tf.TensorSpec]:
        """What ``export()`` serves by default, by name: the network's inputs [batch, length] as the preprocessor
        and the exports' ``serve_ids`` have them (ids int32, ``padding_mask`` float32)."""
        return {"input_ids": tf.TensorSpec(shape, tf.int32, "input_ids"),
                "segment_ids": tf.TensorSpec(shape, tf.int32, "segment_ids"),
                "padding_mask": tf.TensorSpec(shape, tf.float32, "padding_mask")}

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs):
        """``keras.Model.export``; ``input_signature`` defaults to ``[self.serving_inputs()]`` (the endpoint
        ``serve`` takes them as one dict, ``serving_default`` by name). ``new_mems`` (``mem_len > 0``) is one
        [n_layer, B, mem_len, D] output."""
        if input_signature is None:
            input_signature = [self.serving_inputs()]
        if not self.built:  # Keras counts a subclassed model built once called; ours build their weights at once
            unbuilt = [layer.name for layer in self._flatten_layers(include_self=False) if not layer.built]
            if unbuilt:
                raise ValueError(f"{self.name}: call the model once before export(); layers {unbuilt} build "
                                 "their weights on the first call")
            self.built = True
        with kernels.use("plain"):
            if format != "tf_saved_model":
                return super().export(filepath, format=format, verbose=verbose, input_signature=input_signature,
                                      **kwargs)
            # Keras' own export (ExportArchive.track_and_add_endpoint), but with outputs a signature can return: it
            # refused new_mems, a list of n_layer tensors.
            archive = keras.export.ExportArchive()
            archive.track(self)
            archive.add_endpoint("serve", lambda inputs: _signature_outputs(self(inputs)), input_signature, **kwargs)
            archive.write_out(filepath, verbose=True if verbose is None else verbose)


def _signature_outputs(outputs):
    if isinstance(outputs, dict):
        return {k: tf.stack(v) if isinstance(v, (list, tuple)) else v for k, v in outputs.items()}
    return outputs


def _as_config(config) -> XLNetConfig:
    if isinstance(config, XLNetConfig):
        return config
    if isinstance(config, dict):
        return XLNetConfig.from_dict(config)
    raise TypeError(f"expected an XLNetConfig or a dict, got {type(config).__name__}")


def from_config_frozen_or_not(cls, config):
    """``cls(**config)`` with the saved ``trainable`` set once built: Layer.__init__ sets it on the layer alone,
    before ours create their sublayers, whose weights would come back trainable in a frozen network."""
    config = dict(config)
    trainable = config.pop("trainable", True)
    layer = cls(**config)
    layer.trainable = trainable
    return layer


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetBlock(keras.layers.Layer):
    """One XLNet layer: ``rel_attn`` then ``ff``, applied to the content stream and (if given) the query stream
    with the same weights."""

    def __init__(self, config: XLNetConfig, **kwargs):
        kwargs["autocast"] = False  # keeps the float32 attention mask biases float32 (see RelativeAttention)
        super().__init__(**kwargs)
        self.config = _as_config(config)
        config, policy = self.config, self.dtype_policy
        self.rel_attn = RelativeAttention(config.d_model, config.n_head, config.d_head, config.dropout,
                                          config.dropatt, config.initializer_range, name="rel_attn", dtype=policy)
        self.ff = PositionwiseFeedForward(config.d_model, config.d_inner, config.ff_activation, config.dropout,
                                          config.initializer_range, name="ff", dtype=policy)

    def build(self, input_shape=None):
        self.rel_attn.build()
        self.ff.build()
        self.built = True

    def get_config(self):  # from_config's dict config becomes an XLNetConfig in __init__
        return dict(super().get_config(), config=self.config.to_dict())

    @classmethod
    def from_config(cls, config):
        return from_config_frozen_or_not(cls, config)

    def call(self, content, position, biases, query=None, query_keys=False, training=None, content_out=True,
             **attention_args):
        """``content_out`` False: the content stream's own output is not computed (None; its keys and values are,
        for the query rows)."""
        h, g = self.rel_attn(content, position, biases, query=query, query_keys=query_keys, training=training,
                             content_out=content_out, **attention_args)
        h = None if h is None else self.ff(h, training=training)
        return h, (None if g is None else self.ff(g, training=training))


def _check_one_hot(target_mapping) -> None:
    """The query stream reads a row of ``target_mapping`` as a position (its argmax) and a weight (its sum), where
    the original multiplies by it: a row that is neither one-hot nor all zero would be computed differently."""
    rows = tf.cast(target_mapping, tf.float32)
    if not (tf.reduce_all((rows == 0.0) | (rows == 1.0)) and tf.reduce_all(tf.reduce_sum(rows, axis=-1) <= 1.0)):
        raise ValueError("inputs: target_mapping's rows must be one-hot at the predicted positions, or all zero for "
                         "padded predictions (0s and 1s, at most one 1 a row)")


# The inputs ``XLNetModel`` reads, gated behind a traced call's checks (``_Rules.gate``).
_READ = ("input_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping", "mems", "mems_padding_mask",
         "position_ids", "query_ids", "pseudo_mask", "query_perm_mask", "lm_positions")


class _Rules:
    """What inputs' shapes cannot tell: their values, and in a traced call the dimensions unknown when traced.

    Eager calls check the values at once (a ValueError). A traced call that XLA does not compile (``predict``,
    ``fit`` and ``tf.function`` without jit_compile, every serving signature) adds ``tf.debugging.Assert`` ops, and
    ``gate`` puts the inputs behind them, so that a bad input stops the call with its rule named rather than
    giving wrong numbers (an index out of range reads zeros on a GPU, a batch-1 mask is broadcast to every
    example) or TensorFlow's error from deep in the attention. Under XLA (jit_compile, TPUs) nothing is added:
    XLA drops Assert ops, and logs each."""

    def __init__(self, model: str):
        self.model, self.asserts = model, []
        self.mode = "eager" if tf.executing_eagerly() else None if ops.in_xla_context() else "graph"

    def require(self, ok, message: str, *data) -> None:
        """Traced: an Assert that ``ok`` (a bool scalar), else ``message`` and ``data``'s values (int32: with other
        dtypes TensorFlow guards the Assert with a cond, and a graph with control flow is not exported with its
        16-bit weights, ``finetuning.serving.read_in_16_bits``). No apostrophe in ``message``: it shows escaped."""
        self.asserts.append(tf.debugging.Assert(ok, [f"inputs of {self.model}: {message}; got", *data]))

    def whole(self, name: str, value) -> None:
        """Floats of ``value`` (ids, positions) whole numbers: tf.cast would truncate them (1.7 is row 1)."""
        if value is None or self.mode is None:
            return
        value = tf.convert_to_tensor(value)  # output_rows may be a list
        if not value.dtype.is_floating:
            return
        whole = tf.reduce_all(tf.equal(value, tf.floor(value)))
        if self.mode == "eager":
            if not bool(whole):
                raise ValueError(f"inputs: {self.model}'s {name} must be integers, got {value.dtype.name} values "
                                 "with fractions")
            return
        self.require(whole, f"{name} must be integers, got float values with fractions")

    def in_range(self, name: str, value, high, what: str) -> None:
        """Every entry of ``value`` in [0, ``high``); ``what``: what the bound is."""
        if value is None or self.mode is None:
            return
        self.whole(name, value)
        value = tf.cast(value, tf.int64)
        low, top = tf.reduce_min(value), tf.reduce_max(value)
        if self.mode == "eager":
            if tf.size(value) and not 0 <= int(low) <= int(top) < int(high):
                raise ValueError(f"inputs: {self.model}'s {name} must be in [0, {int(high)}) ({what}), got "
                                 f"{int(low)}..{int(top)}")
            return
        shown = [tf.cast(tf.clip_by_value(x, -2 ** 31, 2 ** 31 - 1), tf.int32) for x in (low, top)]
        self.require(tf.equal(tf.size(value), 0) | ((low >= 0) & (top < tf.cast(high, tf.int64))),
                     f"{name} must be in [0, {what}): its least and greatest, and {what}", *shown,
                     tf.cast(high, tf.int32))

    def dims(self, name: str, value, expected: dict) -> None:  # eager shapes are static: _check_shapes
        """Traced: ``value``'s dimensions {axis: (name, size, static size or None)} equal, where the static shapes
        do not already say so (``_check_shapes``)."""
        if value is None or self.mode != "graph":
            return
        static = _shape(value)
        unknown = [(axis, size) for axis, (_, size, known) in expected.items()
                   if static.rank is None or known is None or static[axis] is None]
        if unknown:
            actual = tf.shape(value)
            names = ", ".join(f"{n} at axis {axis}" for axis, (n, _, _) in expected.items())
            self.require(tf.reduce_all([tf.equal(actual[axis], size) for axis, size in unknown]),
                         f"{name} must have the {names} of input_ids: its shape, and what those must be", actual,
                         tf.stack([size for _, size, _ in expected.values()]))

    def gate(self, value):
        """``value`` (a tensor, a list of them, or None) behind the asserts added so far: what reads it runs after
        them (a failed rule is then the error, not what the bad input does first)."""
        if not self.asserts or value is None:
            return value
        if isinstance(value, (list, tuple)):
            return [self.gate(v) for v in value]
        with tf.control_dependencies(self.asserts):
            return tf.identity(value)


def _check_values(inputs, config: XLNetConfig, output_rows=None):
    """``_Rules`` of ``XLNetModel``'s inputs -> the inputs and ``output_rows`` behind them (unchanged eager or
    under XLA)."""
    rules = _Rules("XLNetModel")
    if rules.mode is None:
        return inputs, output_rows
    ids = inputs["input_ids"]
    id_shape = tf.shape(ids)
    batch, length = id_shape[0], id_shape[1]
    static_batch, static_length = _shape(ids)[0], _shape(ids)[1]
    b, l = ("batch", batch, static_batch), ("length", length, static_length)
    rules.in_range("input_ids", ids, config.n_token, "n_token")
    rules.in_range("query_ids", inputs.get("query_ids"), config.n_token, "n_token")
    rules.in_range("position_ids", inputs.get("position_ids"), length, "the length")
    for name in ("segment_ids", "padding_mask", "position_ids"):
        rules.dims(name, inputs.get(name), {0: b, 1: l})
    rules.dims("perm_mask", inputs.get("perm_mask"), {0: b, 1: l, 2: l})
    mapping = inputs.get("target_mapping")
    if mapping is not None:
        rules.dims("target_mapping", mapping, {0: b, 2: l})
        if rules.mode == "eager":
            _check_one_hot(mapping)
        else:
            rows = tf.cast(mapping, tf.float32)
            rules.require(tf.reduce_all((rows == 0.0) | (rows == 1.0)) &
                          tf.reduce_all(tf.reduce_sum(rows, axis=-1) <= 1.0),
                          "target_mapping rows must be one-hot at the predicted positions, or all zero for "
                          "padded predictions (0s and 1s, at most one 1 a row)")
        p = ("predicted", tf.shape(mapping)[1], _shape(mapping)[1])
        for name in ("query_ids", "pseudo_mask"):
            rules.dims(name, inputs.get(name), {0: b, 1: p})
        rules.dims("query_perm_mask", inputs.get("query_perm_mask"), {0: b, 1: p})
    mems = inputs.get("mems")
    if mems:
        m = ("memory", tf.shape(mems[0])[1], _shape(mems[0])[1])
        for i, mem in enumerate(mems):
            rules.dims(f"mems[{i}]", mem, {0: b, 1: m})
        rules.dims("mems_padding_mask", inputs.get("mems_padding_mask"), {0: b, 1: m})
    if output_rows is not None:
        rules.in_range("output_rows", output_rows, length, "the length")
        if _shape(output_rows).rank == 2:
            rules.dims("output_rows", output_rows, {0: b})
    return {k: rules.gate(v) if k in _READ else v for k, v in inputs.items()}, rules.gate(output_rows)


def _at_positions(positions, content_pos, mlen, segment_diff):
    """Rows standing at sequence ``positions`` [B, R] (the query stream's, ``output_rows``): their key coordinates
    [B, R] and their rows of ``segment_diff`` [B, L, K] (None without one)."""
    query_pos = mlen + positions if content_pos is None else tf.gather(content_pos, positions, batch_dims=1)
    return query_pos, (None if segment_diff is None else tf.gather(segment_diff, positions, batch_dims=1))


def _rows_of(blocked, positions):
    """The rows at ``positions`` [B, R] of a content mask ``blocked`` [B|1, L, K] -> [B, R, K] (None: None)."""
    if blocked is None:
        return None
    shape = tf.shape(blocked)
    return tf.gather(tf.broadcast_to(blocked, [tf.shape(positions)[0], shape[1], shape[2]]), positions, batch_dims=1)


def _query_rows_are_keys(query_perm_mask, input_ids) -> bool:
    """Whether ``query_perm_mask`` [B, P, L or L + P] covers the query rows as keys (its static shape tells)."""
    columns, length, rows = query_perm_mask.shape[-1], input_ids.shape[1], query_perm_mask.shape[1]
    if None in (columns, length, rows):
        raise ValueError(f"inputs: query_perm_mask {_shape(query_perm_mask).as_list()} and input_ids "
                         f"{_shape(input_ids).as_list()} need their lengths known when traced (whether the query rows "
                         "are keys, L or L + P columns, decides the graph): give them static shapes")
    if columns not in (length, length + rows):
        raise ValueError(f"query_perm_mask {query_perm_mask.shape} must have L = {length} or L + P columns "
                         "(static shapes)")
    return columns != length


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetModel(NamedInputs, keras.Model):
    """XLNet's Transformer-XL network with two-stream relative attention and memory.

    Inputs (dict, batch-major):
      input_ids: int32 [B, L].
      segment_ids: int32 [B, L] (optional; without it there is no segment term).
      padding_mask: [B, L], 1 = real token, 0 = padding (optional).
      perm_mask: float [B, L, L], 1 = position i may not attend to position j (optional).
      target_mapping: float [B, P, L], rows one-hot at the P predicted positions, or all zero for padded
        targets (optional; turns on the query stream).
      mems: list of n_layer float tensors [B, M, D] (optional).
      mems_padding_mask: [B, M], 1 = the memory row holds a real token, 0 = padding (optional; default: all
        memory visible, as in pretraining). A document read segment by segment carries its left padding here.
      position_ids: int [B, L], each token's position, in [0, L) (optional; default 0..L-1). Tokens may share a
        position (MPNet's placeholders sit at the position of the token they stand for): relative distances are
        differences of position ids, and in [0, L) each is in the encoding's table (one past it was clamped).
      query_ids: int [B, P], the tokens the query rows start from (optional; default: every row starts from
        ``mask_emb``, as XLNet's query stream). pseudo_mask: [B, P], 1 = the row starts from ``mask_emb`` anyway
        (UniLMv2's pseudo masks [P]).
      query_perm_mask: float [B, P, L] or [B, P, L + P], 1 = query row p may not attend to key j (optional): the
        query stream's own mask, instead of the perm_mask rows of its targets and the 'uni' causal rule. With
        L + P columns the query rows are keys of the query stream too, after the content (UniLMv2's appended
        tokens: the content stream never sees them, so it is computed on its own, as s2s-ft's split attention).
    Other XLNet code's names for these (HF's attention_mask, the original's input_mask) are refused, not unread;
    so are shapes that disagree with input_ids', ids, positions and rows out of range, and target_mapping rows
    neither one-hot nor zero: when traced where known, else when run (``_Rules``: not under XLA, which drops
    Assert ops).
    Call argument ``output_rows``: int positions [R] or [B, R] (optional; not with target_mapping). The last
    layer then runs at those rows only, as query rows at their own positions under the content stream's mask and
    weights (the same math), and sequence_output holds their final states [B, R, D]: a head that reads one row
    (a classifier's ``<cls>``) skips the rest of that layer, all but its keys and values.
    Outputs (dict):
      sequence_output: [B, L, D] content stream ([B, R, D] with ``output_rows``).
      query_output: [B, P, D] query stream (when target_mapping is given).
      new_mems: list of n_layer [B, mem_len, D] when ``config.mem_len > 0``: the last ``mem_len`` positions of
        ``concat(mems[i], input_of_layer_i[:, :reuse_len])``, gradient stopped (fewer rows while that
        concatenation is shorter, as in the original). Memory is kept in the compute dtype.
    """

    def __init__(self, config: XLNetConfig | dict, **kwargs):
        kwargs.setdefault("name", "transformer")
        super().__init__(**kwargs)
        self.config = config = _as_config(config)
        policy = self.dtype_policy
        self.position_encoding = RelativePositionEncoding(config.d_model, config.attn_type, config.bi_data,
                                                          config.clamp_len, config.dropout, dtype=policy)
        self.blocks = [XLNetBlock(config, name=f"layer_{i}", dtype=policy) for i in range(config.n_layer)]
        # tf.train.Checkpoint does not see into Keras 3's tracked lists: name each block as an attribute too.
        for i, block in enumerate(self.blocks):
            setattr(self, f"layer_{i}", block)
        self._embedding_dropout = Dropout(config.dropout, dtype=self.dtype_policy)
        self._output_dropout = Dropout(config.dropout, dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None):
        c = self.config
        init = keras.initializers.RandomNormal(stddev=c.initializer_range)
        bias_shape = (c.n_layer, c.n_head, c.d_head) if c.untie_r else (c.n_head, c.d_head)
        # Not autocast: the lookup gathers float32 rows (casting L rows, not the whole table, each step).
        self.word_embedding = self.add_weight(name="word_embedding", shape=(c.n_token, c.d_model),
                                              initializer=init, autocast=False)
        # The original leaves mask_emb to TF1's default (Glorot uniform) rather than the model initializer.
        self.mask_emb = self.add_weight(name="mask_emb", shape=(1, 1, c.d_model),
                                        initializer="glorot_uniform")
        self.r_w_bias = self.add_weight(name="r_w_bias", shape=bias_shape, initializer=init)
        self.r_r_bias = self.add_weight(name="r_r_bias", shape=bias_shape, initializer=init)
        self.r_s_bias = self.add_weight(name="r_s_bias", shape=bias_shape, initializer=init)
        self.seg_embed = self.add_weight(name="seg_embed", shape=(c.n_layer, 2, c.n_head, c.d_head),
                                         initializer=init)
        self.position_encoding.build()
        for block in self.blocks:
            block.build()
        self.built = True

    def _layer_biases(self, i: int, with_segments: bool) -> dict[str, Any]:
        pick = (lambda w: w[i]) if self.config.untie_r else (lambda w: w)
        biases = {"r_w": pick(self.r_w_bias), "r_r": pick(self.r_r_bias)}
        if with_segments:
            biases.update(r_s=pick(self.r_s_bias), seg_embed=self.seg_embed[i])
        return biases

    def _cache(self, layer_input, memory):
        """New memory of one layer: last mem_len rows of [memory ; layer_input[:reuse_len]], no gradient."""
        c = self.config
        current = layer_input[:, :c.reuse_len] if c.reuse_len else layer_input
        if memory is not None:
            current = tf.concat([tf.cast(memory, current.dtype), current], axis=1)
        return tf.stop_gradient(current[:, -c.mem_len:])

    def _embed(self, inputs, dtype):
        """Word embeddings of ``input_ids`` [B, L, D] and of ``query_ids`` [B, P, D] (None without them), looked
        up together: one sparse gradient for the table instead of two (each is materialised at its full size)."""
        ids = tf.cast(inputs["input_ids"], tf.int32)
        query_ids = inputs.get("query_ids")
        if query_ids is not None:
            ids = tf.concat([ids, tf.cast(query_ids, tf.int32)], axis=1)
        embedded = tf.cast(tf.gather(self.word_embedding, ids), dtype)
        if query_ids is None:
            return embedded, None
        length = tf.shape(inputs["input_ids"])[1]
        return embedded[:, :length], embedded[:, length:]

    def _query_start(self, inputs, query_tokens, batch, num_predict, dtype):
        """The query stream's input [B, P, D]: ``mask_emb`` (XLNet), or the embedded ``query_ids`` with
        ``mask_emb`` where ``pseudo_mask`` is set."""
        mask_emb = tf.cast(self.mask_emb, dtype)
        if query_tokens is None:
            return tf.tile(mask_emb, [batch, num_predict, 1])
        if inputs.get("pseudo_mask") is None:
            return query_tokens
        return tf.where(tf.cast(inputs["pseudo_mask"], tf.bool)[:, :, None], mask_emb, query_tokens)

    def _query_stream(self, inputs, query_tokens, blocked, segment_ids, segment_diff, content_pos, mlen, training):
        """The query stream's input g [B, P, D], whether its rows are keys too, and its attention arguments: rows
        at the positions ``target_mapping`` points to, masked by ``query_perm_mask`` or else by the rows of the
        content mask ``blocked`` [B|1, L, K] at those positions."""
        target_mapping = inputs["target_mapping"]
        batch, num_predict = tf.shape(target_mapping)[0], tf.shape(target_mapping)[1]
        target_pos = tf.argmax(target_mapping, axis=-1, output_type=tf.int32)  # [B, P]
        g = self._embedding_dropout(self._query_start(inputs, query_tokens, batch, num_predict, self.compute_dtype),
                                    training=training)
        query_pos, segment_diff = _at_positions(target_pos, content_pos, mlen, segment_diff)
        query_keys = False
        if inputs.get("query_perm_mask") is not None:
            query_keys = _query_rows_are_keys(inputs["query_perm_mask"], inputs["input_ids"])
            blocked = key_blocked(inputs["query_perm_mask"], mlen, inputs.get("padding_mask"))
            if query_keys and segment_diff is not None:  # the rows' segments are those of their positions
                segments = tf.gather(segment_ids, target_pos, batch_dims=1)
                segment_diff = tf.concat([segment_diff, tf.not_equal(segments[:, :, None], segments[:, None, :])],
                                         axis=2)
        else:
            blocked = _rows_of(blocked, target_pos)
        args = dict(query_pos=query_pos, query_mask=mask_bias(blocked), query_segment_diff=segment_diff,
                    query_weight=tf.reduce_sum(tf.cast(target_mapping, tf.float32), axis=-1))
        return g, query_keys, args

    def _row_stream(self, rows, blocked, segment_diff, content_pos, mlen, batch):
        """``output_rows`` as the last layer's query rows: their positions [B, R] and attention arguments (the
        content stream's mask and segment rows at those positions)."""
        rows = tf.cast(rows, tf.int32)
        if rows.shape.rank == 1:
            rows = tf.broadcast_to(rows[None, :], [batch, tf.shape(rows)[0]])
        query_pos, segment_diff = _at_positions(rows, content_pos, mlen, segment_diff)
        return rows, dict(query_pos=query_pos, query_mask=mask_bias(_rows_of(blocked, rows)),
                          query_segment_diff=segment_diff)

    def call(self, inputs, training=None, output_rows=None):
        check_inputs(inputs, "XLNetModel", self.config)
        if output_rows is not None:
            _check_integer(output_rows, "output_rows", "XLNetModel")
            if _shape(output_rows).rank == 2 and not _shape(output_rows)[:1].is_compatible_with(
                    _shape(inputs["input_ids"])[:1]):
                raise ValueError(f"output_rows [batch, rows] must have input_ids' batch "
                                 f"{_shape(inputs['input_ids'])[0]}, got {_shape(output_rows).as_list()}")
        inputs, output_rows = _check_values(inputs, self.config, output_rows)
        c = self.config
        dtype = self.compute_dtype
        input_ids = tf.cast(inputs["input_ids"], tf.int32)
        segment_ids = inputs.get("segment_ids")
        target_mapping = inputs.get("target_mapping")
        mems = inputs.get("mems")
        if mems is not None and len(mems) != c.n_layer:
            raise ValueError(f"mems must hold one tensor per layer ({c.n_layer}), got {len(mems)}")
        batch, qlen = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        mlen = 0 if mems is None else tf.shape(mems[0])[1]
        klen = mlen + qlen
        if c.bi_data:
            tf.debugging.assert_equal(batch % 2, 0, message="bi_data needs an even batch size per replica")

        query_blocked, content_blocked = stream_masks(qlen, mlen, inputs.get("padding_mask"),
                                                      inputs.get("perm_mask"), c.attn_type, c.same_length)
        if mems is not None and inputs.get("mems_padding_mask") is not None:
            query_blocked, content_blocked = (
                memory_padding_blocked(blocked, inputs["mems_padding_mask"], qlen)
                for blocked in (query_blocked, content_blocked))
        segment_diff = None
        if segment_ids is not None:
            segment_ids = tf.cast(segment_ids, tf.int32)
            key_segments = tf.concat([tf.zeros([batch, mlen], tf.int32), segment_ids], axis=1)  # memory = 0
            segment_diff = tf.not_equal(segment_ids[:, :, None], key_segments[:, None, :])

        h, query_tokens = self._embed(inputs, dtype)
        h = self._embedding_dropout(h, training=training)
        position = self.position_encoding(qlen, klen, training=training)
        attention_args = dict(content_mask=mask_bias(content_blocked), segment_diff=segment_diff)
        content_pos = None  # consecutive: the content stream's row i sits at key coordinate mlen + i
        if inputs.get("position_ids") is not None:
            content_pos = mlen + tf.cast(inputs["position_ids"], tf.int32)
            memory_pos = tf.broadcast_to(tf.range(mlen)[None, :], [batch, mlen])
            attention_args.update(content_pos=content_pos, key_pos=tf.concat([memory_pos, content_pos], axis=1))

        g, query_keys = None, False
        if target_mapping is not None:
            g, query_keys, query_args = self._query_stream(inputs, query_tokens, query_blocked, segment_ids,
                                                           segment_diff, content_pos, mlen, training)
            attention_args.update(query_args)

        rows = None
        if output_rows is not None:
            if target_mapping is not None:
                raise ValueError("output_rows cannot be combined with target_mapping (the query stream)")
            rows, row_args = self._row_stream(output_rows, content_blocked, segment_diff, content_pos, mlen, batch)

        new_mems = []
        for i, block in enumerate(self.blocks):
            memory = None if mems is None else mems[i]
            if c.mem_len > 0:
                new_mems.append(self._cache(h, memory))
            biases = self._layer_biases(i, segment_ids is not None)
            if rows is not None and i == c.n_layer - 1:
                _, h = block(h, position, biases, query=tf.gather(h, rows, batch_dims=1), memory=memory,
                             training=training, content_out=False, **attention_args, **row_args)
            else:
                h, g = block(h, position, biases, query=g, memory=memory, query_keys=query_keys, training=training,
                             **attention_args)

        outputs = {"sequence_output": self._output_dropout(h, training=training)}
        if g is not None:
            outputs["query_output"] = self._output_dropout(g, training=training)
        if c.mem_len > 0:
            outputs["new_mems"] = new_mems
        return outputs

    def tf1_variables(self) -> dict[str, keras.Variable]:
        """This network's variables by their names in the original TF1 checkpoints."""
        prefix = "model/transformer/"
        names = {
            "word_embedding/lookup_table": self.word_embedding,
            "mask_emb/mask_emb": self.mask_emb,
            "r_w_bias": self.r_w_bias,
            "r_r_bias": self.r_r_bias,
            "r_s_bias": self.r_s_bias,
            "seg_embed": self.seg_embed,
        }
        for i, block in enumerate(self.blocks):
            attn, ff = block.rel_attn, block.ff
            for name in ("q", "k", "v", "r", "o"):
                names[f"layer_{i}/rel_attn/{name}/kernel"] = getattr(attn, f"{name}_kernel")
            names[f"layer_{i}/rel_attn/LayerNorm/gamma"] = attn.layer_norm.gamma
            names[f"layer_{i}/rel_attn/LayerNorm/beta"] = attn.layer_norm.beta
            names[f"layer_{i}/ff/layer_1/kernel"] = ff.layer_1.kernel
            names[f"layer_{i}/ff/layer_1/bias"] = ff.layer_1.bias
            names[f"layer_{i}/ff/layer_2/kernel"] = ff.layer_2.kernel
            names[f"layer_{i}/ff/layer_2/bias"] = ff.layer_2.bias
            names[f"layer_{i}/ff/LayerNorm/gamma"] = ff.layer_norm.gamma
            names[f"layer_{i}/ff/LayerNorm/beta"] = ff.layer_norm.beta
        return {prefix + name: var for name, var in names.items()}

    def get_config(self):
        # From Layer's: ``trainable`` (a frozen network stays frozen through a .keras file) and what Keras adds.
        return dict(super().get_config(), config=self.config.to_dict())

    @classmethod
    def from_config(cls, config):
        return from_config_frozen_or_not(cls, config)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetPretrainer(NamedInputs, keras.Model):
    """``XLNetModel`` plus the LM head: logits = hidden . word_embedding^T + bias (``model/lm_loss/bias``).

    Outputs the network's dict plus ``lm_logits`` (float32): [B, P, V] from the query stream when
    ``target_mapping`` is given, else [B, L, V] from the content stream; with the input ``lm_positions`` int
    [B, Y], the rows ``lm_positions`` of ``[content stream ; query stream]`` ([B, Y, V]).
    """

    def __init__(self, config: XLNetConfig | dict, **kwargs):
        kwargs.setdefault("name", "xlnet_pretrainer")
        super().__init__(**kwargs)
        self.config = _as_config(config)
        self.xlnet = XLNetModel(self.config, dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None):
        self.lm_bias = self.add_weight(name="lm_bias", shape=(self.config.n_token,), initializer="zeros",
                                       autocast=False)  # added to float32 logits
        self.built = True

    def call(self, inputs, training=None):
        check_inputs(inputs, self.name, self.config)  # before the rules read them
        positions = inputs.get("lm_positions")
        rules = _Rules(self.name)
        if positions is not None and rules.mode is not None:
            query = inputs.get("target_mapping") is not None
            rows = tf.shape(inputs["input_ids"])[1] + (tf.shape(inputs["target_mapping"])[1] if query else 0)
            rules.in_range("lm_positions", positions, rows, "the content rows" + (", then the query rows" if query
                                                                                    else ""))
            positions = rules.gate(positions)
        outputs = dict(self.xlnet(inputs, training=training))
        hidden = outputs.get("query_output", outputs["sequence_output"])
        if positions is not None:
            rows = tf.concat([outputs["sequence_output"]] + ([hidden] if "query_output" in outputs else []), axis=1)
            positions = tf.cast(positions, tf.int32)
            # The rows picked by a one-hot product: a matmul each way, where a gather's gradient is a scatter.
            pick = tf.one_hot(positions, tf.shape(rows)[1], dtype=rows.dtype)
            hidden = tf.matmul(pick, rows)
        table = tf.cast(self.xlnet.word_embedding, hidden.dtype)
        shape = tf.shape(hidden)
        logits = matmul(tf.reshape(hidden, [-1, shape[2]]), table, transpose_weight=True)
        # The vocabulary, not -1: no prediction slots (P = 0) leave nothing to infer -1 from.
        logits = tf.reshape(logits, tf.concat([shape[:2], tf.shape(table)[:1]], 0))
        outputs["lm_logits"] = tf.cast(logits, tf.float32) + self.lm_bias
        return outputs

    def tf1_variables(self) -> dict[str, keras.Variable]:
        names = self.xlnet.tf1_variables()
        names["model/lm_loss/bias"] = self.lm_bias
        return names

    def get_config(self):
        # From Layer's: ``trainable`` (a frozen network stays frozen through a .keras file) and what Keras adds.
        return dict(super().get_config(), config=self.config.to_dict())

    @classmethod
    def from_config(cls, config):
        return from_config_frozen_or_not(cls, config)
