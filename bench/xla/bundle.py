"""The bundle format shared by the exporter (``export.py``, TensorFlow) and the runner (``runner.py``, jax): numpy
only, so that both sides import the very same code (Python 3.11 here, 3.12 on the GPU machines).

A bundle is a directory: ``manifest.json`` (every workload: its parameters in the HLO module's order, how each
is made, which outputs carry into the next step, the model FLOPs, TF's reference results), and per workload
``<name>.hlo.pb.gz`` (the step as TensorFlow's XLA bridge hands it to XLA: a serialized ``HloModuleProto``) and
``<name>.npz`` (the input batches and the few state values that are not generated).

Initial weights are not shipped (base-512's would not fit in the 64 MiB a GPU call takes): each floating-point
variable is recorded as a constant (LayerNorm scales, biases, optimizer moments) or as ``uniform(mean, std)`` with
the mean and standard deviation of TF's own initial value, and both sides generate it with ``generate``: integer
hashing of (seed, parameter index, element index) and IEEE float64 arithmetic, bit-identical on every platform
and numpy version. TF's reference results are computed from those very values.
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np

FORMAT = 1
MASK64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform01(seed: int, index: int, size: int) -> np.ndarray:
    """``size`` float64 values in [0, 1), each an exact multiple of 2^-53, from (seed, index)."""
    key = ((seed * 0x9E3779B97F4A7C15) ^ (index * 0xD1B54A32D192ED03) ^ 0x632BE59BD9B4E019) & MASK64
    with np.errstate(over="ignore"):
        x = np.arange(size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(key)
        bits = _mix(_mix(x))
    return (bits >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)


def np_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def generate(init: dict, seed: int, index: int, shape, dtype: str, stored=None) -> np.ndarray:
    """The initial value of parameter ``index``: ``init`` is {"const": c}, {"uniform": [mean, std]} (uniform on
    mean +- std * sqrt(3), whose standard deviation is std), {"stored": key} (``stored[key]``) or {"file": name}
    (a bundle file's "value", loaded into ``stored[name]``)."""
    shape, dt = tuple(shape), np_dtype(dtype)
    if "file" in init:  # a large constant of the module, stored once per bundle (read by initial_state)
        return unpack(stored[init["file"]], "value")
    if "stored" in init:
        return unpack(stored, init["stored"])
    if "const" in init:
        return np.full(shape, init["const"], dtype=dt)
    mean, std = init["uniform"]
    u = uniform01(seed, index, int(np.prod(shape, dtype=np.int64)))
    values = mean + (std * 3.0 ** 0.5) * (2.0 * u - 1.0)
    return values.reshape(shape).astype(dt)


def pack(name: str, array: np.ndarray, out: dict) -> None:
    """Stores ``array`` in ``out`` (an npz dict) under ``name``: 0/1 arrays (masks) as bits, bfloat16 as uint16."""
    array = np.asarray(array)
    dtype = "bfloat16" if array.dtype.name == "bfloat16" else array.dtype.name
    out[name + ".meta"] = np.array(json.dumps({"dtype": dtype, "shape": list(array.shape)}))
    if array.size and dtype != "bool" and np.all((array == 0) | (array == 1)) and array.size >= 64:
        out[name + ".bits"] = np.packbits(np.asarray(array != 0).reshape(-1))
    elif dtype == "bfloat16":
        out[name + ".u16"] = array.view(np.uint16)
    else:
        out[name] = array


def unpack(data, name: str) -> np.ndarray:
    meta = json.loads(str(data[name + ".meta"]))
    dt, shape = np_dtype(meta["dtype"]), tuple(meta["shape"])
    if name + ".bits" in data:
        n = int(np.prod(shape, dtype=np.int64))
        return np.unpackbits(data[name + ".bits"])[:n].astype(dt).reshape(shape)
    if name + ".u16" in data:
        return np.asarray(data[name + ".u16"]).view(dt).reshape(shape)
    return np.asarray(data[name]).astype(dt).reshape(shape)


def read_manifest(bundle: str) -> dict:
    with open(os.path.join(bundle, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{bundle}: bundle format {manifest.get('format')}, this runner reads {FORMAT}")
    return manifest


def write_manifest(bundle: str, manifest: dict) -> None:
    path = os.path.join(bundle, "manifest.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    os.replace(path + ".tmp", path)


def read_hlo(bundle: str, workload: dict) -> bytes:
    with gzip.open(os.path.join(bundle, workload["hlo"]), "rb") as f:
        return f.read()


def initial_state(bundle: str, workload: dict) -> tuple[list, list]:
    """``(values, batches)``: the initial value of every non-batch parameter (None for batch parameters) and the
    workload's input batches ({key: array}), as numpy arrays."""
    with np.load(os.path.join(bundle, workload["npz"])) as data:
        data = dict(data)
    if workload.get("batches"):
        with np.load(os.path.join(bundle, workload["batches"])) as shared:
            data.update(shared)
    for p in workload["params"]:
        if "file" in p.get("init", {}) and p["init"]["file"] not in data:
            with np.load(os.path.join(bundle, p["init"]["file"])) as shared:
                data[p["init"]["file"]] = dict(shared)
    values = []
    for i, p in enumerate(workload["params"]):
        if p["role"] == "batch":
            values.append(None)
        else:
            values.append(generate(p["init"], workload["seed"], i, p["shape"], p["dtype"], data))
    keys = sorted({p["key"] for p in workload["params"] if p["role"] == "batch"})
    batches = [{k: unpack(data, f"batch{b}/{k}") for k in keys} for b in range(workload["n_batches"])]
    return values, batches


def state_norms(values: list, workload: dict, initial: list | None = None) -> dict:
    """L2 norms (float64) of the float state parameters by group ("weights": the model's variables, "optimizer":
    the optimizer's) and, given the ``initial`` values, ``update_norm``: the norm of the weights' change since
    then (what the optimizer did; the weights' own norm hides it), as the reference records them after a step."""
    sums = {}
    for i, (value, p) in enumerate(zip(values, workload["params"])):
        group = p.get("group")
        if group in ("weights", "optimizer") and p["dtype"] in ("float32", "bfloat16", "float16", "float64"):
            v = np.asarray(value, np.float64).reshape(-1)
            sums[group] = sums.get(group, 0.0) + float(np.dot(v, v))
            if group == "weights" and initial is not None:
                d = v - np.asarray(initial[i], np.float64).reshape(-1)
                sums["update_norm"] = sums.get("update_norm", 0.0) + float(np.dot(d, d))
    return {k: v ** 0.5 for k, v in sums.items()}
