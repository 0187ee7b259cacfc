"""The fast backend (``xlnet_tf.kernels.fast``) against the plain definitions it replaces: forward and every
gradient, float32 and bfloat16, with and without dropout (the same mask from the same seed), shapes that are not
multiples of the C++ kernels' 16 lanes; the contract binding each plain definition to its fast version; the one
switch; the C++ kernels' errors for bad inputs.

The tests of the C++ kernels are skipped only where there is no C++ compiler, and never under CI=true (there a
missing compiler fails them). Where there is one, a kernel library that does not build or load fails them, with the
compiler's error: they never pass by running the plain ops twice."""

import ast
import importlib
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import xlnet_tf
from background import background
from needs import require_compiler
from xlnet_tf import kernels, ops
from xlnet_tf.kernels import fast
from xlnet_tf.layers.attention import attention_probs
from xlnet_tf.layers.feedforward import bias_activation_dropout
from xlnet_tf.layers.linear import matmul
from xlnet_tf.layers.normalization import residual_layer_norm


@pytest.fixture(scope="module")
def kernel_library():
    """The C++ kernels, built and loaded; skips where no compiler is found (fails under CI=true), fails where one
    is and the build or the load fails."""
    compiler = require_compiler()
    try:
        tf.load_op_library(str(ops.build()))
        failure = None
    except Exception as error:  # noqa: BLE001 - whatever it is, it is the failure to show
        failure = error
    if failure is not None:
        pytest.fail(f"a C++ compiler is here ({' '.join(compiler)}), but the custom kernels (xlnet_tf/ops) do not "
                    f"build or load:\n{failure}", pytrace=False)
    assert ops.attention_probs() is not None and ops.fused_adamw() is not None


needs_kernels = pytest.mark.usefixtures("kernel_library")


def _run(backend, fn, inputs, dy):
    """fn(*inputs) and its gradients w.r.t. inputs (output gradient dy), traced with ``backend``; also the op
    types of the traced graph."""
    @tf.function
    def step(*inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            y = fn(*inputs)
        return [y] + tape.gradient(y, list(inputs), output_gradients=tf.cast(dy, y.dtype))

    with kernels.use(backend):
        graph = step.get_concrete_function(*inputs).graph
    op_types = {op.type for op in graph.get_operations()}
    return [tf.cast(t, tf.float32).numpy() for t in step(*inputs)], op_types


def _compare(fn, inputs, dy, op_type, names, tolerance):
    fast, fast_ops = _run("fast", fn, inputs, dy)
    plain, plain_ops = _run("plain", fn, inputs, dy)
    assert op_type in fast_ops and op_type not in plain_ops
    for name, a, b in zip(names, fast, plain):
        scale = np.abs(b).max()
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * scale, err_msg=name)
    return fast, plain


def _normal(rng, shape, dtype, scale=1.0):
    return tf.cast(tf.constant(rng.normal(size=shape) * scale, tf.float32), dtype)


@needs_kernels
@pytest.mark.parametrize("dtype,with_bias,with_dropout,depth", [
    (tf.float32, True, True, 64), (tf.float32, False, False, 40), (tf.float32, False, True, 40),
    (tf.bfloat16, True, True, 64)])
def test_residual_layer_norm(dtype, with_bias, with_dropout, depth):
    rng = np.random.default_rng(3)
    shape = (3, 37, depth)
    gamma = tf.constant(rng.normal(1.0, 0.1, size=depth), tf.float32)
    beta, bias = (tf.constant(rng.normal(0.0, 0.1, size=depth), tf.float32) for _ in range(2))
    seed = tf.constant([7, 11]) if with_dropout else None
    inputs = [_normal(rng, shape, dtype), _normal(rng, shape, dtype), gamma, beta] + ([bias] if with_bias else [])

    def fn(out, x, gamma, beta, *bias):
        return residual_layer_norm(out, x, gamma, beta, 1e-12, 0.1, seed, bias=bias[0] if bias else None)

    # bfloat16 outputs are rounded once: at most one ulp apart; parameter gradients sum 111 rows in float32.
    _compare(fn, inputs, _normal(rng, shape, dtype), "XlnetResidualLayerNorm",
             ["y", "d_out", "d_x", "d_gamma", "d_beta", "d_bias"], 2 ** -7 if dtype == tf.bfloat16 else 2e-5)


@needs_kernels
@pytest.mark.parametrize("dtype,stream,with_segment,mask_batch,rate,with_values", [
    (tf.float32, "content", True, 3, 0.1, False), (tf.float32, "content", False, None, 0.0, False),
    (tf.float32, "query", True, 3, 0.1, False), (tf.float32, "content", True, 1, 0.0, False),
    (tf.bfloat16, "content", True, 3, 0.1, False), (tf.bfloat16, "query", False, 1, 0.1, False),
    (tf.float32, "keys", True, 3, 0.1, False), (tf.bfloat16, "keys", False, 1, 0.0, False),
    (tf.float32, "content", True, 3, 0.1, True), (tf.bfloat16, "query", True, 1, 0.1, True),
    (tf.float32, "aligned", True, 3, 0.1, False), (tf.bfloat16, "aligned", False, 1, 0.1, True)])
def test_attention_probs(dtype, stream, with_segment, mask_batch, rate, with_values):
    """Relative shift or position gather, segment term, mask, softmax and dropout: N=2, B=3, K=37 (13 memory + 24
    current keys); the gradients of ac, bd (zero outside each row's shifted window; with key positions, several
    keys may read one column) and ef. 'keys': keys at explicit positions, permuted and with duplicates (UniLMv2's
    appended copies sit at the positions of the tokens they copy). 'aligned': position scores already shifted
    ([N, B, Q, K], as chunks compute them under XLA). With values: the attention vectors (the C++ probabilities
    times the values against the plain definition's own backward)."""
    rng = np.random.default_rng(5)
    n, b, mlen, qlen = 2, 3, 13, 24
    klen = mlen + qlen
    if stream in ("content", "aligned"):
        q, rlen, query_pos = qlen, klen if stream == "aligned" else klen + qlen, None
    else:  # the query stream: 5 target rows at random positions; a table shorter than the reach (clamped)
        q, rlen = 5, klen + 1
        query_pos = tf.constant(rng.integers(0, klen, size=(b, q)), tf.int32)
    key_pos = None
    if stream == "keys":
        positions = np.stack([rng.permutation(klen) for _ in range(b)])
        positions[:, -6:] = positions[:, :6]
        key_pos = tf.constant(positions, tf.int32)
    inputs = [_normal(rng, (n, b, q, klen), dtype, 3), _normal(rng, (n, b, q, rlen), dtype, 3)]
    segment_diff = None
    if with_segment:
        inputs.append(_normal(rng, (n, b, q, 1), dtype))
        segment_diff = tf.constant(rng.random((b, q, klen)) < 0.5)
    mask = None
    if mask_batch is not None:
        blocked = rng.random((mask_batch, q, klen)) < 0.3
        blocked[0, 1, :] = True  # a fully masked row: uniform, as TensorFlow's softmax gives it
        mask = tf.constant(np.where(blocked, -1e30, 0.0).astype(np.float32))
    seed = tf.constant([17, 23])
    values = _normal(rng, (n, b, klen, 8), dtype) if with_values else None

    def fn(ac, bd, *ef):
        return attention_probs(ac, bd, ef[0] if ef else None, segment_diff, mask, query_pos, rate, seed, key_pos,
                               values=values, aligned=stream == "aligned")

    # bfloat16 with values: the plain backward's row sum reads the rounded attention vectors (one rounding more)
    fast, plain = _compare(fn, inputs, _normal(rng, (n, b, q, 8 if with_values else klen), dtype),
                           "XlnetAttentionProbs", ["out" if with_values else "prob", "d_ac", "d_bd", "d_ef"],
                           (2 ** -6 if with_values else 2 ** -7) if dtype == tf.bfloat16 else 1e-5)
    if rate and not with_values:  # the same elements dropped: the seed's mask is hashed inside the kernel
        np.testing.assert_array_equal(fast[0] == 0, plain[0] == 0)
        assert (fast[0] == 0).mean() > 0.05


@needs_kernels
@pytest.mark.parametrize("dtype,activation,with_dropout", [
    (tf.float32, "gelu", True), (tf.float32, "gelu", False), (tf.float32, "relu", True),
    (tf.bfloat16, "gelu", True)])
def test_bias_activation_dropout(dtype, activation, with_dropout):
    rng = np.random.default_rng(11)
    shape = (3, 37, 40)
    seed = tf.constant([5, 9]) if with_dropout else None

    def fn(h, bias):
        return bias_activation_dropout(h, bias, activation, 0.1, seed)

    fast, plain = _compare(fn, [_normal(rng, shape, dtype, 2), _normal(rng, shape[-1:], dtype)],
                           _normal(rng, shape, dtype), "XlnetBiasActivationDropout", ["y", "d_h", "d_bias"],
                           2 ** -7 if dtype == tf.bfloat16 else 2e-5)
    if with_dropout:
        np.testing.assert_array_equal(fast[0] == 0, plain[0] == 0)


@needs_kernels
@pytest.mark.parametrize("vocab", [7, 37, 1000])
def test_cross_entropy_and_hits(vocab):
    """The LM loss's cross-entropy per row, its hit (the label is the first arg max) and the logits' gradient
    under per-row loss weights, as the training step takes it; vocabularies below, at and past the 16 lanes."""
    from xlnet_tf.objectives.losses import cross_entropy_and_hits

    rng = np.random.default_rng(13)
    logits = rng.normal(size=(3, 11, vocab)) * 4
    labels = rng.integers(0, vocab, size=(3, 11))
    logits[0, :5] = 0.0  # ties everywhere: the first index is the arg max
    labels[0, :2] = 0
    labels[0, 2:5] = vocab - 1
    logits[1, :6, :] = logits[1, :6].min() - 1.0  # the label alone at the maximum: hits
    logits[1, np.arange(6), labels[1, :6]] = 5.0
    labels_t = tf.constant(labels, tf.int32)

    def fn(logits):
        loss, hits = cross_entropy_and_hits(logits, labels_t)
        return tf.stack([loss, hits])

    weights = np.stack([rng.random((3, 11)), np.zeros((3, 11))])  # the hits' gradient is never asked for
    fast, plain = _compare(fn, [tf.constant(logits, tf.float32)], weights, "XlnetCrossEntropy",
                           ["loss and hits", "d_logits"], 2e-6)
    hits = fast[0][1]
    np.testing.assert_array_equal(hits, plain[0][1])
    assert hits[0, :2].all() and not hits[0, 2:5].any() and hits[1, :6].all()


@pytest.mark.parametrize("transpose_weight", [False, True])
def test_matmul_runs_transposed_products_batched(transpose_weight):
    """Only the kernel changes: the values and both gradients are tf.matmul's, and no product with a transposed
    operand is left on 2-D ``MatMul``."""
    rng = np.random.default_rng(11)
    weight = _normal(rng, (4, 5) if transpose_weight else (5, 4), tf.float32)
    fast, _ = _compare(lambda r, w: matmul(r, w, transpose_weight), [_normal(rng, (6, 5), tf.float32), weight],
                       _normal(rng, (6, 4), tf.float32), "BatchMatMulV2", ["y", "d_rows", "d_weight"], 1e-6)

    @tf.function
    def products(rows, weight):
        with tf.GradientTape() as tape:
            tape.watch([rows, weight])
            y = matmul(rows, weight, transpose_weight)
        return tape.gradient(y, [rows, weight])

    graph = products.get_concrete_function(tf.zeros([6, 5]), weight).graph
    assert not [op.name for op in graph.get_operations() if op.type == "MatMul"
                and (op.get_attr("transpose_a") or op.get_attr("transpose_b"))]


@pytest.mark.alone
def test_the_switch(monkeypatch):
    """XLNET_TF_KERNELS selects the process's backend; a bad value is an error naming the variable; use()
    overrides it for what is traced inside, and can leave out single fast paths."""
    monkeypatch.setenv("XLNET_TF_KERNELS", "plian")
    kernels._process_backend.cache_clear()
    try:
        with pytest.raises(ValueError, match="XLNET_TF_KERNELS='plian': expected one of fast, plain"):
            kernels.backend()
        monkeypatch.setenv("XLNET_TF_KERNELS", "plain")
        kernels._process_backend.cache_clear()
        assert kernels.backend() == "plain"
        with kernels.use("fast"):
            assert kernels.backend() == "fast"
    finally:
        kernels._process_backend.cache_clear()
    with pytest.raises(ValueError, match="backend must be one of"):
        with kernels.use("slow"):
            pass

    def op_types(**use):
        with kernels.use("fast", **use):
            graph = tf.function(lambda r, w: matmul(r, w, True)).get_concrete_function(
                tf.zeros([2, 3]), tf.zeros([4, 3])).graph
        return {op.type for op in graph.get_operations()}

    assert "BatchMatMulV2" in op_types() and "BatchMatMulV2" not in op_types(disable={"matmul"})
    assert "BatchMatMulV2" not in op_types(disable=[matmul])  # or the decorated function itself
    with pytest.raises(ValueError, match="'matmull' is no fast path .*attention_probs.*matmul"):
        op_types(disable={"matmull"})  # a typo would time the fast backend against itself


def _decorated_in_sources():
    """(module, function) of every ``@kernels.fast_path(...)`` in xlnet_tf's sources, imported or not."""
    root = pathlib.Path(xlnet_tf.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    "kernels.fast_path" in ast.unparse(d) for d in node.decorator_list):
                found.append((module, node.name))
    return found


def test_every_fast_path_is_accounted_for():
    """Every decorated function in the package names its fast version, or why it has none (plain_only); every
    function of the fast backend is the fast version of one of them (none left behind by a renamed definition)."""
    decorated = _decorated_in_sources()
    assert len(decorated) >= 6, decorated
    paths = {}
    for module, name in decorated:
        path = getattr(importlib.import_module(module), name)
        assert kernels.fast_paths()[name] is path, (module, name)
        assert (path.fast is None) != (path.plain_only is None), (module, name)
        paths[name] = path
    versions = [p.fast for p in paths.values() if p.fast is not None]
    defined = [f for f in vars(fast).values() if callable(f) and getattr(f, "__module__", None) == fast.__name__
               and not f.__name__.startswith("_")]
    assert sorted(f.__name__ for f in defined) == sorted(f.__name__ for f in versions)
    assert all(any(f is v for v in versions) for f in defined)



@pytest.mark.slow
@background
def test_importing_the_fast_paths_builds_nothing(tmp_path):
    """The signatures are compared at import without the C++ library: it is built (and loaded) on first use."""
    code = ("import xlnet_tf.models.xlnet, xlnet_tf.objectives.losses, xlnet_tf.training.optimization\n"
            "from xlnet_tf import kernels, ops\n"
            "assert len(kernels.fast_paths()) >= 6 and ops._library.cache_info().currsize == 0")
    env = dict(os.environ, XLNET_TF_OPS_DIR=str(tmp_path / "ops"), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (tmp_path / "ops").exists()

def _plain(ac, bd, mask, rate: float = 0.0, *, seed=None):
    return ac


@pytest.mark.parametrize("fast_version,difference", [
    (lambda ac, bd, mask, rate=0.0: NotImplemented, "it lacks parameter 'seed'"),
    (lambda ac, bd, mask, rate=0.0, *, seed=None, key_pos=None: NotImplemented,
     "it has an extra parameter 'key_pos'"),
    (lambda ac, mask, bd, rate=0.0, *, seed=None: NotImplemented, "parameter 2 is 'mask', not 'bd'"),
    (lambda ac, bd, mask, rate=0.0, seed=None: NotImplemented,
     "parameter 'seed' is positional or keyword, not keyword-only"),
    (lambda ac, bd, mask, rate=0.1, *, seed=None: NotImplemented, "parameter 'rate' defaults to 0.1, not 0.0"),
    (lambda ac, bd, mask, rate, *, seed=None: NotImplemented, "parameter 'rate' defaults to nothing, not 0.0"),
])
def test_a_fast_version_must_take_the_plain_parameters(monkeypatch, fast_version, difference):
    """A fast version whose parameters differ from its plain definition's (a parameter added to the plain math
    and not to the kernel, reordered, of another kind, another default) is an error when the plain definition is
    decorated, i.e. at import, naming both; nothing is registered."""
    monkeypatch.setattr(kernels, "_PATHS", dict(kernels._PATHS))  # pylint: disable=protected-access
    with pytest.raises(TypeError) as error:
        kernels.fast_path(fast=fast_version)(_plain)
    message = str(error.value)
    assert f"{__name__}.<lambda>(" in message and f"{__name__}._plain(ac, bd, mask, rate=0.0, *, seed=None)" in message
    assert difference in message
    assert "_plain" not in kernels.fast_paths()
    # Annotations are not compared; the same parameters register.
    assert kernels.fast_path(fast=lambda ac, bd, mask, rate=0.0, *, seed=None: NotImplemented)(_plain).fast


def test_a_fast_path_names_its_fast_version_or_why_it_has_none(monkeypatch):
    """A new decorated function must say what replaces it: bare ``@kernels.fast_path`` or neither argument is an
    error at import; ``plain_only`` declares it plain on every backend. Names are unique (``use(disable=...)``)
    and a fast version replaces one definition."""
    monkeypatch.setattr(kernels, "_PATHS", dict(kernels._PATHS))  # pylint: disable=protected-access
    with pytest.raises(TypeError):
        kernels.fast_path(_plain)
    with pytest.raises(TypeError, match=r"name the fast version \(fast=...\) or say why there is none"):
        kernels.fast_path()
    with pytest.raises(TypeError, match="name the fast version"):
        kernels.fast_path(fast=fast.matmul, plain_only="both")

    def doubled(x):
        return 2 * x

    path = kernels.fast_path(plain_only="no kernel yet")(doubled)
    assert path.fast is None and path.plain_only == "no kernel yet" and kernels.fast_paths()["doubled"] is path
    with kernels.use("fast"):
        assert path(3) == 6

    def matmul(rows, weight, transpose_weight: bool = False):  # another definition of an existing name
        return rows

    with pytest.raises(ValueError, match="test_kernels.*matmul and xlnet_tf.layers.linear.matmul have one name"):
        kernels.fast_path(plain_only="x")(matmul)

    def product(rows, weight, transpose_weight: bool = False):
        return rows

    with pytest.raises(ValueError, match="xlnet_tf.kernels.fast.matmul is the fast version of "
                                         "xlnet_tf.layers.linear.matmul already"):
        kernels.fast_path(fast=fast.matmul)(product)


def test_the_fast_version_runs_unless_it_does_not_apply(monkeypatch):
    """The decorated function calls its fast version with the caller's arguments under the fast backend, and
    the plain definition where that returns NotImplemented, under the plain backend, or with the path disabled."""
    monkeypatch.setattr(kernels, "_PATHS", dict(kernels._PATHS))  # pylint: disable=protected-access
    calls = []

    def fast_scaled(x, factor=2, *, offset=0):
        calls.append((x, factor, offset))
        return NotImplemented if x < 0 else ("fast", x * factor + offset)

    @kernels.fast_path(fast=fast_scaled)
    def scaled(x, factor=2, *, offset=0):
        return ("plain", x * factor + offset)

    with kernels.use("fast"):
        assert scaled(3, offset=1) == ("fast", 7) and calls == [(3, 2, 1)]
        assert scaled(-1, 3) == ("plain", -3)
    with kernels.use("fast", disable={"scaled"}):
        assert scaled(3) == ("plain", 6)
    with kernels.use("plain"):
        assert scaled(3) == ("plain", 6)
    assert len(calls) == 2


@needs_kernels
def test_fast_paths_fall_back_inside_xla():
    """XLA (jit_compile, TPUs) cannot run the C++ kernels: the plain ops are traced there, with the same values."""
    rng = np.random.default_rng(2)
    out, x = _normal(rng, (4, 40), tf.float32), _normal(rng, (4, 40), tf.float32)
    fn = tf.function(lambda o, x: residual_layer_norm(o, x, tf.ones([40]), tf.zeros([40]), 1e-12), jit_compile=True)
    with kernels.use("plain"):
        want = residual_layer_norm(out, x, tf.ones([40]), tf.zeros([40]), 1e-12)
    np.testing.assert_allclose(fn(out, x).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@needs_kernels
def test_kernels_reject_bad_shapes():
    forward, _ = ops.residual_layer_norm()
    rows, vec = tf.zeros([4, 8]), tf.zeros([8])
    with pytest.raises(tf.errors.InvalidArgumentError, match="gamma/beta must be \\[8\\], got \\[7\\]"):
        forward(rows, rows, tf.zeros([0]), tf.zeros([7]), vec, tf.zeros([0], tf.int32), has_bias=False,
                has_dropout=False, threshold=0, scale=1.0, epsilon=1e-12)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"seed must be \[2\], got \[3\]"):
        forward(rows, rows, tf.zeros([0]), vec, vec, tf.zeros([3], tf.int32), has_bias=False,
                has_dropout=True, threshold=0, scale=1.0, epsilon=1e-12)

    forward, backward = ops.attention_probs()
    scores, table = tf.zeros([2, 3, 4, 8]), tf.zeros([2, 3, 4, 12])
    pos = tf.zeros([3, 4], tf.int32)
    args = dict(has_segment=False, has_mask=True, has_dropout=False, threshold=0, scale=1.0)
    none = dict(ef=tf.zeros([0]), segment_diff=tf.zeros([0], tf.bool), seed=tf.zeros([0], tf.int32),
                key_pos=tf.zeros([0], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"key_pos must be \[B, K\] = \[3, 8\] or empty"):
        forward(ac=scores, bd=table, mask=tf.zeros([1, 4, 8]), query_pos=pos, **dict(none, key_pos=pos), **args)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"mask must be \[1 or B, Q, K\] = \[3, 4, 8\], got \[3,4,7\]"):
        forward(ac=scores, bd=table, mask=tf.zeros([3, 4, 7]), query_pos=pos, **none, **args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bd must be \[N, B, Q, R\]"):
        forward(ac=scores, bd=tf.zeros([2, 3, 5, 12]), mask=tf.zeros([1, 4, 8]), query_pos=pos, **none, **args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"query_pos must be \[B, Q\] = \[3, 4\]"):
        forward(ac=scores, bd=table, mask=tf.zeros([1, 4, 8]), query_pos=tf.zeros([4, 3], tf.int32), **none, **args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"seed must be \[2\]"):
        forward(ac=scores, bd=table, mask=tf.zeros([1, 4, 8]), query_pos=pos,
                **dict(none, seed=tf.zeros([3], tf.int32)), **dict(args, has_dropout=True))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"softmax must be shaped like d_prob"):
        backward(d_prob=scores, softmax=tf.zeros([2, 3, 4, 7]), segment_diff=tf.zeros([0], tf.bool),
                 seed=tf.zeros([0], tf.int32), query_pos=pos, key_pos=tf.zeros([0], tf.int32), position_len=12,
                 has_segment=False, has_dropout=False, threshold=0, scale=1.0)

    forward, backward = ops.bias_activation_dropout()
    attrs = dict(activation="gelu", has_dropout=False, threshold=0, scale=1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be \[8\], got \[7\]"):
        forward(tf.zeros([4, 8]), tf.zeros([7]), tf.zeros([0], tf.int32), **attrs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"dy must be shaped like h"):
        backward(tf.zeros([4, 7]), tf.zeros([4, 8]), tf.zeros([8]), tf.zeros([0], tf.int32), **attrs)

    forward, backward = ops.cross_entropy()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"label 9 of row 1 is outside the vocabulary \[0, 8\)"):
        forward(tf.zeros([2, 8]), tf.constant([0, 9]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"labels must be \[R\] = \[2\], got \[3\]"):
        forward(tf.zeros([2, 8]), tf.zeros([3], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"d_loss and log_norm must be \[R\] = \[2\]"):
        backward(tf.zeros([3]), tf.zeros([2, 8]), tf.zeros([2], tf.int32), tf.zeros([2]))
