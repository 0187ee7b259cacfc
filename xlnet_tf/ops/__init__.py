"""Custom TensorFlow CPU kernels, compiled from the C++ beside this file on first use and cached.

* ``fused_adamw.cc``: the optimizer's AdamW update (gradient clip scale, decoupled weight decay and Adam) as one
  pass over each float32 variable. On CPU that update is memory-bound, and TensorFlow's own ops make three passes
  (clip multiply, decay, ``ResourceApplyAdam``): about twice the time for the same, bit-identical, result.
* ``residual_layer_norm.cc``: training's ``LayerNorm(x + dropout(out + bias))`` forward and backward, row by row
  in cache with the rows split across threads (XLA's CPU kernels for the chain make several passes, with
  single-threaded reductions).
* ``bias_activation_dropout.cc``: the feed-forward block's ``dropout(gelu(h + bias))`` (or relu) forward and
  backward, one pass each way, dropout bits hashed in the kernel.
* ``attention_probs.cc``: everything between the attention score matmuls and ``prob . v`` in training (relative
  shift or query-position gather, segment term, mask, float32 softmax, dropout with its bits hashed in the kernel
  from the layer's seed), forward and backward, one pass over rows of keys each, with explicit 16-float vectors
  compiled for AVX-512, AVX2 and SSE and chosen at load time. Replaces about ten TensorFlow/XLA kernels each way.
* ``cross_entropy.cc``: the LM loss's cross-entropy and accuracy (hit) per prediction row, forward in one read of
  the logits, backward writing the loss-weighted gradient in one pass (TensorFlow's cross-entropy, arg max and
  gradient scaling make four passes over [rows, vocabulary]).

The library is built with a C++ compiler (``$CXX``, else ``c++``/``g++``/``clang++``) against the installed
TensorFlow, into ``$XLNET_TF_OPS_DIR`` (default ``~/.cache/xlnet_tf/ops``), named by a hash of what determines the
binary (the sources, the TensorFlow build, the compiler command and the flags, with the TensorFlow install's
directory taken out of them: every checkout and virtual environment shares one library), written under a temporary
name and renamed, so concurrent workers never load a half-written file. A build is logged before it starts (about
30 s). ``python -m xlnet_tf.ops`` builds it ahead of time (for images and air-gapped clusters, point
``XLNET_TF_OPS_DIR`` at a shared directory). ``xlnet_tf.kernels.fast`` calls them; without a compiler the plain
TensorFlow ops run instead (logged once): the same math, slower on CPU.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from absl import logging

from xlnet_tf.io_utils import process_alive

_SOURCES = sorted(Path(__file__).parent.glob("*.cc"))
_HEADERS = sorted(Path(__file__).parent.glob("*.h"))
# No FMA contraction: every product is rounded as ResourceApplyAdam rounds it. Without errno, sqrt vectorises.
_OPT_FLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-w"]
_BUILDING = threading.Lock()
# A build takes under a minute (about 35 s on 2 busy cores); a temporary file this old is a killed build's.
_STALE_AFTER_S = 3600


def cache_dir() -> Path:
    """Where built libraries go: ``$XLNET_TF_OPS_DIR``, else ``$XDG_CACHE_HOME`` or ``~/.cache``, ``/xlnet_tf/ops``."""
    if os.environ.get("XLNET_TF_OPS_DIR"):
        return Path(os.environ["XLNET_TF_OPS_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xlnet_tf" / "ops"


def _compiler() -> list[str] | None:
    """The compiler command: ``$CXX`` (split like a shell would, e.g. ``ccache g++``), else the first found."""
    if os.environ.get("CXX"):
        return shlex.split(os.environ["CXX"])
    found = next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    return None if found is None else [found]


def build(verbose: bool = False) -> Path:
    """Builds the library if it is not cached yet; returns its path. Raises ``RuntimeError`` with the
    compiler's output if it cannot be built."""
    import tensorflow as tf

    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C++ compiler found (set $CXX, or install g++ or clang++)")
    flags = _OPT_FLAGS + list(tf.sysconfig.get_compile_flags())
    link = list(tf.sysconfig.get_link_flags())
    sources = [p.read_text() for p in _SOURCES + _HEADERS]
    # The -I/-L paths name where this TensorFlow is installed, which does not change the binary: keyed on them, every
    # checkout and virtual environment (or one reached through a symlink) rebuilt the same library. The library
    # links libtensorflow_framework by name, found in the process that loads it, so no path is built in.
    installed = tf.sysconfig.get_lib()
    tensorflow = [tf.__version__, tf.version.GIT_VERSION, *(f.replace(installed, "<tensorflow>") for f in flags + link)]
    key = hashlib.sha256("\0".join([*sources, *compiler, *tensorflow]).encode())
    target = cache_dir() / f"xlnet_tf_ops-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    with _BUILDING:  # a second thread of this process waits for the first one's build rather than compiling again
        return target if target.exists() else _build(target, compiler, flags, link, verbose)


def _build(target: Path, compiler: list[str], flags: list[str], link: list[str], verbose: bool) -> Path:
    # Said before the build, not after: the first training step otherwise waits about 35 s in silence, logged
    # afterwards as its tracing.
    logging.info("building xlnet_tf's C++ CPU kernels into %s (about 30 s, once per TensorFlow version and "
                 "kernel sources; python -m xlnet_tf.ops builds them ahead of time)", target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target.parent)
    # Host and pid in the name tell a later build whether the one writing it is still running.
    fd, tmp = tempfile.mkstemp(prefix=f"{target.name}.{socket.gethostname()}.{os.getpid()}.", suffix=".tmp",
                               dir=target.parent)
    os.close(fd)
    try:
        # One compiler per source at once (the sources take 5-10 s each), then one link.
        with tempfile.TemporaryDirectory(prefix="xlnet_tf_ops.") as objects:
            compiles = [[*compiler, "-c", "-fPIC", *flags, str(source), "-o", os.path.join(objects, f"{i}.o")]
                        for i, source in enumerate(_SOURCES)]
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            with concurrent.futures.ThreadPoolExecutor(min(len(compiles), cpus)) as pool:
                list(pool.map(functools.partial(_compile, verbose=verbose), compiles))  # raises the first failure
            _compile([*compiler, "-shared", "-fPIC", *(c[-1] for c in compiles), "-o", tmp, *link], verbose)
        os.chmod(tmp, 0o755)  # mkstemp's 0600 would hide a shared cache's library from other users
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def _remove_stale_temporaries(directory: Path):
    """Removes the temporary files that killed builds left in ``directory`` (SIGKILL skips the cleanup): those
    whose process on this host is gone, and any older than ``_STALE_AFTER_S`` (another host's, whose process
    cannot be asked, or unnamed). A running build's file is left alone (it renames it when done)."""
    host, now = socket.gethostname(), time.time()
    for path in directory.glob("xlnet_tf_ops-*.tmp"):
        name = path.name.split(".")  # xlnet_tf_ops-KEY, so, HOST (which may hold dots), PID, RANDOM, tmp
        dead = len(name) >= 6 and ".".join(name[2:-3]) == host and name[-3].isdigit() and not process_alive(
            int(name[-3]))
        try:
            if dead or now - path.stat().st_mtime > _STALE_AFTER_S:
                path.unlink()
        except OSError:  # gone meanwhile (renamed by its build, or removed by another), or not ours to remove
            pass


def _compile(command: list[str], verbose: bool):
    """Runs one compiler command; ``RuntimeError`` with its errors if it fails."""
    if verbose:
        print(" ".join(command))
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:  # e.g. $CXX names no program
        raise RuntimeError(f"building xlnet_tf/ops failed ({' '.join(command)}): {error}") from error
    if result.returncode != 0:
        raise RuntimeError(f"building xlnet_tf/ops failed ({' '.join(command)}):\n"
                           f"{_compiler_errors(result.stderr)}")


def _compiler_errors(stderr: str, limit: int = 4000) -> str:
    """The compiler's and linker's error lines (``file:line:col: error: ...``, ``undefined reference``) if it
    printed any, else the end of its output: its notes on the other sources (e.g. GCC's ABI notes on the 64-byte
    vectors) would bury an error at the start of a plain tail."""
    errors = "\n".join(line for line in stderr.splitlines()
                       if "error" in line.lower() or "undefined reference" in line)
    return errors[:limit] if errors else stderr[-limit:]


@functools.cache
def _library():
    import tensorflow as tf

    try:
        path = build()
        return tf.load_op_library(str(path))
    except Exception as error:  # noqa: BLE001 - any failure means: use TensorFlow's ops
        logging.warning("xlnet_tf: custom CPU kernels unavailable, using the plain TensorFlow ops instead "
                        "(same math, slower on CPU): %s", error)
        return None


def _kernel_pair(name: str):
    """The library's ``(name, name + '_grad')`` ops, or None where the library cannot be built or is off."""
    library = _library()
    return None if library is None else (getattr(library, name), getattr(library, name + "_grad"))


def fused_adamw():
    """The ``XlnetFusedAdamW`` op (CPU, float32), or None where it cannot be built.

    ``fused_adamw(var, m, v, grad, grad_scale, decay, lr, beta1_power, beta2_power, beta1, beta2, epsilon)``
    updates the resource variables ``var``, ``m``, ``v`` in place, bit-identically to ``grad * grad_scale``,
    ``var.assign(var * decay)`` and ``ResourceApplyAdam`` with the other arguments.
    """
    library = _library()
    return None if library is None else library.xlnet_fused_adam_w


def residual_layer_norm():
    """``(forward, backward)`` ops ``XlnetResidualLayerNorm`` / ``XlnetResidualLayerNormGrad`` (CPU; float32 or
    bfloat16 rows), or None where the library cannot be built."""
    return _kernel_pair("xlnet_residual_layer_norm")


def attention_probs():
    """``(forward, backward)`` ops ``XlnetAttentionProbs`` / ``XlnetAttentionProbsGrad`` (CPU; float32 or
    bfloat16 scores), or None where the library cannot be built."""
    return _kernel_pair("xlnet_attention_probs")


def bias_activation_dropout():
    """``(forward, backward)`` ops ``XlnetBiasActivationDropout`` / ``XlnetBiasActivationDropoutGrad`` (CPU;
    float32 or bfloat16 rows; 'gelu' or 'relu'), or None where the library cannot be built."""
    return _kernel_pair("xlnet_bias_activation_dropout")


def cross_entropy():
    """``(forward, backward)`` ops ``XlnetCrossEntropy`` / ``XlnetCrossEntropyGrad`` (CPU; float32 logits
    [R, V]), or None where the library cannot be built."""
    return _kernel_pair("xlnet_cross_entropy")


def in_xla_context() -> bool:
    """Whether ops built now are compiled by XLA (``jit_compile``, TPU), which cannot run custom kernels."""
    from tensorflow.python.framework import ops as framework_ops
    from tensorflow.python.ops import control_flow_util

    return control_flow_util.GraphOrParentsInXlaContext(framework_ops.get_default_graph())


def optimization_barrier(*tensors) -> tuple:
    """``tensors`` behind one XLA optimisation barrier: the same values, which XLA's passes neither fuse, merge nor
    recompute across, nor constant-fold through. Gradient: the identity. For ops XLA compiles (``in_xla_context()``);
    TensorFlow has no public op for it, this is its XLA bridge's own."""
    import tensorflow as tf
    from tensorflow.compiler.tf2xla.ops import gen_xla_ops

    @tf.custom_gradient
    def barrier(*xs):
        return tuple(gen_xla_ops.xla_optimization_barrier(list(xs))), lambda *grads: grads
    return barrier(*tensors)


def row_windows(x, start, size: int, edge: int = 0):
    """x [N, B, Q, L], start int32 [B, Q] -> [N, B, Q, size]: row (n, b, q)'s entries ``start[b, q]`` to
    ``start[b, q] + size - 1`` of the row extended by ``edge`` copies of its last entry, each window inside that
    (a start past ``L + edge - size`` is taken as that, as XLA's gather takes it). For ops XLA compiles
    (``in_xla_context()``), with static shapes.

    One XLA gather with a start per row; its gradient is the same gather on the padded gradient, which puts each
    row's window back at its start. TensorFlow has no public op for a gather of windows, this is its XLA bridge's
    own. For a TPU (``for_tpu()``) the rows are shifted instead (``_shifted_windows``): XLA's TPU backend runs this
    gather as a loop with one iteration per row (base-512: 8,160 a layer, bench/reports/gpu.md)."""
    import tensorflow as tf

    if for_tpu():
        return _shifted_windows(x, start, size, edge)
    if edge:
        x = tf.concat([x, tf.repeat(x[..., -1:], edge, axis=-1)], axis=-1)
    from tensorflow.compiler.tf2xla.python import xla
    from tensorflow.compiler.xla import xla_data_pb2

    numbers = xla_data_pb2.GatherDimensionNumbers(offset_dims=[3], collapsed_slice_dims=[0, 1, 2],
                                                  start_index_map=[0, 1, 2, 3], index_vector_dim=3)
    n, b, q, width = x.shape

    def windows(operand, first, length):  # the row's coordinates (n, b, q) and its window's first column
        rows = tf.meshgrid(tf.range(n), tf.range(b), tf.range(q), indexing="ij")
        first = tf.broadcast_to(tf.cast(first, tf.int32)[None], [n, b, q])
        return xla.gather(operand, tf.stack(rows + [first], axis=-1), numbers, [1, 1, 1, length],
                          indices_are_sorted=True)

    start = tf.clip_by_value(tf.cast(start, tf.int32), 0, width - size)

    @tf.custom_gradient
    def gather(x):
        def grad(dy):  # column c of row (n, b, q) gets dy[..., c - start] inside the window, else 0
            padded = tf.pad(dy, [[0, 0], [0, 0], [0, 0], [width, width]])
            return windows(padded, width - start, width)
        return windows(x, start, size), grad
    return gather(x)


def _shifted_windows(x, start, size: int, edge: int = 0):
    """``row_windows`` by whole-row shifts, no gather: digit k of a row's start in base 4 shifts the row by 0 to 3
    times 4^k (a select among slices), one pass per digit of the largest start (base-512's query stream: 5), the
    largest shifts first, so that the later passes read narrower rows. Each pass reads and writes the rows, which
    a gather does once, so it is the TPU's form only (a GPU gathers in parallel); of bases 2, 4 and 8, XLA's TPU
    cost model prices 4 the lowest (bench/reports/gpu.md). The gradient shifts back the same way, one select a
    pass (the slices' own gradients would pad and add a tensor a slice). Columns past the row's end read its last
    entry, selected after the shifts and summed into it in the gradient's last pass: the ``edge`` copies are never
    written (a TPU copies a concatenation, and every pass would read it)."""
    import tensorflow as tf

    width = x.shape[-1]
    span = width + edge - size  # the largest start
    levels = list(reversed(range(-(-span.bit_length() // 2))))
    top = {k: min(3, span >> 2 * k) for k in levels}  # a level's largest digit (the first's may be below 3)
    pad = size + sum(d << 2 * k for k, d in top.items()) - width  # every pass drops its largest shift
    start = tf.clip_by_value(tf.cast(start, tf.int32), 0, span)[None, ..., None]
    edges = [[0, 0]] * (x.shape.rank - 1)

    def digit(k):
        return tf.bitwise.bitwise_and(tf.bitwise.right_shift(start, 2 * k), 3)

    past_end = start + tf.range(size) >= width if edge else None  # [1, B, Q, size]: the extension's columns

    @tf.custom_gradient
    def shift(x):
        y = tf.pad(x, edges + [[0, pad]]) if pad else x
        for k in levels:
            unit, rest = 1 << 2 * k, y.shape[-1] - (top[k] << 2 * k)
            out = y[..., :rest]
            for d in range(1, top[k] + 1):
                out = tf.where(digit(k) == d, y[..., d * unit:d * unit + rest], out)
            y = out
        if edge:
            y = tf.where(past_end, x[..., width - 1:], y)

        def grad(dy):  # each pass undone, the last first: the row moves back right by d 4^k, zeros beside
            if edge:  # the extension's columns to the last entry, added in the last pass's kernel
                last = tf.reduce_sum(tf.where(past_end, dy, tf.zeros_like(dy)), axis=-1, keepdims=True)
                dy = tf.where(past_end, tf.zeros_like(dy), dy)
            for k in reversed(levels):
                unit = 1 << 2 * k
                out = tf.pad(dy, edges + [[0, top[k] * unit]])
                for d in range(1, top[k] + 1):
                    out = tf.where(digit(k) == d, tf.pad(dy, edges + [[d * unit, (top[k] - d) * unit]]), out)
                dy = out
            dy = dy[..., :width]
            return tf.where(tf.range(width) == width - 1, dy + last, dy) if edge else dy
        return y, grad
    return shift(x)


_FOR_TPU = threading.local()


@contextlib.contextmanager
def building_for_tpu(on: bool = True):
    """Ops built inside are for a TPU (``on``) or for another device (False) wherever they are traced, whatever
    ``for_tpu()`` would find: a program compiled on one host for a TPU (``bench/xla/export.py --for_tpu``), or a
    TPU run timing the other devices' forms. A TPU run needs none of it."""
    previous = getattr(_FOR_TPU, "on", None)
    _FOR_TPU.on = on
    try:
        yield
    finally:
        _FOR_TPU.on = previous


def for_tpu() -> bool:
    """Whether ops built now run on a TPU: under ``TPUStrategy`` (what a TPU run uses), in a process whose devices
    are TPUs, or as ``building_for_tpu()`` says. XLA lowers some ops differently there (``row_windows``)."""
    import tensorflow as tf

    if getattr(_FOR_TPU, "on", None) is not None:
        return _FOR_TPU.on
    if tf.distribute.has_strategy() and isinstance(tf.distribute.get_strategy(), tf.distribute.TPUStrategy):
        return True
    return bool(tf.config.list_logical_devices("TPU"))


def cpu_process() -> bool:
    """Whether this process places ops on CPU by default (no GPU or TPU devices)."""
    import tensorflow as tf

    return not (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))
