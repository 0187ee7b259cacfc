"""Runs the steps ``export.py`` wrote, with jax and numpy only (no TensorFlow): compiles each HLO module for the
device, checks its first steps against TF's results on CPU, times the steady state, and reports ms/step, tokens/s,
MFU (the model FLOPs ``xlnet_tf.flops`` gave the exporter, over the matmul peak measured in this run) and memory.

    python3 bench/xla/runner.py --bundle DIR [--platform cpu|cuda] [--steps 20] [--json out.json]
        [--dump_hlo DIR] [--profile GLOBS]   # the optimised modules; where the named steps' device time goes
    python3 bench/xla/runner.py --bundle DIR --target h200   # compiled for a GPU on a machine without one: its
        # memory and a roofline estimate of where its time would go (gpu_target.py, roofline.py)
    python3 bench/xla/runner.py --bundle DIR --target tpu-v5e   # compiled for a TPU chip by libtpu, none present:
        # does it compile, does it fit the chip's memory, XLA's TPU cost-model time (tpu_target.py)

Runs on jax 0.10.2 (Python 3.11, this project's test extra) and 0.11.2 (the GPU machines, Python 3.12). The
entry points it needs are jaxlib's own, behind the public API (``xla_client.XlaComputation``, the MLIR conversion,
``Client.compile_and_load``, ``LoadedExecutable.execute_sharded``); ``JaxlibXla`` is the one place that touches them.

The module goes to XLA as TensorFlow's bridge made it: HloModuleProto -> MLIR text (jaxlib) -> compile. (The
StableHLO text TensorFlow prints does not parse in jaxlib: TF's and jaxlib's MLIR print boolean constants
differently.) Parameters: the step's explicit inputs (the batch, then the carried state: memory or a placeholder),
then the captured variables in ``concrete_function.captured_inputs`` order; outputs: the step's results, then the
updated variables (``input_output_alias``), which carry into the next step as TensorFlow's variables would.

Tolerances (relative, per step, on the loss, the gradient norm and the norms of the weights' update):
* float32: 1e-4 on the loss (the issue's bound), 1e-3 on the norms. On a GPU float32 modules are checked with
  their matmuls at HIGHEST precision (an extra compile): XLA's DEFAULT lets cuBLAS multiply in TF32 (10-bit
  mantissa), as TensorFlow on a GPU would, which no float32 CPU reference can match to 1e-4. The timed module is
  the DEFAULT one, as the step runs there.
* mixed_bfloat16: 1e-2 on the loss, 3e-2 on the norms. Activations and matmul inputs are bfloat16 (8 significant
  bits: one rounding step is 2^-8 = 3.9e-3 relative) and the two XLA versions fuse, and so round, in different
  places; over a 12-layer step that moves a small batch's loss by up to 3.8e-3 (measured: the classifier at
  XLNet-Base size, batch 4, step 2; pretraining losses, means over many targets, by <= 8e-5). 1e-2 is 2.5 rounding
  steps. The float32 check is the one that catches a wrong export (a misplaced parameter or a state not carried
  moves the loss by far more than 1e-4).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import bundle as fmt  # noqa: E402
import deviceless  # noqa: E402
import gpu_target  # noqa: E402
import tpu_target  # noqa: E402

TOLERANCE = {
    "float32": {"loss": 1e-4, "grad_norm": 1e-3, "update_norm": 1e-3, "output_norm": 1e-4},
    "mixed_bfloat16": {"loss": 1e-2, "grad_norm": 3e-2, "update_norm": 3e-2, "output_norm": 1e-2},
}


class JaxlibXla:
    """jaxlib's compile/execute entry points, by version where they differ."""

    def __init__(self, platform_name=None, target=None):
        import jax
        jax.config.update("jax_enable_x64", True)  # the dropout seed variables are s64[2]
        from jax._src import xla_bridge
        from jax._src.lib import xla_client

        self.jax, self.xc, self.target = jax, xla_client, target
        if target:  # compile-only: a described GPU or TPU, none present (deviceless)
            self.device = deviceless.device(target)
            self.platform = deviceless.platform(target)
            return
        self.backend = xla_bridge.get_backend(platform_name)
        self.device = self.backend.local_devices()[0]
        self.platform = self.backend.platform  # "cpu", "cuda", "rocm", "tpu"

    def mlir(self, hlo_proto: bytes, fp32_highest: bool = False):
        """The module as MLIR text (the precision rewrite needs text), or, where a jaxlib lacks that conversion,
        as StableHLO bytecode (``hlo_to_stablehlo``: newer jaxlibs; no precision rewrite there)."""
        mlir = self.xc._xla.mlir
        if hasattr(mlir, "xla_computation_to_mlir_module") and hasattr(self.xc, "XlaComputation"):
            text = mlir.xla_computation_to_mlir_module(self.xc.XlaComputation(hlo_proto))
            if fp32_highest:
                text = text.replace("precision = [DEFAULT, DEFAULT]", "precision = [HIGHEST, HIGHEST]")
            return text
        return mlir.hlo_to_stablehlo(hlo_proto)

    def compile(self, mlir_text: str):
        if self.target:
            return deviceless.compile_for(self.device, self.xc, mlir_text)
        devices = [self.device]
        device_list = getattr(self.xc, "DeviceList", None)
        if device_list is not None:
            devices = device_list(tuple(devices))
        compile_and_load = getattr(self.backend, "compile_and_load", None) or self.backend.compile
        return compile_and_load(mlir_text, devices, self.xc.CompileOptions())

    def put(self, value: np.ndarray):
        return self.jax.device_put(value, self.device)

    def execute(self, executable, args: list) -> list:
        if hasattr(executable, "execute_sharded"):
            # jax >= 0.4.3x: one jax Array per argument (each on its devices); results per output, per device.
            results = executable.execute_sharded(args)
            return [x[0] for x in results.disassemble_into_single_device_arrays()]
        return executable.execute(args)

    def memory_stats(self) -> dict:
        try:
            return dict(self.device.memory_stats() or {})
        except Exception:  # noqa: BLE001 - CPU devices have none
            return {}

    def versions(self) -> dict:
        import jaxlib
        return {"jax": self.jax.__version__, "jaxlib": jaxlib.__version__, "python": platform.python_version(),
                "numpy": np.__version__, "device": getattr(self.device, "device_kind", str(self.device)),
                "platform": self.platform, **({"compile_only_target": self.target} if self.target else {})}


def matmul_peaks(xla: JaxlibXla, size: int, seconds: float = 1.0) -> dict:
    """Achievable matmul FLOP/s on the device: fp32 (HIGHEST), "tf32" (float32 at DEFAULT precision, what our
    float32 modules' dots use: TF32 on NVIDIA GPUs, plain float32 on CPUs) and bf16 (bfloat16 in, float32
    accumulation), each the best of several timed windows, device-synchronised."""
    import jax
    import jax.numpy as jnp

    peaks = {}
    for label, dtype, precision in (("fp32", jnp.float32, jax.lax.Precision.HIGHEST),
                                    ("tf32", jnp.float32, jax.lax.Precision.DEFAULT),
                                    ("bf16", jnp.bfloat16, jax.lax.Precision.DEFAULT)):
        key = jax.random.PRNGKey(0)
        a = jax.device_put(jax.random.normal(key, (size, size), dtype), xla.device)
        b = jax.device_put(jax.random.normal(key, (size, size), dtype), xla.device)
        f = jax.jit(lambda x, y: jnp.dot(x, y, precision=precision, preferred_element_type=jnp.float32))
        f(a, b).block_until_ready()
        best, deadline = 0.0, time.perf_counter() + seconds
        reps = 1
        while time.perf_counter() < deadline or best == 0.0:
            t = time.perf_counter()
            for _ in range(reps):
                out = f(a, b)
            out.block_until_ready()
            dt = time.perf_counter() - t
            best = max(best, 2 * size ** 3 * reps / dt)
            if dt < 0.05:
                reps *= 2
        peaks[label] = best
    return peaks


def _rel(ours: float, ref: float) -> float:
    return abs(ours - ref) / max(abs(ref), 1e-30)


class Workload:
    """One exported step on the device: its state between steps, its verification and its timing."""

    def __init__(self, xla: JaxlibXla, bundle: str, spec: dict):
        self.xla, self.spec = xla, spec
        self.name, self.dtype = spec["name"], spec["dtype"]
        t = time.perf_counter()
        self.initial, batches = fmt.initial_state(bundle, spec)
        self.setup_s = time.perf_counter() - t
        self.batches = [{k: xla.put(v) for k, v in b.items()} for b in batches]
        self.carry = {int(o): p for o, p in spec["carry"].items()}
        self.outputs = spec["outputs"]
        self.state = None

    def reset(self):
        self.state = [None if v is None else self.xla.put(v) for v in self.initial]
        self.i = 0

    def step(self, executable) -> list:
        batch = self.batches[self.i % len(self.batches)]
        args = [batch[p["key"]] if p["role"] == "batch" else s for p, s in zip(self.spec["params"], self.state)]
        outs = self.xla.execute(executable, args)
        for o, p in self.carry.items():
            self.state[p] = outs[o]
        self.i += 1
        return outs

    def record(self, outs) -> dict:
        """What the reference records after a step, from the device."""
        if self.spec["kind"] == "infer":
            out = np.asarray(outs[self.outputs.index("sequence_output")]).astype(np.float64)
            return {"output_norm": float(np.sqrt(np.sum(out * out))), "output_mean": float(out.mean())}
        record = {"loss": float(np.asarray(outs[self.outputs.index("loss")])),
                  "grad_norm": float(np.asarray(outs[self.outputs.index("grad_norm")]))}
        values = [None if p["role"] == "batch" else np.asarray(s) for p, s in zip(self.spec["params"], self.state)]
        record.update(fmt.state_norms(values, self.spec, self.initial))
        return record

    def verify(self, executable) -> dict:
        reference = self.spec.get("reference")
        if not reference:
            return {"checked": False, "why": "exported without a TF reference (--ref_steps 0)"}
        self.reset()
        ours = [self.record(self.step(executable)) for _ in reference["steps"]]
        return dict(compare(ours, reference["steps"], self.dtype), reference_by=reference["by"])

    def time(self, executable, warmup: int, steps: int) -> dict:
        self.reset()
        sync = self.outputs.index("loss") if "loss" in self.outputs else 0
        for _ in range(warmup):
            self.step(executable)[sync].block_until_ready()
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            self.step(executable)[sync].block_until_ready()
            times.append(time.perf_counter() - t)
        return {"median_s": statistics.median(times), "min_s": min(times), "steps": steps, "warmup": warmup}


def compare(ours: list, reference: list, dtype: str) -> dict:
    """Per step, each recorded quantity against TF's: relative difference and whether it is within ``dtype``'s
    tolerance (the weights' and optimizer state's own norms are reported, not judged: ``update_norm`` is the
    check of what the optimizer did)."""
    tolerance = TOLERANCE.get(dtype, TOLERANCE["mixed_bfloat16"])
    steps, ok = [], True
    for mine, ref in zip(ours, reference):
        row = {}
        for key in ref:
            if key not in mine:
                continue
            rel = _rel(mine[key], ref[key])
            row[key] = {"ours": mine[key], "tf": ref[key], "rel": rel}
            if key in tolerance:
                row[key]["ok"] = rel <= tolerance[key]
                ok &= rel <= tolerance[key]
        steps.append(row)
    return {"checked": True, "ok": bool(ok and len(ours) == len(reference)), "tolerance": tolerance,
            "steps": steps}


def peak_for(dtype: str, peaks: dict) -> tuple[str, float]:
    label = "bf16" if "bfloat16" in dtype else "tf32"
    return label, peaks.get(label, 0.0)


def select(workloads: list, names, bundle: str) -> list:
    """The workloads ``names`` (names or globs) match, in the order of the first pattern each matches (all for
    none); a pattern matching nothing is a ValueError (else a typo runs nothing and reads as "all verified")."""
    if not names:
        return workloads
    unmatched = [n for n in names if not any(fnmatch.fnmatch(w["name"], n) for w in workloads)]
    if unmatched:
        raise ValueError(f"--workloads: {', '.join(unmatched)} match no workload of {bundle} (it holds "
                         f"{', '.join(w['name'] for w in workloads)})")

    def rank(w):
        return next((i for i, n in enumerate(names) if fnmatch.fnmatch(w["name"], n)), None)
    return sorted((w for w in workloads if rank(w) is not None), key=rank)


def run(bundle: str, platform_name=None, names=None, steps=20, warmup=3, peaks=True, peak_size=None,
        verify_fp32_highest=None, deadline_s=None, log=print, dump_hlo=None, time_steps=True, compile_threads=1,
        json_path=None, compile_only=False, profile=(), profile_steps=5, target=None) -> dict:
    start = time.perf_counter()
    xla = JaxlibXla(platform_name, target)
    compile_only = compile_only or bool(target)  # a described device compiles, it cannot run
    peaks = peaks and not target
    manifest = fmt.read_manifest(bundle)
    workloads = select(manifest["workloads"], names, bundle)
    info = xla.versions()
    log(f"runner: {info}; {len(workloads)} workloads from {bundle}")
    result = {"info": info, "bundle": os.path.abspath(bundle), "source": manifest.get("source"), "workloads": [],
              "skipped": []}
    if peaks:
        size = peak_size or (8192 if xla.platform != "cpu" else 1024)
        result["peaks_flops"] = matmul_peaks(xla, size)
        result["peak_size"] = size
        log("matmul peak: " + ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in result["peaks_flops"].items()))
    # a GPU whose figures gpu_target holds: each timed step gets the roofline of its own kernels beside it
    measured_on = gpu_target.target_of(info["device"]) if xla.platform != "cpu" else None
    if verify_fp32_highest is None:
        verify_fp32_highest = xla.platform != "cpu"
    if not compile_threads:
        compile_threads = 1 if xla.platform == "cpu" else min(16, os.cpu_count() or 1)

    def needs_highest(spec):
        return not compile_only and verify_fp32_highest and spec["dtype"] == "float32" and bool(spec.get("reference"))

    def compile_job(spec, highest):
        t = time.perf_counter()
        executable = xla.compile(xla.mlir(fmt.read_hlo(bundle, spec), highest))
        return executable, time.perf_counter() - t

    # Compiles ahead in threads (XLA compiles release the GIL; a GPU compile is mostly single-threaded), in the
    # bundle's order; each workload waits for its own.
    pool = None
    if compile_threads > 1:
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(compile_threads)
    compiled = {}
    for spec in workloads:
        for highest in ((False, True) if needs_highest(spec) else (False,)):
            key = (spec["name"], highest)
            compiled[key] = pool.submit(compile_job, spec, highest) if pool else None

    def executable_for(spec, highest):
        future = compiled.pop((spec["name"], highest))
        return future.result() if future is not None else compile_job(spec, highest)

    for spec in workloads:
        if deadline_s and time.perf_counter() - start > deadline_s:
            result["skipped"].append({"name": spec["name"], "why": f"past the {deadline_s:.0f} s deadline"})
            log(f"[{spec['name']}] skipped: past the deadline")
            for highest in (False, True):
                future = compiled.pop((spec["name"], highest), None)
                if future is not None:
                    future.cancel()
            continue
        row = {"name": spec["name"], "workload": spec["workload"], "objective": spec.get("objective"),
               "dtype": spec["dtype"], "config": spec["config"]["name"], "batch": spec["batch"],
               "seq_len": spec["seq_len"], "tokens_per_step": spec["tokens_per_step"],
               "flops_per_step": spec["flops_per_step"], "verify": {"checked": False},
               "for_tpu": bool(spec.get("for_tpu"))}
        if target and tpu_target.is_tpu(target) != row["for_tpu"]:  # traced for the other kind of device
            log(f"[{spec['name']}] note: exported {'for a TPU' if row['for_tpu'] else 'without --for_tpu'}, "
                f"compiled for {target}: some ops take the other device's form (export.py --for_tpu)")
        try:
            if compile_only:  # "does it compile, and what memory does the step need": no state, no steps
                executable, row["compile_s"] = executable_for(spec, False)
                stats = executable.get_compiled_memory_stats()
                row.update(compiled_memory_gib=(stats.argument_size_in_bytes + stats.output_size_in_bytes
                                                - stats.alias_size_in_bytes + stats.temp_size_in_bytes) / 2 ** 30,
                           temp_memory_gib=stats.temp_size_in_bytes / 2 ** 30)
                log(f"[{spec['name']}] compiled in {row['compile_s']:.1f} s: step memory "
                    f"{row['compiled_memory_gib']:.2f} GiB (temporaries {row['temp_memory_gib']:.2f}), "
                    f"{spec['flops_per_step'] / 1e12:.2f} TFLOP/step")
                hlo_text = _dump(executable, dump_hlo, spec["name"], row) if dump_hlo else None
                if tpu_target.is_tpu(target):  # the TPU compiler's own cost model
                    row["estimate"] = tpu_target.estimate(executable, target, spec,
                                                          row["compiled_memory_gib"] * 2 ** 30, log)
                elif target:
                    row["estimate"] = _estimate(hlo_text or _hlo_text(executable) or "", target, spec, log)
                result["workloads"].append(row)
                if json_path:
                    _write_json(json_path, result)
                continue
            w = Workload(xla, bundle, spec)
            executable, row["compile_s"] = executable_for(spec, False)
            stats = executable.get_compiled_memory_stats()
            row["compiled_memory_gib"] = (stats.argument_size_in_bytes + stats.output_size_in_bytes
                                          - stats.alias_size_in_bytes + stats.temp_size_in_bytes) / 2 ** 30
            row["temp_memory_gib"] = stats.temp_size_in_bytes / 2 ** 30
            hlo_text = _dump(executable, dump_hlo, spec["name"], row) if dump_hlo else None
            checker = executable
            if needs_highest(spec):
                checker, row["verify_compile_s"] = executable_for(spec, True)
                row["verify_precision"] = "HIGHEST"
            row["verify"] = w.verify(checker)
            del checker
            if row["verify"].get("checked"):
                log(f"[{spec['name']}] verify {'OK' if row['verify']['ok'] else 'FAILED'}: " + "; ".join(
                    ", ".join(f"{k} {v['ours']:.7g} vs TF {v['tf']:.7g} ({v['rel']:.1e})"
                              for k, v in s.items() if k in ("loss", "output_norm", "grad_norm"))
                    for s in row["verify"]["steps"]))
            if time_steps:
                row.update(w.time(executable, warmup, steps))
                t = row["median_s"]
                row["tokens_per_s"] = spec["tokens_per_step"] / t
                label, peak = peak_for(spec["dtype"], result.get("peaks_flops", {}))
                if peak:
                    row["mfu"] = spec["flops_per_step"] / t / peak
                    row["mfu_of"] = label
                log(f"[{spec['name']}] {t * 1e3:.2f} ms/step (median of {steps}), "
                    f"{row['tokens_per_s']:,.0f} tokens/s" + (f", MFU {row['mfu']:.1%} of {label}" if peak else "")
                    + f", compiled in {row['compile_s']:.1f} s, step memory {row['compiled_memory_gib']:.2f} GiB")
                if measured_on and hlo_text and result.get("peaks_flops"):  # at the measured matmul peaks
                    row["estimate"] = _estimate(hlo_text, measured_on, spec, log, result["peaks_flops"])
                    row["estimate"]["measured_over_estimate"] = t * 1e3 / row["estimate"]["ms"]
            if time_steps and any(fnmatch.fnmatch(spec["name"], p) for p in profile):
                row["profile"] = _profile(w, executable, profile_steps, hlo_text, dump_hlo, spec["name"], log)
            mem = xla.memory_stats()
            if "peak_bytes_in_use" in mem:
                row["process_peak_gib"] = mem["peak_bytes_in_use"] / 2 ** 30
            del executable, w
        except Exception as e:  # noqa: BLE001 - one failing workload is reported, the others still run
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:500] if str(e) else ''}"
            log(f"[{spec['name']}] ERROR {row['error']}")
        result["workloads"].append(row)
        if json_path:  # as it goes: a run cut short still leaves its rows
            _write_json(json_path, result)
    if pool:
        pool.shutdown(wait=False, cancel_futures=True)
    result["seconds"] = time.perf_counter() - start
    return result


def _estimate(hlo_text: str, target: str, spec: dict, log, peaks=None) -> dict:
    """The roofline estimate of the step XLA compiled for ``target`` (roofline.py), with the MFU it implies, at
    ``peaks`` (measured; default: the part's specification)."""
    import roofline

    device = gpu_target.TARGETS[target]
    peaks = peaks or device["peaks"]
    est = roofline.estimate(hlo_text, peaks, device["bandwidth"])
    peak = peaks["bf16" if spec["dtype"] == "mixed_bfloat16" else "tf32"]
    est["mfu"] = spec["flops_per_step"] / (est["ms"] / 1e3) / peak
    est["tokens_per_s"] = spec["tokens_per_step"] / (est["ms"] / 1e3)
    log(f"[{spec['name']}] estimate on {device['name']}: " + roofline.report(est, spec["flops_per_step"], peak)
        .replace("\n", "\n    "))
    return est


def _write_json(path: str, result: dict) -> None:
    result = dict(result, tensorflow_imported="tensorflow" in sys.modules)
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)


def _profile(w, executable, steps: int, hlo_text, directory, name: str, log) -> dict:
    """``steps`` more steps under jax's profiler: device time per instruction and per kind (device_profile)."""
    import shutil
    import tempfile

    import device_profile

    trace_dir = tempfile.mkdtemp(prefix="xla_trace_")
    try:
        path = device_profile.trace(lambda: w.time(executable, 0, steps), trace_dir)
        if hlo_text is None:
            hlo_text = _hlo_text(executable)
        summary = device_profile.summarize(path, steps, device_profile.instruction_kinds(hlo_text or ""))
        if directory:
            device_profile.keep_trace(path, os.path.join(directory, f"{name}.xplane.pb.gz"))
    except Exception as e:  # noqa: BLE001 - the profile is extra: its failure must not fail the workload
        log(f"[{name}] profile failed: {type(e).__name__}: {str(e)[:200]}")
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    kinds = ", ".join(f"{k} {v:.2f}" for k, v in list(summary["by_kind_ms_per_step"].items())[:6])
    log(f"[{name}] profile ({summary['source']}, {steps} steps): busy {summary['busy_ms_per_step']:.2f} ms/step; "
        f"{kinds}")
    return summary


def _hlo_text(executable):
    try:
        return executable.get_hlo_text() if hasattr(executable, "get_hlo_text") else \
            executable.hlo_modules()[0].to_string()
    except Exception:  # noqa: BLE001 - callers report the text as missing
        return None


def _dump(executable, directory: str, name: str, row: dict):
    """The optimised HLO XLA compiled (gzipped) and its op mix: fusions by kind, library calls by target;
    returns the text."""
    import collections
    import gzip

    os.makedirs(directory, exist_ok=True)
    text = _hlo_text(executable)
    if text is None:
        row["hlo_dump_error"] = "the executable gave no HLO text"
        return None
    with gzip.open(os.path.join(directory, f"{name}.optimized.hlo.gz"), "wt") as f:
        f.write(text)
    entry = text[text.find("\nENTRY"):]
    ops = collections.Counter(re.findall(r"= [^ ]+ ([a-z][\w-]*)\(", entry))
    kinds = collections.Counter(re.findall(r"kind=(k\w+)", entry))
    targets = collections.Counter(re.findall(r'custom_call_target="([^"]+)"', entry))
    row["optimized_hlo"] = {"entry_ops": dict(ops.most_common(15)), "fusion_kinds": dict(kinds),
                            "custom_calls": dict(targets.most_common(10))}
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--platform", default=None, help="jax platform (cpu, cuda); default: jax's default")
    parser.add_argument("--workloads", default="", help="comma list of names or globs, run in this order "
                                                                 "(default: all, in the bundle's order)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (median)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no_time", action="store_true", help="verify only")
    parser.add_argument("--compile_only", action="store_true",
                        help="compile and report the step's device memory (XLA's) and FLOPs; run nothing")
    parser.add_argument("--target", default=None, choices=deviceless.TARGETS,
                        help="compile for this GPU or TPU on a machine without one (--compile_only): a GPU with "
                             "jax's CUDA plugin, and a roofline estimate (roofline.py); a TPU chip with libtpu, "
                             "and XLA's TPU cost model (tpu_target.py). No device or driver needed")
    parser.add_argument("--no_peaks", action="store_true")
    parser.add_argument("--peak_size", type=int, default=None)
    parser.add_argument("--deadline", type=float, default=None, help="seconds; later workloads are skipped")
    parser.add_argument("--dump_hlo", default=None, help="directory for the optimised HLO and its op mix")
    parser.add_argument("--json", default=None, help="write the results here (after every workload)")
    parser.add_argument("--profile", default="", help="comma list of names or globs: after timing, trace "
                                                      "--profile_steps more steps (device time per instruction)")
    parser.add_argument("--profile_steps", type=int, default=5)
    parser.add_argument("--compile_threads", type=int, default=None,
                        help="workloads compiled ahead in parallel (default: 1 on CPU, up to 16 on an accelerator)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every verified workload is within "
                                                             "tolerance and none failed")
    args = parser.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    if not os.path.isfile(os.path.join(args.bundle, "manifest.json")):
        parser.error(f"--bundle={args.bundle}: no bundle there (no manifest.json; bench/xla/export.py writes one)")
    try:  # before jax loads and the peaks are measured
        select(fmt.read_manifest(args.bundle)["workloads"], names, args.bundle)
    except ValueError as e:
        parser.error(str(e))
    if args.target:
        try:
            deviceless.device(args.target)
        except RuntimeError as e:  # no CUDA plugin or libtpu: say what to install, in one line
            parser.error(f"--target {args.target}: {e}")
    result = run(args.bundle, args.platform, names, args.steps, args.warmup, peaks=not args.no_peaks,
                 peak_size=args.peak_size, deadline_s=args.deadline, dump_hlo=args.dump_hlo,
                 time_steps=not args.no_time, compile_threads=args.compile_threads or 0, json_path=args.json,
                 compile_only=args.compile_only, profile=[p for p in args.profile.split(",") if p],
                 profile_steps=args.profile_steps, target=args.target)
    result["tensorflow_imported"] = "tensorflow" in sys.modules
    if args.json:
        _write_json(args.json, result)
    bad = [w["name"] for w in result["workloads"]
           if "error" in w or (w.get("verify", {}).get("checked") and not w["verify"]["ok"])]
    unchecked = [w["name"] for w in result["workloads"]
                 if not w.get("verify", {}).get("checked") and not (args.compile_only or args.target)]
    ok = "compiled" if args.compile_only or args.target else "all verified within tolerance"
    print(f"runner: {len(result['workloads'])} workloads in {result['seconds']:.0f} s; "
          f"{ok if not bad else 'FAILED: ' + ', '.join(bad)}"
          + (f"; not verified (no reference): {', '.join(unchecked)}" if unchecked else ""))
    if args.check and bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
