"""An HF directory's weight files as ``{name: numpy array}``, with no torch and no code run: ``model.safetensors``
(and its shards) by its header and raw bytes, ``pytorch_model.bin`` (torch.save's zip and legacy formats, and
shards) through a restricted unpickler that accepts only what a weights file holds. Every file is untrusted: a
shard index naming a path outside the directory, a pickle asking for any other class, a storage larger than its
file are refused, naming the file."""

from __future__ import annotations

import io
import json
import pickle
import re
import zipfile
from typing import Optional

import numpy as np

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError


def read_json(path: str) -> dict:
    """An HF JSON file (config.json, an index): a JSON object, finite numbers only."""
    return io_utils.read_mapping(path, "json", missing=None, expected="a JSON object", finite=True)


def read_weights(folder: str) -> dict:
    """{name: float array} of an HF directory's weights, the ``transformer.`` prefix of a head model's backbone
    removed. ``model.safetensors`` (or its shards) is read with safetensors' NumPy API; ``pytorch_model.bin`` (or
    its shards: ``pytorch_model.bin.index.json``; torch.save's formats) with the restricted unpickler, no torch and
    no code execution. A shard the index names must be a file of ``folder``."""
    names = ["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"]
    found = next((n for n in names if io_utils.exists(io_utils.join(folder, n))), None)
    if found is None:
        raise InputError(f"{folder}: no weights ({', '.join(names)}); TensorFlow (tf_model.h5) and Flax weights "
                         "are not read")
    path = io_utils.join(folder, found)
    read = _read_torch if found.startswith("pytorch_model") else _read_safetensors
    if found.endswith(".json"):
        weights = {}
        for shard in _shards(path):
            weights.update(read(io_utils.join(folder, shard)))
    else:
        weights = read(path)
    prefixed = any(n.startswith("transformer.") for n in weights)
    return {(n[len("transformer."):] if prefixed and n.startswith("transformer.") else n): v
            for n, v in weights.items()}


def _shards(index_path: str) -> list:
    """The shard files a ``*.index.json`` names: plain file names next to it (an index is as untrusted as the
    weights: ``../`` or an absolute path would read a file outside the model's directory)."""
    weight_map = read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputError(f"{index_path}: no weight_map (an object of weight name -> shard file)")
    shards = sorted(set(weight_map.values()), key=str)
    for shard in shards:
        if not isinstance(shard, str) or not re.fullmatch(r"[\w.-]+", shard) or shard in (".", ".."):
            raise InputError(f"{index_path}: shard {shard!r} is not a file name in this directory (refused)")
    return shards


def _read_safetensors(path: str) -> dict:
    try:
        from safetensors.numpy import load
    except ImportError:
        raise InputError(f"{path}: reading safetensors needs the safetensors package (pip install "
                         "'xlnet_tf[hf]')") from None
    data = io_utils.read_bytes(path)
    try:
        if _safetensors_dtypes(data) & {"BF16", "F8_E4M3", "F8_E5M2"}:
            return _read_safetensors_raw(data, path)
        return {name: np.asarray(value, np.float32) for name, value in load(data).items()}
    except Exception as error:  # noqa: BLE001 - safetensors raises its own SafetensorError for corrupt files
        if isinstance(error, InputError):
            raise
        raise InputError(f"{path}: unreadable safetensors file ({error})") from None


def _safetensors_dtypes(data: bytes) -> set:
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


# The float dtypes of a safetensors file NumPy reads as they are (bfloat16, which it has not, is widened by hand).
_SAFETENSORS_FLOATS = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}


def _read_safetensors_raw(data: bytes, path: str) -> dict:
    """A file with bfloat16 weights (safetensors' NumPy API refuses them), any other float weights beside them
    (transformers writes and reads such files): the header's offsets, each weight decoded by its dtype, as float32."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[8 + size + start:8 + size + end]
        if info["dtype"] == "BF16":
            values = _bfloat16(np.frombuffer(raw, "<u2"))
        elif info["dtype"] in _SAFETENSORS_FLOATS:
            values = np.frombuffer(raw, _SAFETENSORS_FLOATS[info["dtype"]]).astype(np.float32)
        else:
            raise InputError(f"{path}: weight {name} has dtype {info['dtype']}; the float dtypes read are BF16, "
                             f"{', '.join(_SAFETENSORS_FLOATS)}")
        out[name] = values.reshape(info["shape"])
    return out


def _bfloat16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


_TORCH_DTYPES = {"FloatStorage": "<f4", "HalfStorage": "<f2", "DoubleStorage": "<f8", "BFloat16Storage": "bf16",
                 "LongStorage": "<i8", "IntStorage": "<i4"}
# torch.save's legacy (pre-1.6) format starts with this pickled number.
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
# A zip member may inflate to this many times its stored size (torch stores its members uncompressed; weights
# deflate by far less): more is a decompression bomb, refused before it is read.
_MAX_INFLATION = 8


class _Storage:
    """A storage named in the pickle; its bytes come from the zip archive or, in the legacy format, after it."""

    def __init__(self, dtype: str):
        self.dtype, self.array = dtype, None

    def fill(self, raw: bytes) -> None:
        if self.dtype not in _TORCH_DTYPES.values():
            raise pickle.UnpicklingError(f"storage of dtype {self.dtype!r} is not read")
        if len(raw) % self.itemsize:
            raise pickle.UnpicklingError(f"storage of {len(raw)} bytes is not a whole number of {self.dtype} items")
        self.array = _bfloat16(np.frombuffer(raw, "<u2")) if self.dtype == "bf16" else np.frombuffer(raw, self.dtype)

    @property
    def itemsize(self) -> int:
        return 2 if self.dtype == "bf16" else np.dtype(self.dtype).itemsize


def _ints(values, what: str) -> tuple:
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    if not all(type(v) is int and v >= 0 for v in values):  # noqa: E721 - bool and int subclasses refused too
        raise pickle.UnpicklingError(f"tensor {what} {values!r} is not non-negative integers")
    return values


class _Tensor:
    """A tensor of the pickle: a view (offset, size, stride) into a storage, made an array once that is read. The
    view is checked against the storage first (a hostile view would read memory outside it)."""

    def __init__(self, storage, offset, size, stride, *_):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def array(self) -> np.ndarray:
        if not isinstance(self.storage, _Storage) or self.storage.array is None:
            raise pickle.UnpicklingError("a tensor's storage is missing from the file")
        (offset,), size, stride = _ints(self.offset, "offset"), _ints(self.size, "size"), _ints(self.stride, "stride")
        if len(size) != len(stride):
            raise pickle.UnpicklingError(f"tensor size {size} and stride {stride} differ in rank")
        data = self.storage.array
        if 0 in size:
            return np.zeros(size, np.float32)
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= data.size:
            raise pickle.UnpicklingError(f"a tensor of size {size} at offset {offset} reads past its storage of "
                                         f"{data.size} items")
        item = data.itemsize
        return np.lib.stride_tricks.as_strided(data[offset:], shape=size,
                                               strides=tuple(s * item for s in stride)).astype(np.float32)


class _TorchUnpickler(pickle.Unpickler):
    """The one unpickler of the project: every pickle it reads (torch.save's state dict and, in the legacy
    format, the header pickles around it) is rebuilt into NumPy, and only what a weights file holds is accepted:
    tensors, their storages, ordered dicts and plain data (numbers, strings, lists, dicts). Any other global is
    refused, so loading a checkpoint never runs its code. ``storages``: {key: _Storage}."""

    def __init__(self, file, storages: Optional[dict] = None):
        super().__init__(file)
        self.storages = {} if storages is None else storages

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            import collections
            return collections.OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _Tensor
        if module == "torch" and name in _TORCH_DTYPES:
            return name
        raise pickle.UnpicklingError(f"global {module}.{name} is not a tensor (refused)")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage" and pid[1] in _TORCH_DTYPES
                and isinstance(pid[2], (str, int))):
            raise pickle.UnpicklingError(f"storage {str(pid)[:80]} is not read")
        return self.storages.setdefault(str(pid[2]), _Storage(_TORCH_DTYPES[pid[1]]))


def _unpickle(stream, storages: Optional[dict] = None):
    """One pickle of ``stream`` through ``_TorchUnpickler`` (the only way this project reads a pickle)."""
    return _TorchUnpickler(stream, storages).load()


def _read_torch(path: str) -> dict:
    """A ``torch.save`` state dict (the zip format of PyTorch >= 1.6, or the legacy one) as {name: float32}."""
    data = io_utils.read_bytes(path)
    try:
        storages = {}
        if zipfile.is_zipfile(io.BytesIO(data)):
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                members = {info.filename: info for info in archive.infolist()}
                inflated = sum(info.file_size for info in members.values())
                if inflated > _MAX_INFLATION * len(data) + (1 << 20):
                    raise pickle.UnpicklingError(f"its members inflate to {inflated} bytes from {len(data)} (a "
                                                 "decompression bomb?)")
                pickles = [n for n in members if n.endswith("/data.pkl")]
                if not pickles:
                    raise pickle.UnpicklingError("no data.pkl in the archive")
                prefix = pickles[0][: -len("/data.pkl")]
                state = _unpickle(io.BytesIO(archive.read(pickles[0])), storages)
                for key, storage in storages.items():
                    storage.fill(archive.read(f"{prefix}/data/{key}"))
        else:
            stream = io.BytesIO(data)
            if _unpickle(stream) != _LEGACY_MAGIC:
                raise pickle.UnpicklingError("not a torch.save file")
            _unpickle(stream), _unpickle(stream)  # protocol version, system info
            state = _unpickle(stream, storages)
            keys = _unpickle(stream)  # then each storage: int64 element count, the elements
            if not isinstance(keys, list):
                raise pickle.UnpicklingError("no list of storages after the state dict")
            for key in keys:
                storage = storages[str(key)]
                count = int.from_bytes(stream.read(8), "little")
                raw = stream.read(count * storage.itemsize)
                if len(raw) != count * storage.itemsize:
                    raise pickle.UnpicklingError(f"storage {key} is cut short")
                storage.fill(raw)
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"holds a {type(state).__name__}, not a state dict of tensors")
        bad = [str(name) for name, value in state.items() if not isinstance(value, _Tensor)]
        if bad:
            raise pickle.UnpicklingError(f"entry {bad[0]!r} is not a tensor")
        return {name: value.array() for name, value in state.items()}
    except (pickle.UnpicklingError, KeyError, ValueError, EOFError, TypeError, AttributeError, IndexError,
            OverflowError, MemoryError, RecursionError, zipfile.BadZipFile) as error:
        raise InputError(f"{path}: unreadable PyTorch checkpoint ({error})") from None
