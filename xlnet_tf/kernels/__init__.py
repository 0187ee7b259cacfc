"""The one seam between XLNet's math and its fast implementations.

A handful of functions are written in plain TensorFlow where they belong (the attention probabilities in
``layers/attention.py``, the residual LayerNorm in ``layers/normalization.py``, the feed-forward activation in
``layers/feedforward.py``, the projections in ``layers/linear.py``, the LM loss's cross-entropy and accuracy in
``objectives/losses.py``, the AdamW update in ``training/optimization.py``) and decorated with
``@kernels.fast_path(fast=fast.<name>)``, which names their fast version (``xlnet_tf/kernels/fast.py``: C++ CPU
kernels and a matmul routing). That plain definition is the specification: read it and ignore everything else.
Where the fast backend is selected and its version applies to the arguments, it runs instead and computes the
same values to float32 round-off (tests/test_kernels.py checks each one against its plain definition).

The binding is between function objects, checked when the plain definition is decorated (at import, without
building the C++ kernels): the fast version must take the plain definition's parameters (names, order, kinds,
defaults), or the import fails naming both. A new parameter of the plain math cannot go unnoticed on CPU; a
changed body is what the kernel tests catch. A decorated function without a fast version says why
(``plain_only=...``), so every fast path is accounted for.

One switch selects the backend for the process: ``XLNET_TF_KERNELS=fast`` (the default) or ``plain``. The
choice is made when a function is traced, so ``with kernels.use("plain"):`` around a trace overrides it for that
trace: SavedModel exports are traced that way, so they hold only stock TensorFlow ops.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
from typing import Callable

BACKENDS = ("fast", "plain")
_ENV = "XLNET_TF_KERNELS"
_override: contextvars.ContextVar[tuple[str, frozenset[str]] | None] = contextvars.ContextVar(
    "xlnet_tf_kernels", default=None)
# Every decorated function by its plain definition's name: the names ``use(disable=...)`` takes.
_PATHS: dict[str, Callable] = {}


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


def fast_paths() -> dict[str, Callable]:
    """The decorated functions imported so far, by name; each has ``.plain`` (the definition), ``.fast`` (its
    fast version, or None) and ``.plain_only`` (why it has none, or None)."""
    return dict(_PATHS)


def _path_name(path) -> str:
    """The name of a fast path given as a name or as the decorated function; an unknown one is an error."""
    name = path if isinstance(path, str) else getattr(getattr(path, "plain", None), "__name__", None)
    if name not in _PATHS or not (isinstance(path, str) or _PATHS[name] is path):
        raise ValueError(f"kernels.use: {path!r} is no fast path (those of the modules imported so far: "
                         f"{', '.join(sorted(_PATHS)) or 'none'})")
    return name


@contextlib.contextmanager
def use(name: str, disable=()):
    """Traces inside use backend ``name``; ``disable``: fast paths to leave out (for A/B timing), by name (the
    plain definition's) or as the decorated functions. An unknown name is an error: a typo would time A vs A."""
    if name not in BACKENDS:
        raise ValueError(f"kernels backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    token = _override.set((name, frozenset(_path_name(path) for path in disable)))
    try:
        yield
    finally:
        _override.reset(token)


def _fast_selected(name: str) -> bool:
    """Whether the fast version of the fast path ``name`` is to be tried in what is traced now."""
    override = _override.get()
    if override is None:
        return _process_backend() == "fast"
    return override[0] == "fast" and name not in override[1]


def _qualified(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _described(fn) -> str:
    """``module.name(parameters)``, without annotations (they are not compared)."""
    signature = inspect.signature(fn)
    signature = signature.replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()],
        return_annotation=inspect.Signature.empty)
    return f"{_qualified(fn)}{signature}"


def _same_default(a, b) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def check_signatures(plain: Callable, fast: Callable) -> None:
    """Raises ``TypeError`` naming both functions unless ``fast`` takes ``plain``'s parameters: the same names in
    the same order, of the same kinds (positional, keyword-only, ...), with the same defaults."""
    want = list(inspect.signature(plain).parameters.values())
    got = list(inspect.signature(fast).parameters.values())
    for i in range(max(len(want), len(got))):
        p = want[i] if i < len(want) else None
        q = got[i] if i < len(got) else None
        if p is None or q is None:
            difference = (f"it lacks parameter {p.name!r}" if q is None else f"it has an extra parameter {q.name!r}")
        elif p.name != q.name:
            difference = f"parameter {i + 1} is {q.name!r}, not {p.name!r}"
        elif p.kind != q.kind:
            difference = f"parameter {p.name!r} is {q.kind.description}, not {p.kind.description}"
        elif not _same_default(p.default, q.default):
            difference = (f"parameter {p.name!r} defaults to "
                          f"{'nothing' if q.default is q.empty else repr(q.default)}, not "
                          f"{'nothing' if p.default is p.empty else repr(p.default)}")
        else:
            continue
        raise TypeError(f"the fast version {_described(fast)} does not take the parameters of the plain "
                        f"definition it replaces, {_described(plain)}: {difference}. Change it (and its kernel) "
                        "with the plain definition.")


def fast_path(*, fast: Callable | None = None, plain_only: str | None = None):
    """Decorates a plain TensorFlow definition as replaceable by ``fast``, its fast version: a function of the
    same parameters (checked here) that returns the same values, or ``NotImplemented`` where it does not apply
    (another device, inside XLA, a dtype it lacks, no C++ compiler), and the plain definition runs.
    ``plain_only``: instead of ``fast``, why there is no fast version (yet)."""
    if (fast is None) == (plain_only is None):
        raise TypeError("kernels.fast_path: name the fast version (fast=...) or say why there is none "
                        "(plain_only=...)")

    def decorate(plain):
        name = plain.__name__
        for other in _PATHS.values():
            if _qualified(other.plain) == _qualified(plain):
                continue  # the same definition again (a reloaded module)
            if other.plain.__name__ == name:
                raise ValueError(f"@kernels.fast_path: {_qualified(plain)} and {_qualified(other.plain)} have one "
                                 "name, which kernels.use(disable=...) would not tell apart")
            if fast is not None and other.fast is fast:
                raise ValueError(f"@kernels.fast_path: {_qualified(fast)} is the fast version of "
                                 f"{_qualified(other.plain)} already, so it cannot replace {_qualified(plain)}")
        if fast is not None:
            check_signatures(plain, fast)

        @functools.wraps(plain)
        def call(*args, **kwargs):
            if fast is not None and _fast_selected(name):
                result = fast(*args, **kwargs)
                if result is not NotImplemented:
                    return result
            return plain(*args, **kwargs)

        call.plain, call.fast, call.plain_only = plain, fast, plain_only
        _PATHS[name] = call
        return call

    return decorate
