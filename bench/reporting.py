"""What the bench scripts share to report: a run's TensorBoard scalars, and the tables they write into the docs
between two markers (``<!-- script.py:begin -->`` ... ``<!-- script.py:end -->``), never typed by hand."""

from __future__ import annotations

import glob
import os


def cpu_name() -> str:
    """The CPU's model name, which every figure names (/proc/cpuinfo; else what ``platform`` knows)."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def scalars(model_dir: str) -> dict:
    """The TensorBoard scalars of a training run in ``model_dir``: {tag: [(step, value)] sorted by step}."""
    import tensorflow as tf

    out = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "train", "events.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return {tag: sorted(set(values)) for tag, values in out.items()}


def markers(script: str) -> tuple[str, str]:
    """The begin and end markers of ``script``'s block (e.g. ``bench_pretrain.py``)."""
    return f"<!-- {script}:begin -->", f"<!-- {script}:end -->"


def replace_block(path: str, script: str, block: str) -> None:
    """Replaces what lies between ``script``'s markers in ``path`` with ``block``, atomically (temp file +
    rename). Raises ValueError naming the file when the markers are missing."""
    begin, end = markers(script)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if begin not in text or end not in text:
        raise ValueError(f"{path}: no {begin} ... {end} block to replace")
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(f"{head}{begin}\n{block.strip()}\n{end}{tail}")
    os.replace(path + ".tmp", path)
