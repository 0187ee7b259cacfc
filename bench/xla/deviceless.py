"""Compiling for a device that is not there: a GPU (``gpu_target``) or a TPU (``tpu_target``) described to jax's
compile-only clients, which compile a module as the device's own compiler does and run nothing (``runner.py
--target``)."""

from __future__ import annotations

import re

import gpu_target
import tpu_target

TARGETS = sorted(gpu_target.TARGETS) + sorted(tpu_target.TARGETS)


def device(target: str):
    """The compile-only jax device for ``target`` (a key of TARGETS); RuntimeError naming what to install when
    jax lacks the plugin that compiles for it."""
    return (tpu_target if tpu_target.is_tpu(target) else gpu_target).compile_only_device(target)


def platform(target: str) -> str:
    return "tpu" if tpu_target.is_tpu(target) else "cuda"


_COPY = re.compile(r"^\s*(%[\w#.]+) = mhlo\.copy (%[\w#.]+) : .*\n", re.M)


def without_copies(mlir_text: str) -> str:
    """The module with its ``mhlo.copy`` ops removed (their results renamed to their operands).

    TensorFlow's bridge returns each updated variable through a copy; the MLIR a compile-only client takes is
    legalised to StableHLO first, which has no copy op (the text path of a device client converts it to HLO
    directly and keeps them). A copy is the identity, and XLA adds the copies the outputs' buffers need itself.
    """
    renamed = {m.group(1): m.group(2) for m in _COPY.finditer(mlir_text)}
    if not renamed:
        return mlir_text
    text = _COPY.sub("", mlir_text)
    return re.sub(r"%[\w#.]+\b", lambda m: renamed.get(m.group(0), m.group(0)), text)


def compile_for(device, xla_client, mlir_text: str):
    """Compiles MLIR text for the compile-only ``device``: an executable with ``hlo_modules()`` and
    ``get_compiled_memory_stats()`` that cannot run."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():  # the compile-only client takes a parsed module, not text
        module = ir.Module.parse(without_copies(mlir_text))
        return device.client.compile(module, executable_devices=xla_client.DeviceList((device,)),
                                     compile_options=xla_client.CompileOptions())
