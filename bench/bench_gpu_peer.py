"""The peer on a GPU, at its best: HuggingFace PyTorch XLNet's pretraining step and forward pass in every mode it
offers, with the same workload, FLOP model and MFU definition as our rows (``bench/xla/runner.py``,
``bench/bench_pretrain.py``).

    python3 bench/bench_gpu_peer.py --out DIR                    # CUDA (torch with CUDA, transformers 5.x)
    python3 bench/bench_gpu_peer.py --out DIR --device cpu --configs tiny:4 --steps 3 --warmup 1   # smoke test

Modes: eager fp32 (TF32 off), eager tf32 (TF32 on), eager bf16 autocast, and ``torch.compile`` (inductor) with bf16
autocast and TF32 on (HF's fastest, where it compiles). Training rows: two streams, memory carried (zeros at the
first step, as ours), target-masked cross-entropy over the P targets, clip 1.0, fused AdamW; the forward: content
stream, batch 32 x 128. MFU = model FLOPs (``xlnet_tf.flops``: what our implementation computes) / step time /
the matmul peak measured here in the same precision (fp32 rows: fp32 peak; tf32 rows: tf32; bf16 and compiled
rows: bf16). HF's own FLOPs are higher (its query stream runs on every position), so its MFU is useful-work
utilisation. Writes ``gpu_peer.json`` (after every row: a run cut short keeps its rows) and ``gpu_peer.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from workload import CONFIGS, BenchConfig, make_batch  # noqa: E402

TINY = BenchConfig("tiny", n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=128, n_token=1000, seq_len=32,
                   reuse_len=16, mem_len=16, num_predict=6, batch=4)
MODES = ("fp32", "tf32", "bf16", "compile-bf16")


def probe(module: str) -> str:
    """The version of ``module`` as a fresh interpreter imports it, or why it cannot."""
    code = f"import {module} as m; print(m.__version__)"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "probe timed out"
    if r.returncode == 0:
        return r.stdout.strip().splitlines()[-1]
    return "not importable: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]


class Device:
    def __init__(self, torch, kind):
        self.torch, self.kind = torch, kind

    def sync(self):
        if self.kind == "cuda":
            self.torch.cuda.synchronize()

    def reset_peak(self):
        if self.kind == "cuda":
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()

    def peak_gib(self):
        return self.torch.cuda.max_memory_allocated() / 2 ** 30 if self.kind == "cuda" else float("nan")


def set_tf32(torch, on: bool):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def matmul_peak(torch, dev, dtype, size, seconds=1.0):
    a = torch.randn(size, size, device=dev.kind, dtype=dtype)
    b = torch.randn(size, size, device=dev.kind, dtype=dtype)
    for _ in range(3):
        a @ b
    dev.sync()
    best, reps, deadline = 0.0, 1, time.perf_counter() + seconds
    while time.perf_counter() < deadline or best == 0.0:
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        dev.sync()
        dt = time.perf_counter() - t
        best = max(best, 2 * size ** 3 * reps / dt)
        if dt < 0.05:
            reps *= 2
    return best


def timed(dev, step, warmup, steps):
    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    dev.sync()
    warm = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        dev.sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), warm


def hf_config(cfg):
    from transformers import XLNetConfig as HFConfig
    return HFConfig(vocab_size=cfg.n_token, d_model=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
                    d_inner=cfg.d_inner, ff_activation="gelu", untie_r=True, attn_type="bi", bi_data=False,
                    clamp_len=-1, same_length=False, mem_len=cfg.mem_len or None, reuse_len=cfg.reuse_len or None,
                    use_mems_train=True, use_mems_eval=False, dropout=cfg.dropout, initializer_range=0.02)


def train_row(torch, dev, cfg, mode, warmup, steps):
    from transformers import XLNetLMHeadModel
    torch.manual_seed(0)
    set_tf32(torch, mode != "fp32")
    bf16 = "bf16" in mode
    model = XLNetLMHeadModel(hf_config(cfg)).to(dev.kind).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-8, fused=dev.kind == "cuda")
    forward = torch.compile(model) if mode.startswith("compile") else model
    batches = []
    for seed in range(2):
        b = make_batch(cfg, seed)
        batches.append({k: torch.from_numpy(v).to(dev.kind) for k, v in b.items()})
    # Memory starts as zeros (as ours), so that every step has the same shapes (one compiled graph).
    mems = [torch.zeros(cfg.mem_len, cfg.batch, cfg.d_model, device=dev.kind) for _ in range(cfg.n_layer)]
    state = {"mems": mems if cfg.mem_len else None, "i": 0, "loss": None}

    def step():
        b = batches[state["i"] % 2]
        with torch.autocast(dev.kind, dtype=torch.bfloat16, enabled=bf16):
            out = forward(input_ids=b["input_ids"].long(), token_type_ids=b["segment_ids"].long(),
                          perm_mask=b["perm_mask"], target_mapping=b["target_mapping"], mems=state["mems"],
                          use_mems=True)
            losses = torch.nn.functional.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]),
                                                       b["target"].long().reshape(-1), reduction="none")
        mask = b["target_mask"].reshape(-1)
        loss = (losses * mask).sum() / mask.sum().clamp(min=1.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cfg.mem_len:
            state["mems"] = [m.detach().float() for m in out.mems]
        state["loss"] = loss.detach()
        state["i"] += 1

    dev.reset_peak()
    sec, warm = timed(dev, step, warmup, steps)
    return dict(step_s=sec, warmup_s=warm, loss=float(state["loss"]), peak_mem_gib=dev.peak_gib())


def infer_row(torch, dev, cfg, mode, warmup, steps):
    from transformers import XLNetModel as HFModel
    set_tf32(torch, mode != "fp32")
    model = HFModel(hf_config(cfg)).to(dev.kind).eval()
    forward = torch.compile(model) if mode.startswith("compile") else model
    b = make_batch(cfg, 0)
    ids = torch.from_numpy(b["input_ids"]).long().to(dev.kind)
    seg = torch.from_numpy(b["segment_ids"]).long().to(dev.kind)

    def step():
        with torch.inference_mode(), torch.autocast(dev.kind, dtype=torch.bfloat16, enabled="bf16" in mode):
            forward(input_ids=ids, token_type_ids=seg, use_mems=False)

    dev.reset_peak()
    sec, warm = timed(dev, step, warmup, steps)
    return dict(step_s=sec, warmup_s=warm, peak_mem_gib=dev.peak_gib())


def parse_configs(text):
    """``name:batch`` items (bench-small:32,base-512:32)."""
    out = []
    for item in filter(None, text.split(",")):
        name, _, batch = item.partition(":")
        cfg = TINY if name == "tiny" else CONFIGS[name]
        out.append(dataclasses.replace(cfg, batch=int(batch)) if batch else cfg)
    return out


def peak_label(mode):
    return "fp32" if mode == "fp32" else "tf32" if mode == "tf32" else "bf16"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for gpu_peer.json and gpu_peer.md")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--configs", default="bench-small:32,base-512:32", help="training configs, name:batch")
    parser.add_argument("--infer", default="infer-base:32", help="forward config name:batch (empty: none)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--peak_size", type=int, default=None)
    parser.add_argument("--deadline", type=float, default=None, help="seconds; later rows are skipped")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()

    import torch
    import transformers

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu_peer.py: torch sees no CUDA device")
    dev = Device(torch, args.device)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    info = {"device": name, "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "torch": torch.__version__, "transformers": transformers.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "tensorflow": probe("tensorflow")}
    print(info, flush=True)
    size = args.peak_size or (8192 if args.device == "cuda" else 1024)
    set_tf32(torch, False)
    peaks = {"fp32": matmul_peak(torch, dev, torch.float32, size)}
    set_tf32(torch, True)
    peaks["tf32"] = matmul_peak(torch, dev, torch.float32, size)
    set_tf32(torch, False)
    peaks["bf16"] = matmul_peak(torch, dev, torch.bfloat16, size)
    print({k: f"{v / 1e12:.3g} TFLOP/s" for k, v in peaks.items()}, flush=True)
    result = {"info": info, "peaks_flops": peaks, "peak_size": size, "rows": [], "skipped": []}
    modes = [m for m in args.modes.split(",") if m]

    jobs = [("train", cfg, mode) for cfg in parse_configs(args.configs) for mode in modes]
    jobs += [("infer", cfg, mode) for cfg in parse_configs(args.infer) for mode in modes if mode != "tf32"]
    for kind, cfg, mode in jobs:
        label = f"{kind} {cfg.name} b{cfg.batch} {mode}"
        if args.deadline and time.perf_counter() - start > args.deadline:
            result["skipped"].append(label)
            print(f"{label}: skipped (past the {args.deadline:.0f} s deadline)", flush=True)
            continue
        row = dict(kind=kind, config=cfg.name, batch=cfg.batch, seq_len=cfg.seq_len, mode=mode,
                   tokens_per_step=cfg.tokens_per_step)
        flops = cfg.train_flops_per_step() if kind == "train" else cfg.forward_flops_per_step()
        try:
            row.update((train_row if kind == "train" else infer_row)(torch, dev, cfg, mode, args.warmup, args.steps))
            row.update(tokens_per_s=cfg.tokens_per_step / row["step_s"],
                       mfu=flops / row["step_s"] / peaks[peak_label(mode)], mfu_of=peak_label(mode))
        except Exception as e:  # noqa: BLE001 - an OOM or a failed compile is a row, not the end of the run
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        torch._dynamo.reset() if hasattr(torch, "_dynamo") else None
        if args.device == "cuda":
            torch.cuda.empty_cache()
        print(row, flush=True)
        result["rows"].append(row)
        result["seconds"] = time.perf_counter() - start
        with open(os.path.join(args.out, "gpu_peer.json"), "w") as f:
            json.dump(result, f, indent=1)
    lines = [f"HF PyTorch XLNet on {name} ({info['date']}; torch {info['torch']}, transformers "
             f"{info['transformers']}, CUDA {info['cuda']}). Matmul peak measured: "
             + ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in peaks.items()) + ".", "",
             "| step | config | batch | mode | time (ms, median) | tokens/s | MFU | peak memory (GiB) |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['kind']} | {r['config']} | {r['batch']} | {r['mode']} | failed: {r['error'][:80]} |"
                         " | | |")
            continue
        lines.append(f"| {r['kind']} | {r['config']} | {r['batch']} | {r['mode']} | {r['step_s'] * 1e3:.1f} | "
                     f"{r['tokens_per_s']:,.0f} | {r['mfu']:.1%} | {r['peak_mem_gib']:.2f} |")
    with open(os.path.join(args.out, "gpu_peer.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
