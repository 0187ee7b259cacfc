"""Where a step's device time goes: a few steps traced by jax's profiler (CUPTI's kernel records on a GPU, XLA's
thunk records on a CPU), summed per HLO instruction of the optimised module and per kind of instruction (library
matmuls, fusions by kind, copies), so that the step can be improved from one GPU run's figures (issue 37, item 4).
jax and numpy only, like the runner.

The trace's own format differs by platform and version: each event's ``hlo_op`` stat names the instruction where
the platform records it; otherwise the event's name (XLA names a fusion's kernel after the fusion) stands for it.
``summary["planes"]`` keeps the trace's shape (planes, lines, events, one sample's stats), so that a trace read
wrongly on a new platform is seen in the report rather than read as "nothing ran".
"""

from __future__ import annotations

import collections
import glob
import gzip
import os
import re
import shutil

# Lines a trace's post-processing may add to a device plane, each repeating the kernels' time per module, op or
# step: counting them too would count the step twice or more.
DERIVED_LINES = {"XLA Modules", "XLA Ops", "Async XLA Ops", "XLA TraceMe", "Steps", "TensorFlow Ops",
                 "TensorFlow Name Scope", "Framework Ops", "Framework Name Scope", "Source code", "Launch Stats"}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = \S+(?: \S+)*? ([a-z][\w\-]*)\(")


def trace(run_steps, directory: str) -> str:
    """Runs ``run_steps()`` under jax's profiler; returns the trace file (XSpace) it wrote under ``directory``."""
    import jax.profiler

    options = jax.profiler.ProfileOptions()
    # No Python call records (tens of thousands a step) and no copy of the module in the trace (it is dumped
    # beside it): the trace holds the device's and XLA's own records.
    for name, value in (("python_tracer_level", 0), ("enable_hlo_proto", False)):
        if hasattr(options, name):
            setattr(options, name, value)
    jax.profiler.start_trace(directory, profiler_options=options)
    try:
        run_steps()
    finally:
        jax.profiler.stop_trace()
    paths = sorted(glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True), key=os.path.getmtime)
    if not paths:
        raise RuntimeError(f"jax's profiler wrote no trace under {directory}")
    return paths[-1]


def instruction_kinds(hlo_text: str) -> dict:
    """Instruction name -> its kind in the optimised module: ``fusion:kLoop`` (kInput, kOutput, kCustom: Triton),
    ``custom-call:<target>`` (cuBLAS, cuDNN), else the opcode (copy, transpose, ...)."""
    kinds = {}
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name, opcode = m.groups()
        if opcode == "fusion":
            kind = re.search(r"kind=(k\w+)", line)
            kinds[name] = "fusion:" + (kind.group(1) if kind else "?")
        elif opcode == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', line)
            kinds[name] = "custom-call:" + (target.group(1) if target else "?")
        else:
            kinds[name] = opcode
    return kinds


def summarize(xplane_path: str, steps: int, kinds: dict | None = None, top: int = 40) -> dict:
    """Per-step device time of each instruction (top ``top``) and of each kind, from a trace of ``steps`` steps.

    Device planes (``/device:...``) when the trace has events there (a GPU's kernels, per stream; not the lines
    summing them per module, op or step); else the host's XLA threads (a CPU: there threads overlap, so the busy
    time can exceed the wall time)."""
    import jax.profiler

    data = jax.profiler.ProfileData.from_file(xplane_path)
    shape, events = [], {"device": [], "host": []}
    for plane in data.planes:
        where = "device" if plane.name.startswith("/device:") else "host"
        lines = []
        for line in plane.lines:
            n, sample = 0, None
            counted = line.name != "python" and line.name not in DERIVED_LINES
            for event in line.events:
                n += 1
                if sample is None:
                    sample = {"name": event.name[:120], "stats": {k: str(v)[:80] for k, v in event.stats}}
                if not counted or event.duration_ns <= 0:
                    continue
                op = dict(event.stats).get("hlo_op")
                if where == "device" or op is not None:
                    events[where].append((str(op) if op is not None else event.name, event.name, event.start_ns,
                                          event.duration_ns))
            lines.append({"name": line.name, "events": n, "sample": sample})
        shape.append({"plane": plane.name, "lines": lines[:16]})
    source = "device" if events["device"] else "host"
    chosen = events[source]
    per_op = collections.defaultdict(lambda: [0.0, 0, None])
    for op, kernel, _, duration in chosen:
        entry = per_op[op]
        entry[0] += duration
        entry[1] += 1
        entry[2] = entry[2] or kernel
    busy = sum(d for *_, d in chosen)
    wall = (max(s + d for _, _, s, d in chosen) - min(s for _, _, s, _ in chosen)) if chosen else 0
    kind_of = kind_lookup(kinds or {})
    by_kind = collections.Counter()
    for op, (total, _, kernel) in per_op.items():
        by_kind[kind_of(op, kernel)] += total
    ops = sorted(per_op.items(), key=lambda item: -item[1][0])
    ms = 1e-6 / max(steps, 1)
    return {
        "steps": steps, "source": source, "events": len(chosen),
        "busy_ms_per_step": busy * ms, "span_ms_per_step": wall * ms,
        "by_kind_ms_per_step": {k: v * ms for k, v in by_kind.most_common()},
        "top": [{"op": op, "kind": kind_of(op, kernel), "ms_per_step": total * ms,
                 "calls_per_step": count / max(steps, 1), "share": total / busy if busy else 0.0,
                 "kernel": kernel[:120]} for op, (total, count, kernel) in ops[:top]],
        "planes": shape,
    }


def kind_lookup(kinds: dict):
    """``kind_of(op, kernel)``: the kind of the instruction ``op`` names, also where the trace names it as a GPU
    kernel does (the name's '.' and '-' as '_': PTX names allow neither); else a kind from the kernel's name."""
    sanitized = {re.sub(r"\W", "_", name): kind for name, kind in kinds.items()}

    def kind_of(op: str, kernel: str) -> str:
        return kinds.get(op) or sanitized.get(op) or _kernel_kind(kernel)
    return kind_of


def _kernel_kind(kernel: str) -> str:
    """A kind for an event no instruction of the module names (a library's kernel, a copy engine's transfer)."""
    k = kernel.lower()
    if "gemm" in k or "xmma" in k or "cutlass" in k or "cublas" in k:
        return "library matmul"
    if "memcpy" in k or "memset" in k:
        return "memcpy/memset"
    return "other"


def keep_trace(xplane_path: str, destination: str) -> None:
    """The raw trace, gzipped, for a closer look elsewhere (TensorBoard's profile plugin reads it)."""
    os.makedirs(os.path.dirname(destination) or ".", exist_ok=True)
    with open(xplane_path, "rb") as src, gzip.open(destination, "wb") as dst:
        shutil.copyfileobj(src, dst)
