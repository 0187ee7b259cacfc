"""Where a step's time would go on a GPU, estimated from the module XLA optimised for it (``runner.py --target``):
each kernel takes at least its matmul FLOPs over the device's peak and its bytes over the memory bandwidth, so
its time is estimated as the larger of the two (a roofline). Summed over the step's kernels this says, before any
GPU run, how far the step is from the matmul peak and which kernels keep it there (issue 37, item 4).

    python3 bench/xla/roofline.py DUMP.optimized.hlo.gz --target h200 [--top 30]

A kernel is an instruction of the entry computation (a fusion, a library call, a copy); its FLOPs are those of
the dots it contains (2 x multiply-adds, through nested computations); its bytes are its outputs plus its
operands, an operand read only through slices counted at the slices' size. Not modelled: launch gaps, caches
(an operand read twice from L2 counts twice), tile and wave quantisation, and the loops of ``while`` bodies
(counted once; the row says how many there are). jax and numpy only, like the runner.

With ``--kernels DIR``, XLA's dump of the same compile, a third bound: the instructions a kernel issues, at one warp
instruction per clock on each of the SMs' four schedulers (integer hashing, e.g. dropout's, can take longer than
the kernel's bytes). Counted for kernels whose PTX runs straight through (instructions per thread times the threads
launched); a kernel with a loop in its PTX keeps its two bounds. The dump (5x the compile time, ~0.6 GB at base-512)::

    XLA_FLAGS="--xla_dump_to=DIR --xla_dump_emitter_re=.* --xla_gpu_dump_llvmir=true" \
        python3 bench/xla/runner.py --bundle B --target h200 --workloads NAME --dump_hlo H
    python3 bench/xla/roofline.py H/NAME.optimized.hlo.gz --kernels DIR
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import os
import re

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1}
_ARRAY = re.compile(r"\b(" + "|".join(_BYTES) + r")\[([\d,]*)\]")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*?) ([a-z][\w\-]*)\((.*)$")
_HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) \(")
_SKIP = {"parameter", "get-tuple-element", "bitcast", "tuple", "constant", "after-all", "partition-id",
         "replica-id"}
_VIEWS = {"bitcast", "reshape"}


def _arrays(shape: str) -> list:
    """(dtype, dims) of each array in an HLO shape (a tuple lists several)."""
    return [(dtype, [int(d) for d in dims.split(",") if d]) for dtype, dims in _ARRAY.findall(shape)]


def _size(shape: str) -> int:
    total = 0
    for dtype, dims in _arrays(shape):
        n = 1
        for d in dims:
            n *= d
        total += n * _BYTES[dtype]
    return total


def parse(hlo_text: str) -> tuple[dict, str]:
    """Computations of an HLO module's text: name -> [(name, shape, opcode, rest of the line)], and the entry's
    name."""
    computations, current, entry = {}, None, None
    for line in hlo_text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = computations.setdefault(header.group(2), [])
            entry = header.group(2) if header.group(1) else entry
            continue
        if line.startswith("}"):
            current = None
            continue
        m = _INSTRUCTION.match(line) if current is not None else None
        if m:
            current.append(m.groups())
    if entry is None:
        raise ValueError("not an HLO module's text: no ENTRY computation")
    return computations, entry


def _operands(rest: str) -> list:
    """Names of an instruction's operands: the %names before the closing parenthesis of its operand list."""
    depth, end = 1, len(rest)
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            end = i
            break
    return re.findall(r"%([\w.\-]+)", rest[:end])


def _called(rest: str) -> list:
    return re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", rest)


def dot_flops(computations: dict, name: str, _memo=None) -> dict:
    """FLOPs of the dots in computation ``name`` and those it calls, by the dots' operand type: {"bf16": n, ...}."""
    memo = {} if _memo is None else _memo
    if name in memo:
        return memo[name]
    flops = collections.Counter()
    shapes = {n: shape for n, shape, _, _ in computations.get(name, [])}
    for _, shape, opcode, rest in computations.get(name, []):
        flops.update(_dot(opcode, shape, rest, shapes))
        for callee in _called(rest):
            if callee != name:
                flops.update(dot_flops(computations, callee, memo))
    memo[name] = flops
    return flops


def _dot(opcode: str, shape: str, rest: str, shapes: dict) -> dict:
    """{operand dtype: 2 x multiply-adds} of a dot, or of a library matmul (cuBLAS: a custom call whose backend
    config names the contracting dimensions; its output may be a tuple with a workspace); {} for anything else.
    Keyed by what the dot reads, not what it writes: a GPU multiplies bf16 operands at the bf16 rate whatever
    it accumulates into (mixed precision's weight gradients are bf16 x bf16 -> f32)."""
    if opcode == "dot":
        contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest)
    elif opcode == "custom-call" and re.search(r'custom_call_target="[^"]*(gemm|matmul)', rest, re.I):
        contracting = re.search(r'"lhs_contracting_dimensions":\[([\d",]*)\]', rest)
    else:
        return {}
    operands = _operands(rest)
    lhs, out = _arrays(shapes.get(operands[0], "") if operands else ""), _arrays(shape)
    if not (lhs and out and contracting):
        return {}
    n = 1
    for d in out[0][1] + [lhs[0][1][int(d)] for d in re.findall(r"\d+", contracting.group(1))]:
        n *= d
    return {lhs[0][0]: 2 * n}


def _read_bytes(computations: dict, fused: str, index: int, full: int) -> int:
    """Bytes a fusion reads of its parameter ``index``: the slices' sizes where it is only sliced (through
    bitcasts and reshapes), else the whole operand."""
    body = computations.get(fused, [])
    params = {n for n, _, op, rest in body if op == "parameter" and rest.startswith(f"{index})")}
    users = collections.defaultdict(list)
    for n, shape, op, rest in body:
        for operand in _operands(rest):
            users[operand].append((n, shape, op))
    frontier, sliced = list(params), 0
    while frontier:
        name = frontier.pop()
        for user, shape, op in users.get(name, []):
            if op in _VIEWS:
                frontier.append(user)
            elif op in ("slice", "dynamic-slice"):
                sliced += _size(shape)
            else:
                return full
    return min(sliced, full) if params else full


_ENTRY = re.compile(r"^\.visible \.entry (\w+)\(")
_LAUNCH = re.compile(r"\] (\w+) grid: \[(\d+), (\d+), (\d+)\] threads: \[(\d+), (\d+), (\d+)\]")


def ptx_instructions(ptx: str) -> dict:
    """Kernel name -> instructions per thread of each entry of a PTX text whose body runs straight through (no
    branch back to an earlier label); None for one that loops."""
    counts, name, labels, count, loops = {}, None, set(), 0, False
    for line in ptx.splitlines():
        entry = _ENTRY.match(line)
        if entry:
            name, labels, count, loops = entry.group(1), set(), 0, False
            continue
        if name is None:
            continue
        text = line.strip()
        if line.startswith("}"):
            counts[name], name = None if loops else count, None
        elif text.endswith(":"):
            labels.add(text[:-1])
        elif text.endswith(";") and not text.startswith((".", "//", "ld.param", "ret")):
            branch = re.search(r"\bbra(?:\.uni)?\s+(\S+);", text)
            loops = loops or bool(branch and branch.group(1) in labels)
            count += 1
    return counts


def kernel_issue(dump_dir: str) -> dict:
    """Kernel name -> warp instructions one launch issues, from an XLA dump directory (``*.ptx`` and the
    thunk sequence's launch dimensions); kernels that loop or were not launched are absent."""
    per_thread = {}
    for path in glob.glob(os.path.join(dump_dir, "*.ptx")):
        with open(path) as f:
            per_thread.update(ptx_instructions(f.read()))
    issue = {}
    for path in glob.glob(os.path.join(dump_dir, "*thunk_sequence.txt")):
        with open(path) as f:
            for m in _LAUNCH.finditer(f.read()):
                n = 1
                for d in m.groups()[1:]:
                    n *= int(d)
                if per_thread.get(m.group(1)):
                    issue[m.group(1)] = per_thread[m.group(1)] * -(-n // 32)
    if not per_thread:
        raise ValueError(f"{dump_dir}: no PTX (dump with --xla_dump_emitter_re=.* --xla_gpu_dump_llvmir=true)")
    return issue


def _kernel_name(name: str, rest: str) -> str:
    """The name an HLO kernel's code has in the PTX: that of the identical fusion it was deduplicated into."""
    dedup = re.search(r'deduplicated_name="([^"]+)"', rest)
    return re.sub(r"[.\-]", "_", dedup.group(1) if dedup else name)


def kernel_kind(opcode: str, rest: str, flops: int) -> str:
    if opcode == "fusion":
        kind = re.search(r"kind=(k\w+)", rest)
        label = "fusion:" + (kind.group(1) if kind else "?")
        return label + " (matmul)" if flops else label
    if opcode == "custom-call":
        target = re.search(r'custom_call_target="([^"]+)"', rest)
        return "custom-call:" + (target.group(1) if target else "?")
    return opcode


def estimate(hlo_text: str, peaks: dict, bandwidth: float, top: int = 25, issue=None, issue_rate=None) -> dict:
    """The roofline estimate of one step (see the module's docstring): ``peaks`` FLOP/s by "bf16" (16-bit dots)
    and "tf32" (float32 dots: at XLA's DEFAULT precision a GPU runs them as TF32); ``bandwidth`` bytes/s;
    ``issue`` (``kernel_issue``) warp instructions by kernel name, issued at ``issue_rate`` per second."""
    computations, entry = parse(hlo_text)
    shapes = {n: shape for n, shape, _, _ in computations[entry]}
    memo, kernels = {}, []
    for name, shape, opcode, rest in computations[entry]:
        if opcode in _SKIP:
            continue
        called = _called(rest)
        flops = collections.Counter()
        for callee in called:
            flops.update(dot_flops(computations, callee, memo))
        flops.update(_dot(opcode, shape, rest, shapes))
        operands = _operands(rest)
        read = sum(_read_bytes(computations, called[0], i, _size(shapes.get(o, ""))) if opcode == "fusion" and called
                   else _size(shapes.get(o, "")) for i, o in enumerate(operands))
        moved = read + _size(shape)
        matmul_s = sum(f / peaks["bf16" if dtype in ("bf16", "f16") else "tf32"] for dtype, f in flops.items())
        memory_s = moved / bandwidth
        issue_s = issue.get(_kernel_name(name, rest), 0) / issue_rate if issue else 0.0
        bound = max((matmul_s, "matmul"), (memory_s, "memory"), (issue_s, "issue"), key=lambda b: b[0])
        kernels.append({"name": name, "kind": kernel_kind(opcode, rest, sum(flops.values())),
                        "shape": re.sub(r"\{[^}]*\}", "", shape)[:100], "flops": sum(flops.values()),
                        "bytes": moved, "s": bound[0], "bound": bound[1]})
    total = sum(k["s"] for k in kernels)
    flops = sum(k["flops"] for k in kernels)
    by_kind, by_shape = collections.Counter(), collections.defaultdict(lambda: [0.0, 0])
    for k in kernels:
        by_kind[k["kind"]] += k["s"]
        group = by_shape[(k["kind"], k["shape"])]
        group[0] += k["s"]
        group[1] += 1
    shapes_top = sorted(by_shape.items(), key=lambda item: -item[1][0])[:top]
    return {
        "kernels": len(kernels), "ms": total * 1e3, "flops": flops, "bytes": sum(k["bytes"] for k in kernels),
        "matmul_bound_ms": sum(k["s"] for k in kernels if k["bound"] == "matmul") * 1e3,
        "memory_bound_ms": sum(k["s"] for k in kernels if k["bound"] == "memory") * 1e3,
        **({"issue_bound_ms": sum(k["s"] for k in kernels if k["bound"] == "issue") * 1e3} if issue else {}),
        "while_loops": sum(1 for _, _, op, _ in computations[entry] if op == "while"),
        "by_kind_ms": {kind: s * 1e3 for kind, s in by_kind.most_common()},
        "top": [{"kind": kind, "shape": shape, "count": count, "ms": s * 1e3}
                for (kind, shape), (s, count) in shapes_top],
    }


def report(result: dict, flops_per_step: float | None, peak: float) -> str:
    """The estimate as text: the step's time, the MFU it would give, and the kernel groups that take it."""
    lines = [f"estimated {result['ms']:.1f} ms/step over {result['kernels']} kernels "
             f"({result['matmul_bound_ms']:.1f} ms matmul-bound, {result['memory_bound_ms']:.1f} ms memory-bound"
             + (f", {result['issue_bound_ms']:.1f} ms issue-bound" if "issue_bound_ms" in result else "") + "; "
             f"{result['flops'] / 1e12:.2f} TFLOP of dots, {result['bytes'] / 1e9:.1f} GB moved)"]
    if flops_per_step:
        mfu = flops_per_step / (result["ms"] / 1e3) / peak
        lines.append(f"model FLOPs {flops_per_step / 1e12:.2f} T: MFU at most {mfu:.1%} of the {peak / 1e12:.0f} "
                     "TFLOP/s peak")
    lines.append("by kind: " + ", ".join(f"{k} {v:.1f} ms" for k, v in result["by_kind_ms"].items()))
    lines += [f"  {t['ms']:7.2f} ms  {t['count']:4d} x {t['kind']:<24} {t['shape']}" for t in result["top"]]
    return "\n".join(lines)


def main(argv=None):
    from gpu_target import TARGETS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hlo", help="an optimised module's text (.hlo or .hlo.gz), e.g. runner.py --dump_hlo's")
    parser.add_argument("--target", choices=sorted(TARGETS), default="h200")
    parser.add_argument("--flops", type=float, default=None, help="the step's model FLOPs (for the MFU)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--kernels", default=None, help="XLA's dump directory of the same compile (PTX, thunks)")
    args = parser.parse_args(argv)
    opener = gzip.open if args.hlo.endswith(".gz") else open
    with opener(args.hlo, "rt") as f:
        text = f.read()
    target = TARGETS[args.target]
    issue = kernel_issue(args.kernels) if args.kernels else None
    result = estimate(text, target["peaks"], target["bandwidth"], args.top, issue, target["issue_rate"])
    print(report(result, args.flops, target["peaks"]["bf16"]))


if __name__ == "__main__":
    main()
