"""Compiling the exported steps for a Cloud TPU on a machine that has none (XLA's deviceless TPU compile).

No TPU is lent to this project, and TPU users run the step XLA compiles for the TPU. libtpu, the TPU compiler and
runtime that ``jax[tpu]`` installs from PyPI, compiles for a described slice when no TPU is present: the TPU's
own passes, layouts and fusions, and its buffer assignment, so whether a step compiles and whether it fits a chip's
memory are the TPU compiler's answers, not a model of them. The compiled program also carries XLA's TPU cost
model's estimate of its run time (``cost_analysis()["optimal_seconds"]``): an estimate, not a measurement (no TPU
has run it). For an 8192^3 bf16 product it gives v5e's published peak exactly, 86% of v5p's. It prices a loop's
body once, whatever its trip count; ``loop_seconds`` adds the other iterations.

``runner.py --target tpu-v5e`` (``tpu-v5p``) uses it. Needs jax with libtpu of the same release:
``pip install 'jax[tpu]==0.10.2'`` (libtpu 0.0.42, 213 MB; no TPU needed). On a host without a TPU libtpu logs at
start-up that it found none; jax then runs on the CPU as before.
"""

from __future__ import annotations

import functools
import os
import re

# Google's published figures per chip (cloud.google.com/tpu/docs/v5e, v5p): the bf16 matmul peak, HBM capacity
# and bandwidth. A v5p chip's two TensorCores are one device (megacore); a v5e has one. ``topology``: the smallest
# slice libtpu describes (a host's 2x2 chips); the step compiles for one chip of it. Not a v6e (Trillium): libtpu
# 0.0.42's compiler for it crashed here (SIGSEGV, a stack overflow in one of its own threads) in 3 of 4 compiles
# of the tiny steps and in every compile of base-512 pretraining, this tree's and the one before it alike.
# ``clock_hz``: the TensorCore clock the peak implies (peak / (MXUs x 128 x 128 x 2): a v5e chip has 4 MXUs, a v5p
# chip 2 x 4), which turns the compiler's cycle estimates into seconds (``loop_seconds``).
TARGETS = {
    "tpu-v5e": {"name": "TPU v5e", "device_kind": "TPU v5 lite", "topology": "v5e:2x2", "peak_bf16": 197e12,
                "memory_bytes": 16e9, "bandwidth": 819e9, "clock_hz": 1.50e9},
    "tpu-v5p": {"name": "TPU v5p", "device_kind": "TPU v5", "topology": "v5p:2x2x1", "peak_bf16": 459e12,
                "memory_bytes": 95e9, "bandwidth": 2765e9, "clock_hz": 1.75e9},
}


def is_tpu(target) -> bool:
    return target in TARGETS


@functools.cache
def compile_only_device(target: str):
    """One chip of ``target``'s slice, as a jax device that compiles but cannot run (libtpu's compile-only
    client); one per target and process."""
    if target not in TARGETS:
        raise ValueError(f"--target {target}: not a known TPU ({', '.join(TARGETS)})")
    # libtpu takes a lock file so that one process at a time drives the host's chips; compiling drives none, and
    # the lock would keep a second compile (or a test beside a user's) from starting.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies
    try:
        topology = topologies.get_topology_desc(topology_name=TARGETS[target]["topology"], platform="tpu")
    except Exception as e:  # noqa: BLE001 - no libtpu: jax raises RuntimeError or its own error type
        raise RuntimeError("compiling for a TPU without one needs libtpu (pip install 'jax[tpu]' of this jax's "
                           f"version; no TPU needed): {type(e).__name__}: {str(e).splitlines()[0][:200]}") from e
    device = topology.devices[0]
    if device.device_kind != TARGETS[target]["device_kind"]:  # the figures above would be another chip's
        raise RuntimeError(f"--target {target}: libtpu described a {device.device_kind!r}, not a "
                           f"{TARGETS[target]['device_kind']!r}")
    return device


@functools.cache
def cost_model_peak(target: str) -> float:
    """The bf16 matmul rate XLA's TPU cost model prices ``target`` at: an 8192^3 product's FLOPs over its
    estimated time (the cost model's counterpart of the peak the runner measures on a device)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    n = 8192
    spec = jax.ShapeDtypeStruct((n, n), jnp.bfloat16, sharding=SingleDeviceSharding(compile_only_device(target)))
    compiled = jax.jit(lambda a, b: a @ b).lower(spec, spec).compile()
    return 2 * n ** 3 / cost_model_seconds(_cost(compiled), compiled.as_text())[0]


def _cost(executable) -> dict:
    cost = executable.cost_analysis()
    if isinstance(cost, (list, tuple)):  # some jaxlib versions return one dict per program
        cost = cost[0]
    return dict(cost or {})


# Calls XLA's TPU cost model does not price: it adds -1 s for each (libtpu 0.0.42, measured: n of them beside a
# matmul give the matmul's time minus n). The X64 calls split and join an int64's two 32-bit halves (a TPU has no
# 64-bit integers; our step's int64s: the step counter and the dropout seeds); ConcatBitcast joins slices in place
# (base-512 plm on a v5e: 1,182 of them and 156 X64 calls, -1337.56 s: 0.44 s once they are taken out); v5p and
# v6e programs also have PrepareAsyncCall pairs (SQuAD's base step on a v5p: 159 calls and two pairs, -162.96 s).
_UNPRICED = re.compile(r'custom_call_target="(?:X64SplitLow|X64SplitHigh|X64Combine|ConcatBitcast|'
                       r'PrepareAsyncCallStart|PrepareAsyncCallDone)"')


def cost_model_seconds(cost: dict, hlo_text: str) -> tuple[float, int]:
    """XLA's TPU cost-model time of a compiled program, and the number of unpriced calls taken out of it."""
    value = cost.get("optimal_seconds")
    unpriced = len(_UNPRICED.findall(hlo_text))
    if value is None or value + unpriced <= 0:
        raise RuntimeError(f"libtpu's cost model gave no time for this program (optimal_seconds {value}, with "
                           f"{unpriced} unpriced calls)")
    return float(value) + unpriced, unpriced


_CYCLES = re.compile(r'"estimated_cycles":"?(\d+)')
_LOOP = re.compile(r"\bcondition=%([\w.\-]+), body=%([\w.\-]+)")


def loop_seconds(hlo_text: str, target: str) -> tuple[float, list]:
    """The time XLA's TPU cost model leaves out of a program's loops, and the loops as (trip count, op name).

    The cost model prices a while loop's body once, whatever its trip count (libtpu 0.0.42, measured: a loop of 10
    matmuls and one of 100 cost the same), and XLA's TPU backend runs some ops as loops: a gather of row windows
    is one iteration per row (``ops.row_windows``, bench/reports/gpu.md). The iterations beyond the first are added
    here from the compiler's own cycle estimates of each kernel in the body and condition (``estimated_cycles``),
    at the chip's clock. The trip count is read from the condition (``counter < N``); a loop whose count is not
    found is added once more, and its count reported as None."""
    import roofline

    computations, entry = roofline.parse(hlo_text)
    loops, memo = [], {}

    def cycles(name: str) -> tuple[int, int]:  # (every iteration, each loop's first only) of a computation
        if name not in memo:
            every = once = 0
            for _, _, opcode, rest in computations.get(name, []):
                loop = _LOOP.search(rest) if opcode == "while" else None
                if loop:
                    cond, body = loop.groups()
                    trip = _trip_count(computations.get(cond, []))
                    (c_every, c_once), (b_every, b_once) = cycles(cond), cycles(body)
                    op = re.search(r'op_name="([^"]+)"', rest)
                    loops.append((trip, op.group(1) if op else "?"))
                    every += (trip or 2) * (b_every + c_every)
                    once += b_once + c_once
                    continue
                found = _CYCLES.search(rest)
                if found:
                    every += int(found.group(1))
                    once += int(found.group(1))
            memo[name] = (every, once)
        return memo[name]

    every, once = cycles(entry)
    return (every - once) / TARGETS[target]["clock_hz"], loops


def _trip_count(condition: list):
    """N of a loop condition ``counter < N`` (an integer scalar constant and a compare LT), else None."""
    bounds = [int(rest.split(")")[0]) for _, shape, opcode, rest in condition
              if opcode == "constant" and re.match(r"[su](?:32|64)\[\]", shape)]
    if len(bounds) == 1 and any(opcode == "compare" and "direction=LT" in rest for _, _, opcode, rest in condition):
        return bounds[0]
    return None


def estimate(executable, target: str, spec: dict, memory_bytes: float, log=None) -> dict:
    """What the TPU compiler says of a step compiled for ``target`` (so fitting the chip's HBM: the compiler
    refuses a program that does not, ``out_of_memory``): the compiled program's FLOPs and bytes accessed, and XLA's
    cost-model time for the step with the tokens/s and MFU (of the published bf16 peak, and of the cost model's
    own) it implies (``cost_model_error`` instead where the cost model gives no time: the step still compiled)."""
    chip = TARGETS[target]
    cost = _cost(executable)
    est = {"source": "XLA TPU cost model (optimal_seconds)", "device": chip["name"], "peak_flops": chip["peak_bf16"],
           "xla_flops": float(cost.get("flops", 0.0)), "xla_bytes_accessed": float(cost.get("bytes accessed", 0.0)),
           # the bytes the program reads and writes at the chip's bandwidth: how memory-bound its estimate is
           "bytes_ms": float(cost.get("bytes accessed", 0.0)) / chip["bandwidth"] * 1e3,
           "memory_bytes": chip["memory_bytes"]}
    memory = f"step memory {memory_bytes / 2 ** 30:.2f} GiB"
    hlo_text = executable.hlo_modules()[0].to_string()
    try:
        seconds, unpriced = cost_model_seconds(cost, hlo_text)
    except RuntimeError as e:
        est["cost_model_error"] = str(e)
        if log:
            log(f"[{spec['name']}] on a {chip['name']}: {memory}; no time: {e}")
        return est
    in_loops, loops = loop_seconds(hlo_text, target)
    seconds += in_loops
    model_peak = cost_model_peak(target)
    est.update(ms=seconds * 1e3, unpriced_calls=unpriced, loops=len(loops), loop_ms=in_loops * 1e3,
               loop_trips=sorted({trip or 0 for trip, _ in loops}), tokens_per_s=spec["tokens_per_step"] / seconds,
               mfu=spec["flops_per_step"] / seconds / chip["peak_bf16"],
               mfu_of_cost_model_peak=spec["flops_per_step"] / seconds / model_peak, cost_model_peak_flops=model_peak)
    if log:
        log(f"[{spec['name']}] on a {chip['name']} (XLA's TPU cost model, not run): {est['ms']:.2f} ms/step, "
            f"{est['tokens_per_s']:,.0f} tokens/s, MFU {est['mfu']:.1%} of the {chip['peak_bf16'] / 1e12:.0f} "
            f"TFLOP/s bf16 peak; {memory}"
            + (f"; {len(loops)} loops, {in_loops * 1e3:.1f} ms of it beyond their first iteration" if loops else ""))
    return est



_OOM = re.compile(r"RESOURCE_EXHAUSTED: .*\bHBM\b")


def out_of_memory(error: str):
    """The TPU compiler's refusal of a step too large for the chip's HBM, in a few words, or None for any other
    error (libtpu 0.0.42: "Ran out of memory on HBM, the total memory required for HLO temporaries (16.37G)
    exceeds available HBM (15.75G)")."""
    if not _OOM.search(error or ""):
        return None
    sizes = re.findall(r"\(([\d.]+G)\)", error)
    return f"needs {sizes[0]}, {sizes[1]} available" if len(sizes) >= 2 else "more than the chip's HBM"


def table(results: list) -> str:
    """Markdown: a row per workload and chip, from ``runner.py --target tpu-* --json`` results."""
    lines = ["| workload | precision | batch x seq | chip | step memory (GiB) | fits | estimated ms/step | tokens/s "
             "| MFU (bf16 peak) |", "|---|---|---|---|---:|---|---:|---:|---:|"]
    for result in results:
        for row in result["workloads"]:
            name = (f"{row['config']} {row['objective']}" if row["workload"] == "pretrain" else
                    {"clf": "classifier", "squad": "SQuAD"}.get(row.get("objective"), "forward"))
            precision = "mixed bf16" if row["dtype"] == "mixed_bfloat16" else row["dtype"]
            chip = TARGETS[result["info"]["compile_only_target"]]["name"]
            est = row.get("estimate")
            if "error" in row or not est:
                oom = out_of_memory(row.get("error"))
                lines.append(f"| {name} | {precision} | {row['batch']} x {row['seq_len']} | {chip} | "
                             + (f"{oom} | **no** | | | |" if oom else
                                f"does not compile: {row.get('error', 'no estimate')[:80]} | | | | |"))
                continue
            memory = row["compiled_memory_gib"]
            loops = f" ({est['loop_ms']:.1f} of it in loops)" if est.get("loop_ms") else ""
            timed = (f"{est['ms']:.1f}{loops} | {est['tokens_per_s']:,.0f} | {est['mfu']:.1%}" if "ms" in est
                     else "no estimate | |")
            lines.append(f"| {name} | {precision} | {row['batch']} x {row['seq_len']} | {chip} | {memory:.1f} | "
                         f"yes | {timed} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import json
    import sys

    if len(sys.argv) < 2:
        sys.exit("usage: python3 bench/xla/tpu_target.py RESULT.json [...]  (runner.py --target tpu-* --json)")
    print(table([json.load(open(path)) for path in sys.argv[1:]]))
