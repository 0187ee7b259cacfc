"""Writing outputs atomically: a reader (or a resumed run) never sees half a file or half a directory."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile


@contextlib.contextmanager
def atomic_path(path: str):
    """Yields a temporary path next to ``path`` (for a file or a directory); on success it is renamed to ``path``,
    replacing any previous one. On failure nothing at ``path`` changes and the temporary output is removed."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.tmp-")
    target = os.path.join(tmp, "out")
    try:
        yield target
        if os.path.isdir(target) and os.path.isdir(path):
            old = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.old-")
            os.replace(path, os.path.join(old, "out"))
            os.replace(target, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write(path: str, write_fn, mode: str = "w") -> str:
    """Writes ``path`` through ``write_fn(file)`` atomically (``mode`` "w" for text, "wb" for bytes)."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            write_fn(f)
    return path


def write_text_atomic(path: str, text: str) -> str:
    return atomic_write(path, lambda f: f.write(text))


def write_json_atomic(path: str, obj, indent: int = 2) -> str:
    """JSON in insertion order (prediction files list examples in input order, as the original)."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")
