"""The one seam between XLNet's math and its fast implementations.

A handful of functions are written in plain TensorFlow where they belong (the attention probabilities in
``layers/attention.py``, the residual LayerNorm in ``layers/normalization.py``, the feed-forward activation in
``layers/feedforward.py``, the projections in ``layers/linear.py``, the LM loss's cross-entropy and accuracy in
``training/losses.py``, the AdamW update in ``training/optimization.py``) and decorated with
``@kernels.fast_path``. That plain definition is the specification: read it and ignore everything else. Where
the selected backend has a faster implementation of the same name that applies to the arguments
(``xlnet_tf/kernels/fast.py``: C++ CPU kernels and a matmul routing), it runs instead and computes the same
values to float32 round-off (tests/test_kernels.py checks each one against its plain definition).

One switch selects the backend for the process: ``XLNET_TF_KERNELS=fast`` (the default) or ``plain``. The
choice is made when a function is traced, so ``with kernels.use("plain"):`` around a trace overrides it for that
trace: SavedModel exports are traced that way, so they hold only stock TensorFlow ops.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os

BACKENDS = ("fast", "plain")
_ENV = "XLNET_TF_KERNELS"
_override: contextvars.ContextVar[tuple[str, frozenset[str]] | None] = contextvars.ContextVar(
    "xlnet_tf_kernels", default=None)


@functools.cache
def _process_backend() -> str:
    backend = os.environ.get(_ENV, "fast").strip().lower() or "fast"
    if backend not in BACKENDS:
        raise ValueError(f"{_ENV}={os.environ[_ENV]!r}: expected one of {', '.join(BACKENDS)}")
    return backend


def backend() -> str:
    """The backend that functions traced now use: ``use()``'s, else ``$XLNET_TF_KERNELS`` (default 'fast')."""
    override = _override.get()
    return override[0] if override is not None else _process_backend()


@contextlib.contextmanager
def use(name: str, disable=()):
    """Traces inside use backend ``name``; ``disable``: names of fast paths to leave out (for A/B timing)."""
    if name not in BACKENDS:
        raise ValueError(f"kernels backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    token = _override.set((name, frozenset(disable)))
    try:
        yield
    finally:
        _override.reset(token)


def _fast_implementation(name: str):
    """The fast backend's implementation of ``name`` if it is selected for this trace, else None."""
    override = _override.get()
    if backend() != "fast" or (override is not None and name in override[1]):
        return None
    from xlnet_tf.kernels import fast  # imported on first use: it loads the C++ library

    return fast.IMPLEMENTATIONS.get(name)


def fast_path(plain):
    """Marks ``plain`` (plain TensorFlow ops: the definition) as replaceable by the fast implementation of the
    same name. That implementation returns ``NotImplemented`` where it does not apply (another device, inside
    XLA, a dtype it lacks, no C++ compiler), and the plain definition runs."""
    name = plain.__name__

    @functools.wraps(plain)
    def call(*args, **kwargs):
        implementation = _fast_implementation(name)
        if implementation is not None:
            result = implementation(*args, **kwargs)
            if result is not NotImplemented:
                return result
        return plain(*args, **kwargs)

    call.plain = plain
    return call
