"""Compiling the exported steps for an NVIDIA GPU on a machine that has none (XLA's deviceless compile).

The GPU machines come rarely and for minutes; whether a step compiles there, what device memory it needs and how
XLA fuses it for the GPU need no GPU: jax's CUDA plugin compiles for a described device (a compile-only "topology")
when no device is present, with the same passes and fusion decisions as on the device, only without autotuning
(GEMM tiles are XLA's defaults, not the fastest measured). ``runner.py --target h200`` uses it; ``roofline.py``
estimates from the optimised module where the step's time would go.

Needs jax with its CUDA plugin (no GPU, no driver), e.g. in a Python 3.12 virtual environment (4.4 GB):
``python3.12 -m venv /tmp/vgpu && /tmp/vgpu/bin/pip install 'jax[cuda13]==0.11.2'`` (the GPU machines' version).
"""

from __future__ import annotations

import functools
import os

# The devices the lent machines have. Hardware facts (NVIDIA's specifications: SXM parts), as XLA's own target
# descriptions give them; the dense matmul peaks, the bandwidth and the warp instructions issued per second (four
# schedulers per SM, one each per clock) are what ``roofline.py`` divides by.
_ISSUE = 132 * 4 * 1.98e9
TARGETS = {
    "h100": {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 84942979072, "bandwidth": 3.35e12,
             "peaks": {"bf16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}, "issue_rate": _ISSUE},
    "h200": {"name": "NVIDIA H200 141GB HBM3e", "memory_bytes": 151397597184, "bandwidth": 4.8e12,
             "peaks": {"bf16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}, "issue_rate": _ISSUE},
}
# Both are Hopper (compute capability 9.0): 132 SMs at 1.98 GHz, 50 MiB of L2.
_HOPPER = """gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {bandwidth:.0f}
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: {memory_bytes}
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 10 }}
runtime_version {{ major: 13 minor: 0 }}
device_description_str: "{name}"
"""


# Names some software gives the parts besides their full ones (jax's device_kind for an H200).
_ALIASES = {"NVIDIA H200": "h200"}


def target_of(device_kind: str):
    """The key of TARGETS for a device's name as jax or torch gives it (an H100 SXM or an H200), else None (another
    part, e.g. an H100 PCIe: 2 TB/s, whose figures TARGETS does not hold)."""
    kind = device_kind.strip()
    return _ALIASES.get(kind) or next((key for key, t in TARGETS.items() if t["name"] == kind), None)


def target_config(target: str) -> str:
    """XLA's ``GpuTargetConfigProto`` (text) describing ``target`` (a key of TARGETS)."""
    if target not in TARGETS:
        raise ValueError(f"--target {target}: not a known GPU ({', '.join(TARGETS)})")
    return _HOPPER.format(**TARGETS[target])


@functools.cache
def compile_only_device(target: str):
    """A jax device of ``target`` that compiles but cannot run (its client is jaxlib's compile-only client); one
    per target and process (the runner's early check and its compiles share it)."""
    # No device to find: the plugin's version check asks the driver (CUPTI), which is absent here.
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    from jax.experimental import topologies
    try:
        topology = topologies.get_topology_desc(platform="cuda", target_config=target_config(target),
                                                topology="1x1x1")
    except NotImplementedError as e:
        raise RuntimeError("compiling for a GPU without one needs jax's CUDA plugin (pip install "
                           f"'jax[cuda13]'; no GPU or driver needed): {e}") from e
    return topology.devices[0]
