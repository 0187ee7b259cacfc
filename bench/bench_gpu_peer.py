"""The peer on a CUDA GPU: HuggingFace PyTorch XLNet's pretraining step and forward pass, with the same workload,
FLOP model and MFU definition as ``bench/bench_pretrain.py``.

    python3 bench/bench_gpu_peer.py --out /tmp/gpu_peer      # needs torch with CUDA and transformers 5.x

Our own rows need TensorFlow with CUDA on that machine. The lent GPU machines of this workplace have PyTorch and
JAX but no TensorFlow, no package registry, and take at most 64 MiB of files per call (TensorFlow 2.20's wheel
alone is ~620 MB, and its CUDA 12 libraries more), so ours cannot run there yet; this script records the peer's
side of the GPU table so that the ratio is one run of ``bench_pretrain.py`` away on a machine that has both. The
script says which of TensorFlow/torch it found, and writes ``gpu_peer.json`` and ``gpu_peer.md`` to ``--out``.

Rows: the bench-small and base-512 training steps (as in bench_pretrain.py: two streams, memory carried, target-
masked CE over the P targets, clip 1.0, AdamW) in fp32 with TF32 off, fp32 with TF32 on, and bf16 autocast; the
XLNet-Base-shape forward pass (batch 32 x 128) in fp32 and bf16. MFU = model FLOPs (``xlnet_tf.flops``, what our
implementation computes) / step time / the dense matmul peak measured on this GPU in the same precision. HF's own
FLOPs are higher (its query stream runs on every position), so its MFU here is against the work both must do.
"""

from __future__ import annotations

import argparse
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

from workload import BASE_512, BENCH_SMALL, INFER_BASE, make_batch  # noqa: E402


def probe(module: str) -> str:
    """The version of ``module`` as a fresh interpreter imports it, or why it cannot."""
    code = f"import {module} as m; print(m.__version__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode == 0:
        return r.stdout.strip().splitlines()[-1]
    return "not importable: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]


def matmul_peak(torch, dtype, size=8192, reps=10):
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * size ** 3 * reps / (time.perf_counter() - t)


def timed(torch, step, warmup, steps):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def hf_config(cfg):
    from transformers import XLNetConfig as HFConfig
    return HFConfig(vocab_size=cfg.n_token, d_model=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
                    d_inner=cfg.d_inner, ff_activation="gelu", untie_r=True, attn_type="bi", bi_data=False,
                    clamp_len=-1, same_length=False, mem_len=cfg.mem_len or None, reuse_len=cfg.reuse_len or None,
                    use_mems_train=True, use_mems_eval=False, dropout=cfg.dropout, initializer_range=0.02)


def train_row(torch, cfg, precision, warmup, steps):
    from transformers import XLNetLMHeadModel
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    model = XLNetLMHeadModel(hf_config(cfg)).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-8, fused=True)
    batches = []
    for seed in range(2):
        b = make_batch(cfg, seed)
        batches.append({k: torch.from_numpy(v).cuda() for k, v in b.items()})
    state = {"mems": None, "i": 0, "loss": None}

    def step():
        b = batches[state["i"] % 2]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = model(input_ids=b["input_ids"].long(), token_type_ids=b["segment_ids"].long(),
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
        state["mems"] = [m.detach() for m in out.mems]
        state["loss"] = loss.detach()
        state["i"] += 1

    torch.cuda.reset_peak_memory_stats()
    sec = timed(torch, step, warmup, steps)
    return sec, float(state["loss"]), torch.cuda.max_memory_allocated()


def infer_row(torch, cfg, precision, warmup, steps):
    from transformers import XLNetModel as HFModel
    torch.backends.cuda.matmul.allow_tf32 = False
    model = HFModel(hf_config(cfg)).cuda().eval()
    b = make_batch(cfg, 0)
    ids = torch.from_numpy(b["input_ids"]).long().cuda()
    seg = torch.from_numpy(b["segment_ids"]).long().cuda()

    def step():
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            model(input_ids=ids, token_type_ids=seg, use_mems=False)

    torch.cuda.reset_peak_memory_stats()
    return timed(torch, step, warmup, steps), torch.cuda.max_memory_allocated()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for gpu_peer.json and gpu_peer.md")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import torch
    import transformers
    from xlnet_tf.flops import forward_flops_per_sequence

    if not torch.cuda.is_available():
        sys.exit("bench_gpu_peer.py: torch sees no CUDA device")
    gpu = torch.cuda.get_device_name(0)
    info = {"gpu": gpu, "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "host_cpu": platform.processor(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "tensorflow": probe("tensorflow"), "cuda": torch.version.cuda}
    print(info, flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    peaks = {"fp32": matmul_peak(torch, torch.float32)}
    torch.backends.cuda.matmul.allow_tf32 = True
    peaks["tf32"] = matmul_peak(torch, torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = False
    peaks["bf16"] = matmul_peak(torch, torch.bfloat16)
    print({k: f"{v / 1e12:.0f} TFLOP/s" for k, v in peaks.items()}, flush=True)

    rows = []
    for cfg in (BENCH_SMALL, BASE_512):
        flops = cfg.train_flops_per_step()
        for precision in ("fp32", "tf32", "bf16"):
            sec, loss, mem = train_row(torch, cfg, precision, args.warmup, args.steps)
            row = dict(kind="train", config=cfg.name, precision=precision, step_s=sec,
                       tokens_per_s=cfg.tokens_per_step / sec, mfu=flops / sec / peaks[precision], loss=loss,
                       peak_mem_gib=mem / 2 ** 30)
            print(row, flush=True)
            rows.append(row)
            torch.cuda.empty_cache()
    cfg = INFER_BASE
    flops = cfg.batch * forward_flops_per_sequence(cfg.n_layer, cfg.d_model, cfg.d_inner, cfg.seq_len, 0, 0,
                                                   cfg.n_token, cfg.batch, objective="plm")
    for precision in ("fp32", "bf16"):
        sec, mem = infer_row(torch, cfg, precision, args.warmup, args.steps)
        row = dict(kind="infer", config=cfg.name, precision=precision, step_s=sec,
                   tokens_per_s=cfg.tokens_per_step / sec, mfu=flops / sec / peaks[precision],
                   peak_mem_gib=mem / 2 ** 30)
        print(row, flush=True)
        rows.append(row)

    result = {"info": info, "peaks_tflops": {k: v / 1e12 for k, v in peaks.items()}, "rows": rows}
    with open(os.path.join(args.out, "gpu_peer.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [f"HF PyTorch XLNet on {gpu} ({info['date']}; torch {info['torch']}, transformers "
             f"{info['transformers']}, CUDA {info['cuda']}; TensorFlow there: {info['tensorflow']}). Matmul peak "
             f"measured: " + ", ".join(f"{k} {v / 1e12:.0f} TFLOP/s" for k, v in peaks.items()) + ".", "",
             "| step | config | precision | time (ms, median) | tokens/s | MFU | peak GPU memory (GiB) |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['config']} | {r['precision']} | {r['step_s'] * 1e3:.1f} | "
                     f"{r['tokens_per_s']:,.0f} | {r['mfu']:.1%} | {r['peak_mem_gib']:.2f} |")
    with open(os.path.join(args.out, "gpu_peer.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
