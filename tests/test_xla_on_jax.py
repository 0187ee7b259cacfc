"""Our real training steps, exported as XLA modules (bench/xla/export.py), run by jax without TensorFlow
(bench/xla/runner.py, what the GPU machines run) and reproduce TensorFlow's own results on this CPU: the tiny
config's pretraining steps (plm with memory, pmlm) and fine-tuning steps (the classifier, SQuAD).

jax is in the ``test`` extra: under CI=true a missing jax fails these tests (in one line) instead of skipping them.
"""

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from background import background, resource
from needs import require, skip_unless_ci

require("jax")
pytestmark = pytest.mark.slow  # an export and a jax compile: ~20 s on 2 cores

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
XLA_DIR = os.path.join(ROOT, "bench", "xla")
sys.path.insert(0, XLA_DIR)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import bundle  # noqa: E402
import runner  # noqa: E402
import tpu_target  # noqa: E402

# The tiny config, one layer: the four workloads export, compile (TF and jax) and run in about 30 s on 2 cores.
REF_STEPS = 2


@resource
def _bundle(tmp_path):
    """The bundle (plm f32 with memory, pmlm f32, the classifier's and SQuAD's fine-tuning steps f32) written by
    bench/xla/export.py, and the runner's results on jax CPU, in a process that imports no TensorFlow."""
    out = str(tmp_path)
    # min_param_bytes: the position encodings (and larger constants) travel as parameters, as at full size.
    proc = subprocess.run([sys.executable, os.path.join(XLA_DIR, "export.py"), "--out", out, "--config", "tiny",
                           "--set", "n_layer=1,seq_len=16,reuse_len=8,mem_len=8,num_predict=4", "--batch", "2",
                           "--objectives", "plm,pmlm", "--dtypes", "float32", "--finetune", "clf,squad",
                           "--ref_steps", str(REF_STEPS), "--seed", "0", "--min_param_bytes", "1024"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result_path = os.path.join(out, "result.json")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, os.path.join(XLA_DIR, "runner.py"), "--bundle", out, "--platform", "cpu",
                           "--no_peaks", "--steps", "2", "--warmup", "1", "--json", result_path, "--check",
                           "--dump_hlo", os.path.join(out, "hlo"), "--profile", "tiny_plm_*", "--profile_steps", "2"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with open(result_path) as f:
        return out, json.load(f)


@pytest.fixture(scope="module")
def exported():
    return _bundle.value()


def test_runner_reproduces_tf_loss_per_step_on_jax_cpu(exported):
    _, result = exported
    rows = {w["name"]: w for w in result["workloads"]}
    assert sorted(rows) == ["clf-16_f32_b2", "squad-16_f32_b2", "tiny_plm_f32_b2", "tiny_pmlm_f32_b2"]
    for name, row in rows.items():
        assert "error" not in row, row.get("error")
        verify = row["verify"]
        assert verify["checked"] and verify["ok"], (name, verify)
        assert len(verify["steps"]) == REF_STEPS
        for step in verify["steps"]:
            assert step["loss"]["rel"] <= 1e-4, (name, step)
            assert step["update_norm"]["rel"] <= 1e-3, (name, step)
        # The memory (plm) and the optimizer state carry from step to step: TF's losses differ per step.
        assert verify["steps"][0]["loss"]["tf"] != verify["steps"][1]["loss"]["tf"]
        assert row["median_s"] > 0 and row["tokens_per_s"] > 0


def test_profile_says_where_the_step_time_goes(exported):
    """``--profile``: the traced steps' time per instruction of the optimised module, summed by kind; every
    instruction it names is one of the module's (the dumped HLO), and the kinds add up to the busy time."""
    import gzip

    import device_profile

    out, result = exported
    rows = {w["name"]: w for w in result["workloads"]}
    assert "profile" not in rows["tiny_pmlm_f32_b2"]  # only the workloads --profile names
    profile = rows["tiny_plm_f32_b2"]["profile"]
    assert "error" not in profile, profile
    assert profile["steps"] == 2 and profile["source"] == "host" and profile["busy_ms_per_step"] > 0
    assert sum(profile["by_kind_ms_per_step"].values()) == pytest.approx(profile["busy_ms_per_step"])
    assert any(kind == "dot" or kind.startswith("fusion:") for kind in profile["by_kind_ms_per_step"])
    with gzip.open(os.path.join(out, "hlo", "tiny_plm_f32_b2.optimized.hlo.gz"), "rt") as f:
        kinds = device_profile.instruction_kinds(f.read())
    assert len(profile["top"]) >= 10
    for entry in profile["top"]:
        assert kinds[entry["op"]] == entry["kind"], entry
    ranked = [entry["ms_per_step"] for entry in profile["top"]]
    assert ranked == sorted(ranked, reverse=True)
    assert os.path.getsize(os.path.join(out, "hlo", "tiny_plm_f32_b2.xplane.pb.gz")) > 0  # the raw trace kept


def test_roofline_counts_every_matmul_of_the_optimised_step(exported):
    """The estimate's FLOPs are the dots of the module XLA optimised (here for this CPU), through fusions and
    nested computations: the step's model FLOPs (xlnet_tf.flops, held to the dots TF hands XLA by test_flops)."""
    import gzip

    import roofline

    out, result = exported
    rows = {w["name"]: w for w in result["workloads"]}
    for name in ("tiny_plm_f32_b2", "tiny_pmlm_f32_b2"):
        with gzip.open(os.path.join(out, "hlo", f"{name}.optimized.hlo.gz"), "rt") as f:
            est = roofline.estimate(f.read(), {"bf16": 1e12, "tf32": 1e12, "fp32": 1e12}, 1e11)
        model = rows[name]["flops_per_step"]
        assert model <= est["flops"] <= model * 1.002, (name, model, est["flops"])
        assert est["kernels"] > 10 and est["bytes"] > 0 and est["while_loops"] == 0
        assert est["ms"] == pytest.approx(est["matmul_bound_ms"] + est["memory_bound_ms"])
        assert sum(est["by_kind_ms"].values()) == pytest.approx(est["ms"])


# A GPU module's shapes of kernels: a Triton GEMM fusion (its dot in a nested computation), a cuBLAS call (a
# tuple with its workspace, contracting dimensions in its backend config) read through get-tuple-element, and a
# loop fusion reading one eighth of its operand through a slice. (A backslash ends a line that goes on in HLO.)
GPU_HLO = """HloModule jit_step, is_scheduled=true

%gemm_computation (p0: bf16[64,128], p1: bf16[128,256]) -> bf16[64,256] {
  %p0 = bf16[64,128]{1,0} parameter(0)
  %p1 = bf16[128,256]{1,0} parameter(1)
  ROOT %dot.1 = bf16[64,256]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_slice (param_0: f32[512,256]) -> f32[64,256] {
  %param_0 = f32[512,256]{1,0} parameter(0)
  %bitcast.1 = f32[512,256]{1,0} bitcast(%param_0)
  %slice.1 = f32[64,256]{1,0} slice(%bitcast.1), slice={[0:64], [0:256]}
  ROOT %exponential.1 = f32[64,256]{1,0} exponential(%slice.1)
}

ENTRY %main (a: bf16[64,128], b: bf16[128,256], c: f32[64,32], d: f32[32,256], big: f32[512,256]) -> \
(bf16[64,256], f32[64,256], f32[64,256]) {
  %a = bf16[64,128]{1,0} parameter(0)
  %b = bf16[128,256]{1,0} parameter(1)
  %c = f32[64,32]{1,0} parameter(2)
  %d = f32[32,256]{1,0} parameter(3)
  %big = f32[512,256]{1,0} parameter(4)
  %gemm_fusion.1 = bf16[64,256]{1,0} fusion(%a, %b), kind=kCustom, calls=%gemm_computation, \
backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
  %cublas-gemm.1 = (f32[64,256]{1,0}, s8[1024]{0}) custom-call(%c, %d), custom_call_target="__cublas$gemm", \
backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],\
"rhs_contracting_dimensions":["0"]}}}
  %get-tuple-element.1 = f32[64,256]{1,0} get-tuple-element(%cublas-gemm.1), index=0
  %loop_exponential_fusion = f32[64,256]{1,0} fusion(%big), kind=kLoop, calls=%fused_slice
  ROOT %tuple = (bf16[64,256]{1,0}, f32[64,256]{1,0}, f32[64,256]{1,0}) tuple(%gemm_fusion.1, \
%get-tuple-element.1, %loop_exponential_fusion)
}
"""


def test_roofline_of_a_gpu_module_takes_the_larger_of_matmul_and_memory_time():
    import roofline

    est = roofline.estimate(GPU_HLO, {"bf16": 1e12, "tf32": 5e11, "fp32": 1e11}, 1e12)
    gemm, cublas = 2 * 64 * 256 * 128, 2 * 64 * 256 * 32  # bf16 on the bf16 peak; float32 at DEFAULT as TF32
    assert est["kernels"] == 3 and est["flops"] == gemm + cublas
    # bytes: outputs + operands; the loop fusion reads its 64-row slice of the 512-row operand
    gemm_bytes, cublas_bytes, loop_bytes = 32768 + 16384 + 65536, 65536 + 1024 + 8192 + 32768, 2 * 65536
    assert est["bytes"] == gemm_bytes + cublas_bytes + loop_bytes
    assert est["matmul_bound_ms"] == pytest.approx((gemm / 1e12 + cublas / 5e11) * 1e3)
    assert est["memory_bound_ms"] == pytest.approx(loop_bytes / 1e12 * 1e3)
    assert est["by_kind_ms"] == pytest.approx({"fusion:kCustom (matmul)": gemm / 1e9, "custom-call:__cublas$gemm":
                                               cublas / 5e8, "fusion:kLoop": loop_bytes / 1e9})
    assert [t["kind"] for t in est["top"]] == ["fusion:kCustom (matmul)", "custom-call:__cublas$gemm",
                                               "fusion:kLoop"]
    text = roofline.report(est, gemm + cublas, 1e12)
    assert "3 kernels" in text and "MFU at most" in text
    with pytest.raises(ValueError, match="no ENTRY"):
        roofline.estimate("HloModule m", {"bf16": 1.0, "tf32": 1.0}, 1.0)


def test_roofline_prices_a_dot_by_the_type_it_reads():
    """Mixed precision's weight gradients multiply bf16 operands into float32: a GPU runs them at the bf16 rate, so
    the estimate must not price them at the TF32 one by their output."""
    import roofline

    text = GPU_HLO.replace("bf16[64,256]", "f32[64,256]")  # the Triton GEMM: bf16 x bf16 -> f32
    est = roofline.estimate(text, {"bf16": 1e12, "tf32": 5e11}, 1e18)  # every kernel bound by its matmul
    gemm, cublas = 2 * 64 * 256 * 128, 2 * 64 * 256 * 32
    assert est["by_kind_ms"]["fusion:kCustom (matmul)"] == pytest.approx(gemm / 1e12 * 1e3)
    assert est["by_kind_ms"]["custom-call:__cublas$gemm"] == pytest.approx(cublas / 5e11 * 1e3)  # f32 x f32: TF32


# XLA's dump of that module's compile: the PTX of the loop fusion (straight through: 5 instructions per thread, the
# parameter loads and the return not counted) and of the GEMM (a branch back: it loops), and their launches.
PTX = """.visible .entry loop_exponential_fusion(
\t.param .u64 loop_exponential_fusion_param_0
)
{
\t.reg .b32 \t%r<4>;
\tld.param.u64 \t%rd1, [loop_exponential_fusion_param_0];
\tmov.u32 \t%r1, %tid.x;
\tshr.u32 \t%r2, %r1, 16;
\txor.b32 \t%r3, %r2, %r1;
\tmul.lo.s32 \t%r3, %r3, -2048144789;
\tst.global.b32 \t[%rd1], %r3;
\tret;

}
.visible .entry gemm_fusion_1(
\t.param .u64 gemm_fusion_1_param_0
)
{
$L__BB0_1:
\tadd.s32 \t%r1, %r1, 1;
\tsetp.lt.s32 \t%p1, %r1, 8;
\t@%p1 bra \t$L__BB0_1;
\tret;

}
"""
THUNKS = """1: kCustomKernel [prev=0 (1)    | next=2 (1)    ] gemm_fusion_1 grid: [8, 1, 1] threads: [128, 1, 1]  \
shared_memory: 0 bytes
2: kCustomKernel [prev=1 (1)    | next=3 (1)    ] loop_exponential_fusion grid: [64, 1, 1] threads: [128, 1, 1]  \
shared_memory: 0 bytes
"""


def test_roofline_bounds_a_kernel_by_the_instructions_it_issues(tmp_path):
    """``roofline.py --kernels``: a kernel whose PTX runs straight through takes at least its warp instructions
    over the issue rate; one that loops keeps its matmul and memory bounds."""
    import roofline

    assert roofline.ptx_instructions(PTX) == {"loop_exponential_fusion": 5, "gemm_fusion_1": None}
    (tmp_path / "module_0001.jit_step.0.ptx").write_text(PTX)
    (tmp_path / "module_0001.jit_step.thunk_sequence.txt").write_text(THUNKS.replace("\\\n", ""))
    issue = roofline.kernel_issue(str(tmp_path))
    assert issue == {"loop_exponential_fusion": 5 * 64 * 128 // 32}
    peaks = {"bf16": 1e12, "tf32": 5e11, "fp32": 1e11}
    plain = roofline.estimate(GPU_HLO, peaks, 1e12)
    est = roofline.estimate(GPU_HLO, peaks, 1e12, issue=issue, issue_rate=1e9)
    assert est["issue_bound_ms"] == pytest.approx(1280 / 1e9 * 1e3)  # above its bytes' 131072 / 1e12
    assert est["matmul_bound_ms"] == plain["matmul_bound_ms"] and est["memory_bound_ms"] == 0
    assert "ms issue-bound" in roofline.report(est, None, 1e12)
    assert roofline.estimate(GPU_HLO, peaks, 1e12, issue=issue, issue_rate=1e15)["ms"] == plain["ms"]
    with pytest.raises(ValueError, match="no PTX"):
        roofline.kernel_issue(str(tmp_path / "thunks-only"))


@pytest.mark.alone
def test_compiling_for_a_gpu_without_one(exported, monkeypatch):
    """``runner.py --target``: the bridge's copies of the updated variables leave the MLIR (a compile-only client
    legalises to StableHLO, which has none), the outputs renamed to what was copied; without jax's CUDA plugin
    (this test environment) the runner says what to install."""
    import deviceless
    import gpu_target

    monkeypatch.setenv("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")  # what compile_only_device sets, undone after

    mlir = """func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<2xi64>) -> (tensor<4xf32>, tensor<2xi64>) {
    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
    %1 = mhlo.copy %0 : tensor<4xf32> loc(#loc7)
    %10 = mhlo.copy %arg1 : tensor<2xi64> loc(#loc7)
    return %1, %10 : tensor<4xf32>, tensor<2xi64> loc(#loc)
  }"""
    stripped = deviceless.without_copies(mlir)
    assert "mhlo.copy" not in stripped and "return %0, %arg1 : tensor<4xf32>, tensor<2xi64>" in stripped
    assert "%0 = stablehlo.add %arg0, %arg0" in stripped
    assert deviceless.without_copies(stripped) == stripped
    assert 'device_description_str: "NVIDIA H200 141GB HBM3e"' in gpu_target.target_config("h200")
    # a GPU run's device, named as jax does: its roofline beside the measured step (an H100 PCIe has other figures)
    assert [gpu_target.target_of(k) for k in ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "cpu")] \
        == ["h200", "h100", None, None]
    with pytest.raises(ValueError, match="h100, h200"):
        gpu_target.target_config("a100")
    if importlib.util.find_spec("jax_plugins") is None or importlib.util.find_spec("jax_plugins.xla_cuda13") is None:
        with pytest.raises(RuntimeError, match=r"jax\[cuda13\]"):
            gpu_target.compile_only_device("h200")
        out, _ = exported
        proc = subprocess.run([sys.executable, os.path.join(XLA_DIR, "runner.py"), "--bundle", out, "--target",
                               "h200"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "--target h200: compiling for a GPU without one needs" in proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
    else:  # an environment with the plugin: the described device, compile-only
        assert gpu_target.compile_only_device("h200").device_kind == "NVIDIA H200 141GB HBM3e"


@background  # two processes: the export, then libtpu's compiles
def test_every_step_compiles_for_a_tpu_chip_without_one(tmp_path):
    """``export.py --for_tpu`` then ``runner.py --target tpu-v5e``: libtpu (the TPU compiler, in the test extra)
    compiles each step as a TPU runs it (pretraining plm with memory and pmlm, the classifier's and SQuAD's
    fine-tuning steps) for a TPU v5e chip, none present, two at a time. Each compiles, fits the chip's memory,
    computes at least the model's FLOPs, runs no loop (a gather of row windows is one iteration per row on a
    TPU: ``ops.row_windows``), and gets XLA's TPU cost-model time (every call it does not price taken out), whose
    matmul rate for the chip is its published bf16 peak (the MFU's denominator)."""
    if importlib.util.find_spec("libtpu") is None:
        skip_unless_ci("libtpu is not installed; it is in the 'test' extra (jax[tpu]): pip install -e '.[test]'")
    out = str(tmp_path / "bundle")
    proc = subprocess.run([sys.executable, os.path.join(XLA_DIR, "export.py"), "--out", out, "--config", "tiny",
                           "--set", "n_layer=1,seq_len=16,reuse_len=8,mem_len=8,num_predict=4", "--batch", "2",
                           "--objectives", "plm,pmlm", "--dtypes", "float32", "--finetune", "clf,squad",
                           "--ref_steps", "0", "--for_tpu"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    path = tmp_path / "tpu.json"
    proc = subprocess.run([sys.executable, os.path.join(XLA_DIR, "runner.py"), "--bundle", out, "--target",
                           "tpu-v5e", "--compile_threads", "2", "--json", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "runner: 4 workloads" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "note:" not in proc.stdout  # each was exported for the device it was compiled for
    result = json.loads(path.read_text())
    assert result["info"]["device"] == "TPU v5 lite" and not result["tensorflow_imported"]
    rows = {w["name"]: w for w in result["workloads"]}
    assert sorted(rows) == ["clf-16_f32_b2", "squad-16_f32_b2", "tiny_plm_f32_b2", "tiny_pmlm_f32_b2"]
    for name, row in rows.items():
        assert "error" not in row, (name, row["error"])
        est = row["estimate"]
        assert 0 < row["compiled_memory_gib"] * 2 ** 30 < 16e9, (name, row)
        assert est["xla_flops"] >= row["flops_per_step"], (name, est)
        assert est["loops"] == 0 and est["loop_ms"] == 0, (name, est)
        # the step counter and dropout seeds are int64: unpriced calls, taken out of the cost model's sum
        assert est["unpriced_calls"] > 0 and est["ms"] > 0 and 0 < est["mfu"] < 1, (name, est)
        assert est["cost_model_peak_flops"] == pytest.approx(197e12, rel=1e-3)
    table = tpu_target.table([result])
    assert table.count("| TPU v5e |") == 4 and "does not compile" not in table


def test_tpu_estimate_counts_every_iteration_of_a_loop():
    """XLA's TPU cost model prices a loop's body once, whatever its trip count; the estimate adds the other
    iterations from the compiler's cycle estimates of the body, at the chip's clock: a loop of 100 matmuls costs
    11x one of 10 beyond their first iteration."""
    if importlib.util.find_spec("libtpu") is None:
        skip_unless_ci("libtpu is not installed; it is in the 'test' extra (jax[tpu]): pip install -e '.[test]'")
    program = """if True:
        import json, sys
        import jax, jax.numpy as jnp
        from jax.sharding import SingleDeviceSharding
        import tpu_target
        spec = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16,
                                    sharding=SingleDeviceSharding(tpu_target.compile_only_device("tpu-v5e")))
        found = {}
        for trips in (10, 100):
            loop = jax.jit(lambda x: jax.lax.fori_loop(0, trips, lambda i, y: jnp.tanh(y @ x), x)).lower(spec)
            found[trips] = tpu_target.loop_seconds(loop.compile().as_text(), "tpu-v5e")
        print(json.dumps(found))
    """  # in a process of its own: libtpu stays out of the test process
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=XLA_DIR)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (s10, loops10), (s100, loops100) = json.loads(proc.stdout.splitlines()[-1]).values()
    assert [trip for trip, _ in loops10] == [10] and [trip for trip, _ in loops100] == [100]
    assert s10 > 0 and s100 == pytest.approx(s10 * 99 / 9, rel=1e-6)
    row = {"config": "base-512", "objective": "plm", "workload": "pretrain", "dtype": "mixed_bfloat16", "batch": 8,
           "seq_len": 512, "compiled_memory_gib": 5.6,
           "estimate": {"ms": 1153.3, "loop_ms": 972.9, "tokens_per_s": 3552, "mfu": 0.014}}
    table = tpu_target.table([{"info": {"compile_only_target": "tpu-v5e"}, "workloads": [row]}])
    assert "| 5.6 | yes | 1153.3 (972.9 of it in loops) | 3,552 | 1.4% |" in table  # the table says so


def test_tpu_cost_model_time_takes_out_the_unpriced_calls():
    """XLA's TPU cost model counts -1 s for each call that splits or joins an int64's halves or joins slices in
    place; the step's time is what remains (libtpu 0.0.42: a matmul beside n such calls gives its time minus n)."""
    def cost(seconds):  # what cost_analysis() gives for a compiled program
        return {"optimal_seconds": seconds, "flops": 1.0}

    calls = '%c.1 = s64[] custom-call(%a, %b), custom_call_target="X64Combine"\n' \
            '%c.2 = u32[] custom-call(%c.1), custom_call_target="X64SplitLow"\n' \
            '%c.3 = u32[] custom-call(%c.1), custom_call_target="X64SplitHigh"\n' \
            '%c.4 = f32[8,4] custom-call(%s.1, %s.2), custom_call_target="ConcatBitcast"\n' \
            '%c.5 = s32[4] custom-call(%i), custom_call_target="AssumeGatherIndicesInBound"\n'  # priced
    assert tpu_target.cost_model_seconds(cost(-3.99999), calls) == (pytest.approx(1e-5, rel=1e-3), 4)
    assert tpu_target.cost_model_seconds(cost(0.25), "") == (0.25, 0)
    with pytest.raises(RuntimeError, match="no time"):
        tpu_target.cost_model_seconds(cost(-4.5), calls)  # another unpriced kind: not a time to report


def test_tpu_table_says_which_steps_do_not_fit_the_chip():
    """A step too large for the chip's HBM is refused by the TPU compiler: its row says so, with the sizes, not
    "does not compile"; any other error is a step that does not compile."""
    row = {"config": "base-512", "objective": "plm", "workload": "pretrain", "dtype": "mixed_bfloat16", "batch": 32,
           "seq_len": 512}
    oom = ("JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
           "temporaries (16.37G) exceeds available HBM (15.75G).")
    rows = [dict(row, error=oom), dict(row, error="JaxRuntimeError: UNIMPLEMENTED: x")]
    table = tpu_target.table([{"info": {"compile_only_target": "tpu-v5e"}, "workloads": rows}])
    assert "| base-512 plm | mixed bf16 | 32 x 512 | TPU v5e | needs 16.37G, 15.75G available | **no** |" in table
    assert "| TPU v5e | does not compile: JaxRuntimeError: UNIMPLEMENTED: x |" in table


def test_profile_of_a_gpu_trace_counts_each_kernel_once(tmp_path):
    """A GPU's trace as CUPTI records it: kernels on a stream line, a cuBLAS kernel carrying its instruction in an
    ``hlo_op`` stat, a fusion's kernel named after the fusion; a line summing them again per op is not counted."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    import device_profile

    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/device:GPU:0")
    plane.stat_metadata[1].id, plane.stat_metadata[1].name = 1, "hlo_op"
    for i, name in {1: "loop_add_fusion_2", 2: "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 3: "add_fusion.2"}.items():
        plane.event_metadata[i].id, plane.event_metadata[i].name = i, name
    stream = plane.lines.add(id=1, name="Stream #7(Compute)", timestamp_ns=1000)
    for step in range(2):  # 3 us of fusion, 5 us of matmul per step
        stream.events.add(metadata_id=1, offset_ps=step * 10_000_000, duration_ps=3_000_000)
        gemm = stream.events.add(metadata_id=2, offset_ps=step * 10_000_000 + 4_000_000, duration_ps=5_000_000)
        gemm.stats.add(metadata_id=1).str_value = "custom-call.1"
    plane.lines.add(id=2, name="XLA Ops", timestamp_ns=1000).events.add(metadata_id=3, duration_ps=3_000_000)
    path = tmp_path / "gpu.xplane.pb"
    path.write_bytes(space.SerializeToString())
    summary = device_profile.summarize(str(path), 2, {"loop_add_fusion.2": "fusion:kLoop",
                                                       "custom-call.1": "custom-call:__cublas$lt$matmul"})
    assert summary["source"] == "device" and summary["events"] == 4
    assert summary["busy_ms_per_step"] == pytest.approx(0.008) and summary["span_ms_per_step"] == pytest.approx(0.0095)
    assert summary["by_kind_ms_per_step"] == pytest.approx({"custom-call:__cublas$lt$matmul": 0.005,
                                                            "fusion:kLoop": 0.003})
    assert [(t["op"], t["calls_per_step"]) for t in summary["top"]] == [("custom-call.1", 1), ("loop_add_fusion_2", 1)]


def test_instruction_kinds_read_fusions_library_calls_and_tuples():
    import device_profile

    hlo = """ENTRY %main (p: f32[4,8]) -> (f32[4,8], f32[4]) {
  %p = f32[4,8]{1,0} parameter(0)
  %fusion.3 = f32[4,8]{1,0} fusion(f32[4,8]{1,0} %p), kind=kLoop, calls=%fused_computation.3
  custom-call.1 = (bf16[4,8]{1,0}, s8[64]{0}) custom-call(%p, %p), custom_call_target="__cublas$lt$matmul"
  %multiply_reduce_fusion = (f32[4]{0}, f32[4]{0}) fusion(%p), kind=kInput, calls=%fused_computation.4
  ROOT %tuple = (f32[4,8]{1,0}, f32[4]{0}) tuple(%fusion.3, %get-tuple-element.1)
}"""
    assert device_profile.instruction_kinds(hlo) == {
        "p": "parameter", "fusion.3": "fusion:kLoop", "custom-call.1": "custom-call:__cublas$lt$matmul",
        "multiply_reduce_fusion": "fusion:kInput", "tuple": "tuple"}
    # A GPU trace names a fusion by its kernel (no '.' or '-'); a library's kernel by its own name.
    kind_of = device_profile.kind_lookup(device_profile.instruction_kinds(hlo))
    assert kind_of("fusion_3", "fusion_3") == "fusion:kLoop"
    assert kind_of("custom_call_1", "x") == "custom-call:__cublas$lt$matmul"
    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32", "sm90_xmma_gemm_bf16bf16_bf16f32") == "library matmul"
    assert kind_of("?", "void cutlass::Kernel") == "library matmul" and kind_of("?", "redzone") == "other"


def test_the_device_run_brings_back_at_most_eight_files(tmp_path, monkeypatch):
    """The device tool returns at most 8 files of <= 16 MiB from $OUT: collect.py packs a run (one HLO dump per
    workload, traces, logs, results) into six, in the run's order within the budget, and names what it left
    out."""
    import tarfile

    sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
    import collect

    work, out = tmp_path / "work", tmp_path / "out"
    (work / "hlo").mkdir(parents=True)
    for name in ("ours.json", "gpu_peer.json", "gpu_table.md", "ours.log", "peer.log", "nvidia-smi.txt",
                 "versions.txt", "gpu_peer.md"):
        (work / name).write_text(name)
    for i in range(30):  # written in the run's order: w29 first
        path = work / "hlo" / f"w{i:02d}.optimized.hlo.gz"
        path.write_bytes(b"h" * 1000)
        os.utime(path, (1e9 - i, 1e9 - i))
    for i in (3, 7):
        (work / "hlo" / f"w{i:02d}.xplane.pb.gz").write_bytes(b"t" * 1000)
    monkeypatch.setattr(collect, "TAR_BUDGET", 10_500)
    names = collect.collect(str(work), str(out))
    assert sorted(os.listdir(out)) == sorted(names) == ["gpu_peer.json", "gpu_table.md", "hlo.tar", "ours.json",
                                                       "run.log", "traces.tar"]
    assert (out / "ours.json").read_text() == "ours.json"
    with tarfile.open(out / "hlo.tar") as tar:
        assert tar.getnames() == [f"w{i:02d}.optimized.hlo.gz" for i in range(29, 19, -1)]
    with tarfile.open(out / "traces.tar") as tar:
        assert sorted(tar.getnames()) == ["w03.xplane.pb.gz", "w07.xplane.pb.gz"]
    log = (out / "run.log").read_text()
    assert "===== ours.log" in log and "===== nvidia-smi.txt" in log
    assert log.count("left out of hlo.tar") == 20 and "w19.optimized.hlo.gz (0.00 MiB) left out" in log


def test_runner_imports_no_tensorflow(exported):
    assert exported[1]["tensorflow_imported"] is False


def test_runner_refuses_a_missing_bundle_and_patterns_that_match_nothing(exported, tmp_path):
    """A typo in --workloads must not run nothing and report "all verified"; a wrong --bundle is one line."""
    bundle, _ = exported
    names = ["tiny_pmlm_f32_b2", "clf-16_f32_b2", "tiny_plm_f32_b2"]
    workloads = [{"name": n} for n in names]
    assert [w["name"] for w in runner.select(workloads, ["tiny_*", "*"], bundle)] == [names[0], names[2], names[1]]
    with pytest.raises(ValueError, match="tiny_pml_f32 match no workload"):
        runner.select(workloads, ["tiny_pml_f32", "clf-*"], bundle)
    for argv, why in ((["--bundle", str(tmp_path)], "no bundle there"),
                      (["--bundle", bundle, "--workloads", "tiny_mpnet_*"], "tiny_mpnet_\\* match no workload")):
        proc = subprocess.run([sys.executable, os.path.join(XLA_DIR, "runner.py"), *argv], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2 and re.search(why, proc.stderr.splitlines()[-1]), proc.stderr[-1000:]
        assert "Traceback" not in proc.stderr


def test_bundle_ships_no_weights(exported):
    """Initial weights are generated on the device from the manifest: the bundle holds batches, a few seeds and
    the module's large constants (once); the dropout counters TF folds into constants are iotas again."""
    import gzip

    from tensorflow.compiler.xla.service import hlo_pb2

    out, _ = exported
    manifest = bundle.read_manifest(out)
    for workload in manifest["workloads"]:
        kinds = [next(iter(p["init"])) for p in workload["params"] if p["role"] != "batch"]
        assert kinds.count("uniform") >= 5 and "stored" in kinds  # the embedding, kernels ...; the dropout seeds
        assert "file" in kinds  # the position encodings
        with gzip.open(os.path.join(out, workload["hlo"])) as f:
            module = hlo_pb2.HloModuleProto.FromString(f.read())
        opcodes = [i.opcode for c in module.computations for i in c.instructions]
        assert "iota" in opcodes
        assert all(p["init"].get("stored") is None or np.prod(p["shape"]) <= 16 for p in workload["params"]
                   if p["role"] != "batch")


def test_generated_weights_are_the_same_everywhere():
    """The generator is integer hashing and IEEE float64 arithmetic: these exact values on every platform (the
    exporter's TF reference and the runner on the device start from them)."""
    values = bundle.generate({"uniform": [0.0, 0.02]}, seed=7, index=3, shape=(2, 3), dtype="float32")
    assert values.dtype == np.float32 and values.shape == (2, 3)
    assert values.view(np.uint32).tolist() == GOLDEN
    again = bundle.generate({"uniform": [0.0, 0.02]}, seed=7, index=3, shape=(2, 3), dtype="float32")
    assert np.array_equal(values, again)
    big = bundle.generate({"uniform": [0.5, 2.0]}, seed=1, index=0, shape=(100_000,), dtype="float64")
    assert abs(big.mean() - 0.5) < 0.02 and abs(big.std() - 2.0) < 0.02
    assert bundle.generate({"const": 1.0}, 0, 0, (3,), "bfloat16").dtype.name == "bfloat16"


GOLDEN = [[1000781391, 1005265484, 3165917004], [1012706866, 1024253633, 3139710326]]


def test_masks_travel_as_bits():
    store = {}
    mask = (np.random.default_rng(0).random((4, 32, 32)) < 0.3).astype(np.uint8)
    bundle.pack("m", mask, store)
    assert "m.bits" in store and store["m.bits"].nbytes == mask.size // 8
    assert np.array_equal(bundle.unpack(store, "m"), mask)


def test_compare_flags_a_step_out_of_tolerance():
    ref = [{"loss": 6.9, "grad_norm": 1.7, "update_norm": 0.03, "weights": 17.0}]
    near = [{"loss": 6.9 * (1 + 5e-5), "grad_norm": 1.7, "update_norm": 0.03, "weights": 17.1}]
    far = [{"loss": 6.9 * (1 + 5e-4), "grad_norm": 1.7, "update_norm": 0.03, "weights": 17.0}]
    assert runner.compare(near, ref, "float32")["ok"]
    assert not runner.compare(far, ref, "float32")["ok"]
    assert runner.compare(far, ref, "mixed_bfloat16")["ok"]  # within one bfloat16 rounding step


@pytest.mark.parametrize("seq_len", [16, 32, 512])
def test_squad_batches_fit_any_sequence_length(seq_len):
    """The SQuAD step's batches (P <sep> Q <sep> <cls>, right-padded) for short configs too: the answer in the
    paragraph or at CLS, every row within the sequence, CLS the last real token."""
    import export

    cfg = dataclasses.replace(export.TINY, seq_len=seq_len, batch=8)
    (batch,) = export.finetune_batches(cfg, "squad", 1)
    ids, mask, p_mask = (batch[k].numpy() for k in ("input_ids", "padding_mask", "p_mask"))
    assert ids.shape == (8, seq_len)
    for row in range(8):
        cls = int(batch["cls_index"][row])
        assert cls == int(mask[row].sum()) - 1 and p_mask[row, cls] == 0.0
        start, end = int(batch["start_positions"][row]), int(batch["end_positions"][row])
        if batch["is_impossible"][row]:
            assert start == end == cls
        else:
            assert start <= end and p_mask[row, start] == p_mask[row, end] == 0.0


# Shapes checked end to end (export with TF's reference, then the runner on jax 0.10.2 and 0.11.2, every
# objective, both precisions, clf, squad and the forward): the exporter takes them as they are.
UNUSUAL_SHAPES = ["n_head=3,d_head=20", "d_model=72,n_head=4,d_head=18,d_inner=100", "n_layer=1,mem_len=0",
                  "reuse_len=32,num_predict=31", "seq_len=40,reuse_len=12,num_predict=7,mem_len=24",
                  "seq_len=72,reuse_len=24,mem_len=40,num_predict=11,batch=1,n_token=777",
                  "seq_len=33,reuse_len=16,num_predict=9,n_token=50,batch=3,d_inner=200",
                  "seq_len=130,reuse_len=50,mem_len=70,num_predict=19,d_model=128,n_head=2,d_head=64,n_layer=1",
                  "mem_len=48,reuse_len=8,n_head=1,d_head=64,batch=1", "seq_len=6,reuse_len=3,mem_len=3,num_predict=1",
                  "d_model=50,n_head=5,d_head=10,d_inner=75,n_token=32000,seq_len=17,reuse_len=5,mem_len=9,"
                  "num_predict=17"]


@pytest.mark.parametrize("overrides", UNUSUAL_SHAPES)
def test_exporter_takes_unusual_shapes(overrides):
    import export

    cfg = export.config_named("tiny", overrides)
    assert export.config_errors(cfg, ["plm", "pmlm", "mpnet"], ["float32", "mixed_bfloat16"], ["clf", "squad"],
                                True) == []
    # The forward reads token ids and segments only: num_predict does not concern it.
    assert export.config_errors(dataclasses.replace(cfg, num_predict=cfg.seq_len + 1), infer=True) == []


@pytest.mark.parametrize("overrides, objectives, finetune, why", [
    ("clamp_len=5", [], [], "--set clamp_len: not a BenchConfig field"),
    ("n_layer", [], [], "--set n_layer: expected field=value"),
    ("n_head=three", [], [], "--set n_head=three: n_head is an integer"),
    ("d_model=63,n_head=7,d_head=9", ["plm"], [], "d_model must be even"),
    ("dropout=1.0", ["plm"], [], "dropout must be in [0, 1)"),
    ("batch=0", ["plm"], [], "batch=0 must be positive"),
    ("name=../x", ["plm"], [], "name='../x' must be letters, digits"),
    ("n_token=8", ["pmlm"], [], "n_token=8 must be >= 10"),
    ("n_token=5", ["plm"], [], "n_token=5 must be >= 6"),
    ("num_predict=33", ["plm"], [], "num_predict=33 must be in [1, seq_len=32] for plm"),
    ("num_predict=0", ["plm"], [], "num_predict=0 must be in [1, seq_len=32] for plm"),
    ("num_predict=40", ["pmlm"], [], "num_predict=40 must be <= seq_len=32 for pmlm"),
    ("reuse_len=40", ["plm"], [], "reuse_len=40 must be <= seq_len=32"),
    ("seq_len=5,reuse_len=2,mem_len=2,num_predict=2", ["plm", "pmlm"], [], "seq_len=5 is too short for pmlm"),
    ("seq_len=4,num_predict=2", [], ["squad"], "seq_len=4 must be >= 5 for squad"),
    ("", ["xlm"], [], "--objectives xlm: not an objective"),
    ("", ["plm"], ["ner"], "--finetune ner: not a fine-tuning step"),
    ("", ["plm:fp32"], [], "--dtypes fp32: not a Keras precision policy"),
])
def test_exporter_refuses_what_it_cannot_build_naming_the_field(overrides, objectives, finetune, why):
    """Refused before anything is traced, in one message naming the field: not a numpy or TensorFlow traceback
    from inside a builder, nor a step other than the one asked for."""
    import export

    dtypes = [o.partition(":")[2] or "float32" for o in objectives[:1]]  # "plm:fp32": plm in fp32
    objectives = [o.partition(":")[0] for o in objectives]
    try:
        errors = export.config_errors(export.config_named("tiny", overrides), objectives, dtypes, finetune)
    except export.ConfigError as e:
        errors = [str(e)]
    assert any(why in e for e in errors), errors


def test_exporter_cli_refuses_in_one_line(tmp_path):
    out = tmp_path / "bundle"
    proc = subprocess.run([sys.executable, os.path.join(XLA_DIR, "export.py"), "--out", str(out), "--config", "tiny",
                           "--set", "clamp_len=5"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "Traceback" not in proc.stderr
    assert "--set clamp_len: not a BenchConfig field" in proc.stderr and not out.exists()


def test_merge_into_a_new_directory(tmp_path):
    """``--merge`` gathers exports made side by side: into a directory that does not exist yet too."""
    import export

    src = tmp_path / "one"
    src.mkdir()
    bundle.write_manifest(str(src), {"format": bundle.FORMAT, "workloads": [{"name": "w"}]})
    (src / "w.hlo.pb.gz").write_bytes(b"module")
    export.merge(str(tmp_path / "all"), str(src))
    assert [w["name"] for w in bundle.read_manifest(str(tmp_path / "all"))["workloads"]] == ["w"]
    assert (tmp_path / "all" / "w.hlo.pb.gz").read_bytes() == b"module"


def test_a_bundle_holds_the_steps_of_one_tree(exported, tmp_path, monkeypatch):
    """A bundle records the digest of the sources its steps were built from; the runner's results and the GPU
    table name them, and workloads from other sources are refused (an export resumed after a change to the model
    would otherwise mix two trees' steps in one table), before anything is built."""
    import export
    import gpu_report

    out, result = exported
    source = bundle.read_manifest(out)["source"]
    assert source["digest"] == export.source_stamp()["digest"] and result["source"] == source
    assert source["digest"][:12] in gpu_report.tables(result, {})[0]

    stale = tmp_path / "stale"
    stale.mkdir()
    manifest = bundle.read_manifest(out)
    manifest["source"] = dict(source, digest="0" * 64, commit="0123456789ab")
    bundle.write_manifest(str(stale), manifest)
    proc = subprocess.run([sys.executable, os.path.join(XLA_DIR, "export.py"), "--out", str(stale), "--config",
                           "tiny", "--objectives", "mpnet"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "were exported from 0123456789ab" in proc.stderr and "--drop '*'" in proc.stderr
    assert sorted(os.listdir(stale)) == ["manifest.json"]
    current = tmp_path / "current"
    current.mkdir()
    bundle.write_manifest(str(current), {"format": bundle.FORMAT, "source": source, "workloads": [{"name": "w"}]})
    with pytest.raises(export.ConfigError, match="exported from .*, this tree is 0123456789ab"):
        export.merge(str(current), str(stale))
    assert sorted(os.listdir(current)) == ["manifest.json"]
    export.drop(str(stale), ["*"])
    assert "source" not in bundle.read_manifest(str(stale))  # emptied, it takes the next export's sources

    # A device run's tables go into the README only beside the code they measured.
    written = []
    monkeypatch.setattr(gpu_report, "update_docs", lambda *args: written.append(args))
    for run_source, extra, ok in ((source, [], True), (manifest["source"], [], False),
                                  (manifest["source"], ["--other_sources"], True)):
        ours = tmp_path / "ours.json"
        ours.write_text(json.dumps(dict(result, source=run_source)))
        if ok:
            gpu_report.main(["--ours", str(ours), "--update", *extra])
        else:
            with pytest.raises(SystemExit, match="refused: .* measured the steps of 0123456789ab"):
                gpu_report.main(["--ours", str(ours), "--update", *extra])
    assert len(written) == 2


def test_flops_count_the_heads_width():
    """n_head x d_head need not be d_model (3 heads of 20 in a 64-wide model): the attention's projections and
    products are that wide, the feed-forward and the LM head are not. MFU divides by these FLOPs."""
    import export
    from xlnet_tf.flops import forward_flops_per_sequence as forward

    shape = (1, 64, 128, 32, 0, 0, 0)  # one layer, d_model 64, d_inner 128, 32 tokens, no query stream, no head
    assert forward(*shape) == forward(*shape, d_attn=64)  # the released models' shape: as before
    ffn = 4 * 32 * 64 * 128
    assert forward(*shape, d_attn=60) - ffn == pytest.approx((forward(*shape) - ffn) * 60 / 64)
    narrow = dataclasses.replace(export.TINY, n_head=3, d_head=20)
    assert narrow.train_flops_per_step() < export.TINY.train_flops_per_step()
