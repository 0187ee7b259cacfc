"""MFU divides by ``xlnet_tf.flops``: these tests hold its counts to the matmuls XLA actually runs in our real
steps (the training loops' own step functions, built by bench/xla/export.py): the dots of the module TensorFlow
hands XLA that its result depends on (XLA's optimised module on this CPU agrees to 0.05%). Pretraining with each
objective (XLNet's with memory), a fine-tuning step and the forward."""

import dataclasses
import os
import re
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "xla"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import export  # noqa: E402
from background import resource, run_function  # noqa: E402

# Two layers (the last layer's content stream is the one XLNet's and MPNet's heads do not read), attention heads
# narrower than d_model, memory for XLNet's objective, a position projection shared by a batch of 4.
CFG = dataclasses.replace(export.TINY, n_layer=2, d_model=64, n_head=3, d_head=16, d_inner=96, n_token=500,
                          seq_len=32, reuse_len=16, mem_len=16, num_predict=6, batch=4)


def live_matmul_flops(hlo_text: str) -> int:
    """2 x multiply-adds of the ``dot`` instructions that an HLO module's result depends on (what XLA's dead-code
    elimination keeps), read from the module TensorFlow hands XLA: the same on every CPU, before any backend
    rewrites a dot into a library call."""
    entry = hlo_text[hlo_text.index("\nENTRY ") + 1:]
    body = entry[entry.index("\n") + 1:]
    instructions, root = {}, None
    for line in body[:body.index("\n}")].splitlines():
        m = re.match(r"\s*(ROOT )?%([\w.\-]+) = (.*?) ([\w\-]+)\((.*)", line)
        if m:
            instructions[m.group(2)] = (m.group(4), line, re.findall(r"%([\w.\-]+)", m.group(5)))
            root = m.group(2) if m.group(1) else root
    live, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in instructions and name not in live:
            live.add(name)
            todo.extend(instructions[name][2])
    total = 0
    for name in live:
        opcode, line, _ = instructions[name]
        if opcode == "dot":
            out, lhs = re.search(r"= \w+\[([\d,]*)\]\S* dot\(\s*\w+\[([\d,]*)\]", line).groups()
            lhs_dims = [int(x) for x in lhs.split(",") if x]
            contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line).group(1)
            k = int(np.prod([lhs_dims[int(i)] for i in contracting.split(",") if i]))
            total += 2 * int(np.prod([int(x) for x in out.split(",") if x])) * k
    return total


def xla_flops(built) -> int:
    compiled = built["fn"].experimental_get_compiler_ir(built["batches"][0], built["state"])
    return live_matmul_flops(compiled(stage="hlo"))


# Three chunks of 64 content-stream queries: the position term computed chunk by chunk (layers/attention.py).
CHUNKED = dataclasses.replace(CFG, seq_len=192, reuse_len=96, num_predict=8)


# (kind, objective or head, relative tolerance, config)
CASES = [
    ("pretrain", "plm", 2e-3, CFG),
    ("pretrain", "mpnet", 2e-3, CFG),
    ("pretrain", "pmlm", 2e-3, CFG),
    ("finetune", "clf", 5e-3, CFG),  # the classifier's one-row head left out: 0.2% of this tiny step
    ("infer", None, 2e-3, CFG),
    ("pretrain", "plm", 2e-3, CHUNKED),
    ("pretrain", "pmlm", 2e-3, CHUNKED),
    ("pretrain", "mpnet", 2e-3, CHUNKED),  # explicit positions: not chunked
    ("finetune", "clf", 5e-3, CHUNKED),
]


def _key(kind, what, cfg) -> str:
    return f"{kind}-{what}-{cfg.seq_len}"


def _counts() -> dict:
    """Each case's step: its model FLOPs (``built["flops"]``) and the live matmul FLOPs of the module TensorFlow
    hands XLA, by ``_key`` (in ``xla_counts``' process)."""
    import keras

    counts = {}
    for kind, what, _, cfg in CASES:
        keras.utils.set_random_seed(0)
        built = (export.build_pretrain(cfg, what, "float32") if kind == "pretrain" else
                 export.build_finetune(cfg, what, "float32") if kind == "finetune" else
                 export.build_infer(cfg, "float32"))
        counts[_key(kind, what, cfg)] = (built["flops"], xla_flops(built))
    return counts


@resource
def xla_counts():
    """``_counts()`` in a process of its own, made on the background thread (tests/background.py): building and
    lowering nine steps is a minute of tracing on 2 cores."""
    return run_function(_counts)


@pytest.mark.parametrize("kind, what, rel, cfg", CASES)
def test_model_flops_are_the_matmuls_xla_runs(kind, what, rel, cfg):
    """Each step's model FLOPs (what its MFU divides by) against the dots XLA runs: the last layer's
    content stream counted only where the head reads it, the position encodings' gradient not counted, the
    position projection shared by the replica's batch, no LM head in the forward, the content stream's position
    scores chunk by chunk where its length allows. What is left (the segment-bias einsums, the heads' few rows) is
    a fraction of a percent."""
    from xlnet_tf import flops
    from xlnet_tf.layers import attention

    assert flops.POSITION_CHUNK == attention.POSITION_CHUNK
    counted, measured = xla_counts.value()[_key(kind, what, cfg)]
    assert counted == pytest.approx(measured, rel=rel), (counted, measured)
    assert counted <= measured  # nothing counted that XLA does not run
