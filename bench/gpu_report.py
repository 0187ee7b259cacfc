"""The GPU tables from one device run (``bench/gpu/run_on_device.sh``): ours (``bench/xla/runner.py``'s JSON) and
HF's modes (``bench/bench_gpu_peer.py``'s), side by side, never typed by hand.

    python3 bench/gpu_report.py --ours OUT/ours.json --peer OUT/gpu_peer.json --md OUT/gpu_table.md   # on the device
    .venv/bin/python bench/gpu_report.py --ours OUT/ours.json --peer OUT/gpu_peer.json --update       # here, after

``--update`` writes the tables into bench/reports/gpu.md and a two-line summary into the README (between the
``gpu_report.py`` markers), and both JSONs into bench/results_gpu.json; refused when the run measured a bundle
exported from other sources than this tree's (``export.source_stamp``). Standard library only on the device.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
README_LIMIT = 10_000  # tests/test_docs.py
HEADLINE = ("base-512", "plm", "mixed_bfloat16")  # the issue's goal: >= 40% MFU, >= 3x HF's best tokens/s
DTYPE = {"float32": "f32 (TF32 dots)", "mixed_bfloat16": "mixed bf16"}


def _verified(row: dict) -> str:
    v = row.get("verify", {})
    if not v.get("checked"):
        return "not checked (no TF reference at this batch)"
    worst = max(s["loss"]["rel"] if "loss" in s else s["output_norm"]["rel"] for s in v["steps"])
    return f"{'yes' if v['ok'] else 'NO'} ({len(v['steps'])} steps, max rel {worst:.1e})"


def headline(ours: dict, peer: dict) -> dict:
    """Ours at base-512 plm mixed bf16 against HF's fastest mode at base-512 (any precision)."""
    config, objective, dtype = HEADLINE
    rows = [w for w in ours.get("workloads", []) if w["config"] == config and w.get("objective") == objective
            and w["dtype"] == dtype and "median_s" in w]
    mine = max(rows, key=lambda w: w["batch"], default=None)
    hf = [r for r in peer.get("rows", []) if r["kind"] == "train" and r["config"] == config and "step_s" in r]
    best = max(hf, key=lambda r: r["tokens_per_s"], default=None)
    out = {"ours": mine, "hf_best": best}
    if mine:
        out["mfu"] = mine.get("mfu")
    if mine and best:
        out["ratio"] = mine["tokens_per_s"] / best["tokens_per_s"]
    return out


def _exported_from(ours: dict) -> str:
    source = ours.get("source") or {}
    if not source.get("digest"):
        return "bench/xla/export.py --preset gpu, sources not recorded"
    at = f"commit {source['commit']}" if source.get("commit") else "a tree outside git"
    return (f"bench/xla/export.py --preset gpu at {at}{' with local changes' if source.get('modified') else ''}, "
            f"sources {source['digest'][:12]}")


def tables(ours: dict, peer: dict) -> tuple[str, str]:
    """``(report, readme)``: the full tables for bench/reports/gpu.md, two lines for the README."""
    info, pinfo = ours.get("info", {}), peer.get("info", {})
    device = pinfo.get("device") or info.get("device", "?")
    peaks = ours.get("peaks_flops", {})
    hpeaks = peer.get("peaks_flops", {})
    lines = [f"Measured {pinfo.get('date', '?')} on **{device}** in one call: ours = our real training steps "
             f"exported by TensorFlow ({_exported_from(ours)}) and run by jax "
             f"{info.get('jax', '?')} (Python {info.get('python', '?')}, no TensorFlow); HF = transformers "
             f"{pinfo.get('transformers', '?')} on torch {pinfo.get('torch', '?')} (CUDA {pinfo.get('cuda', '?')}).",
             "",
             f"Matmul peak measured in the same call ({ours.get('peak_size', '?')}^3): jax " + ", ".join(
                 f"{k} {v / 1e12:.3g}" for k, v in peaks.items()) + " TFLOP/s; torch " + ", ".join(
                 f"{k} {v / 1e12:.3g}" for k, v in hpeaks.items()) + " TFLOP/s. MFU = model FLOPs "
             "(`xlnet_tf.flops`) / step time / the jax peak of the row's precision (f32 rows: TF32, what XLA's "
             "DEFAULT-precision dots use on this GPU; HF fp32 rows: fp32 with TF32 off).", "",
             "Ours (median of the timed steps after warm-up, each step device-synchronised; checked = the first "
             "steps' loss against TensorFlow's on CPU, f32 at HIGHEST precision, tolerances in bench/xla/runner.py; "
             "roofline = the sum over the step's kernels of max(FLOPs / the measured peak, bytes / the part's "
             "bandwidth), bench/xla/roofline.py: how far the kernels are from their floor):",
             "",
             "| workload | config | batch | precision | ms/step | tokens/s | MFU | step memory (GiB) | checked vs TF "
             "| roofline ms |", "|---|---|---:|---|---:|---:|---:|---:|---|---:|"]
    for w in ours.get("workloads", []):
        what = w["workload"] + (f" {w['objective']}" if w.get("objective") else "")
        if "median_s" not in w:
            lines.append(f"| {what} | {w['config']} | {w['batch']} | {DTYPE.get(w['dtype'], w['dtype'])} | "
                         f"{w.get('error', 'not timed')[:80]} | | | | {_verified(w)} | |")
            continue
        roofline = f"{w['estimate']['ms']:.1f}" if "estimate" in w else ""
        lines.append(f"| {what} | {w['config']} | {w['batch']} | {DTYPE.get(w['dtype'], w['dtype'])} | "
                     f"{w['median_s'] * 1e3:.1f} | {w['tokens_per_s']:,.0f} | {w.get('mfu', float('nan')):.1%} | "
                     f"{w.get('compiled_memory_gib', float('nan')):.2f} | {_verified(w)} | {roofline} |")
    for s in ours.get("skipped", []):
        lines.append(f"| {s['name']} | skipped: {s['why']} | | | | | | | | |")
    lines += ["", "HF PyTorch XLNet, every mode (eager fp32 with TF32 off, eager TF32, eager bf16 autocast, "
              "torch.compile with bf16 autocast and TF32):", "",
              "| step | config | batch | mode | ms/step | tokens/s | MFU | peak memory (GiB) |",
              "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in peer.get("rows", []):
        if "step_s" not in r:
            lines.append(f"| {r['kind']} | {r['config']} | {r['batch']} | {r['mode']} | failed: "
                         f"{r.get('error', '?')[:80]} | | | |")
            continue
        lines.append(f"| {r['kind']} | {r['config']} | {r['batch']} | {r['mode']} | {r['step_s'] * 1e3:.1f} | "
                     f"{r['tokens_per_s']:,.0f} | {r['mfu']:.1%} | {r['peak_mem_gib']:.2f} |")
    for s in peer.get("skipped", []):
        lines.append(f"| {s} | skipped (deadline) | | | | | | |")
    lines += profiles(ours)
    h = headline(ours, peer)
    summary = "Goal (base-512 pretraining, mixed bf16): "
    if h.get("ours"):
        summary += (f"ours {h['ours']['tokens_per_s']:,.0f} tokens/s at batch {h['ours']['batch']}, "
                    f"MFU {h['mfu']:.1%} (goal >= 40%)")
    else:
        summary += "ours not measured"
    if h.get("hf_best"):
        summary += (f"; HF's best mode ({h['hf_best']['mode']}, batch {h['hf_best']['batch']}) "
                    f"{h['hf_best']['tokens_per_s']:,.0f} tokens/s")
    if "ratio" in h:
        summary += f"; ours / HF best = {h['ratio']:.2f}x (goal >= 3x)."
    lines += ["", f"**{summary}**"]
    readme = (f"On a GPU ({device}, {pinfo.get('date', '?')}; our step exported by TF, run by jax): {summary} "
              "Every workload, HF's modes and the checks: [bench/reports/gpu.md](bench/reports/gpu.md).")
    return "\n".join(lines) + "\n", readme + "\n"


def profiles(ours: dict, top: int = 12) -> list:
    """Where the profiled steps' device time goes (``runner.py --profile``): per kind, then the top instructions
    (their bodies are in hlo.tar's optimised modules)."""
    lines = []
    for w in ours.get("workloads", []):
        p = w.get("profile")
        if not p:
            continue
        if "error" in p:
            lines += ["", f"Profile of {w['name']}: failed ({p['error'][:120]})."]
            continue
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in list(p["by_kind_ms_per_step"].items())[:8])
        lines += ["", f"Where {w['name']}'s time goes ({p['steps']} traced steps, {p['source']} records): busy "
                      f"{p['busy_ms_per_step']:.2f} ms/step of {w.get('median_s', float('nan')) * 1e3:.2f}; by kind "
                      f"(ms/step): {kinds}.", "",
                  "| instruction | kind | ms/step | share | calls/step |", "|---|---|---:|---:|---:|"]
        lines += [f"| `{t['op'][:60]}` | {t['kind']} | {t['ms_per_step']:.3f} | {t['share']:.1%} | "
                  f"{t['calls_per_step']:g} |" for t in p["top"][:top]]
    return lines


def update_docs(report: str, readme: str, ours: dict, peer: dict) -> None:
    sys.path.insert(0, BENCH)
    from reporting import replace_block

    replace_block(os.path.join(BENCH, "reports", "gpu.md"), "gpu_report.py", report)
    path = os.path.join(ROOT, "README.md")
    with open(path, encoding="utf-8") as f:
        size = len(f.read().encode())
    replace_block(path, "gpu_report.py", readme)
    with open(path, encoding="utf-8") as f:
        if len(f.read().encode()) > README_LIMIT:  # keep the README under its limit: the link alone
            replace_block(path, "gpu_report.py", "GPU figures (ours vs HF's best, one run): "
                                                 "[bench/reports/gpu.md](bench/reports/gpu.md).")
    with open(os.path.join(BENCH, "results_gpu.json"), "w") as f:
        json.dump({"ours": ours, "peer": peer}, f, indent=1)
    print(f"updated bench/reports/gpu.md, README.md (was {size} bytes), bench/results_gpu.json")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", required=True)
    parser.add_argument("--peer", default=None)
    parser.add_argument("--md", default=None, help="write the tables here")
    parser.add_argument("--update", action="store_true", help="write them into bench/reports/gpu.md and README "
                                                               "(refused for a bundle of other sources)")
    parser.add_argument("--other_sources", action="store_true", help="--update even so")
    args = parser.parse_args(argv)
    with open(args.ours) as f:
        ours = json.load(f)
    peer = {}
    if args.peer and os.path.exists(args.peer):
        with open(args.peer) as f:
            peer = json.load(f)
    report, readme = tables(ours, peer)
    print(report)
    if args.md:
        with open(args.md, "w") as f:
            f.write(report)
    if args.update:
        sys.path.insert(0, os.path.join(BENCH, "xla"))
        import export  # (numpy: here, not on the device)

        here, theirs = export.source_stamp(), ours.get("source")
        if not args.other_sources and (theirs or {}).get("digest") != here["digest"]:
            sys.exit(f"gpu_report.py: refused: {args.ours} measured the steps of {export.describe_source(theirs)}, "
                     f"this tree is {export.describe_source(here)}: its tables would stand beside other code "
                     f"(--other_sources writes them anyway, naming the sources they measured)")
        update_docs(report, readme, ours, peer)


if __name__ == "__main__":
    main()
