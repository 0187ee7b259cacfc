"""Files from strangers (issue 36): a PyTorch checkpoint is a pickle, and a pickle can run code when it is read.

Every pickle this project reads goes through ``hf.weight_files._TorchUnpickler``, which accepts only what a
weights file holds. Each format path gets a malicious file here (the legacy format's header and body pickles, the
zip format's data.pkl, a shard named by ``pytorch_model.bin.index.json``), with a marker file that the payload
would create; and hostile but code-free files (a tensor view past its storage, a shard outside the directory, a
decompression bomb) end in one error naming the file. The files are built by hand: no torch, no TensorFlow, fast.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest

from xlnet_tf import hf
from xlnet_tf.hf import weight_files
from xlnet_tf.errors import InputError


class _Payload:
    """Unpickling this runs ``touch <marker>`` (pickle stores ``posix.system`` and its argument)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _evil(marker) -> bytes:
    return pickle.dumps(_Payload(marker), protocol=2)


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)


def _ordered_dict() -> bytes:
    return b"ccollections\nOrderedDict\n)R"


def _state_pickle(tensors: dict) -> bytes:
    """torch.save's state-dict pickle (protocol 2), written opcode by opcode: ``{name: (storage key, offset, size,
    stride)}``, float32 storages."""
    out = b"\x80\x02" + _ordered_dict() + b"("
    for name, (key, offset, size, stride) in tensors.items():
        pid = b"(" + _text("storage") + b"ctorch\nFloatStorage\n" + _text(key) + _text("cpu") + _int(4) + b"tQ"
        shape = b"(" + b"".join(_int(n) for n in size) + b"t"
        strides = b"(" + b"".join(_int(n) for n in stride) + b"t"
        out += _text(name) + b"ctorch._utils\n_rebuild_tensor_v2\n(" + pid + _int(offset) + shape + strides
        out += b"\x89" + _ordered_dict() + b"tR"
    return out + b"u."


STORAGE = np.arange(4, dtype="<f4")  # storage "0": a 2x2 tensor
GOOD = {"w": ("0", 0, (2, 2), (2, 1))}


def _legacy(state: bytes = None, header: tuple = None, keys: bytes = None) -> bytes:
    header = header or tuple(pickle.dumps(v, 2) for v in (weight_files._LEGACY_MAGIC, 1001, {"little_endian": True}))
    body = state if state is not None else _state_pickle(GOOD)
    keys = keys if keys is not None else pickle.dumps(["0"], 2)
    return b"".join(header) + body + keys + struct.pack("<q", STORAGE.size) + STORAGE.tobytes()


def _zip(state: bytes = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", state if state is not None else _state_pickle(GOOD))
        archive.writestr("archive/data/0", STORAGE.tobytes())
    return buffer.getvalue()


def _folder(tmp_path, files: dict):
    folder = tmp_path / "hf"
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return str(folder)


def test_hand_built_weights_read_in_both_formats_and_sharded(tmp_path):
    """The files below are real torch.save layouts: what the malicious variants start from."""
    for data in (_legacy(), _zip()):
        weights = hf.read_weights(_folder(tmp_path, {"pytorch_model.bin": data}))
        np.testing.assert_array_equal(weights["w"], [[0, 1], [2, 3]])
    index = {"weight_map": {"w": "pytorch_model-00001-of-00002.bin", "v": "pytorch_model-00002-of-00002.bin"}}
    second = _legacy(_state_pickle({"v": ("0", 1, (3,), (1,))}))
    folder = _folder(tmp_path / "s", {"pytorch_model.bin.index.json": index,
                                      "pytorch_model-00001-of-00002.bin": _zip(),
                                      "pytorch_model-00002-of-00002.bin": second})
    weights = hf.read_weights(folder)
    np.testing.assert_array_equal(weights["v"], [1, 2, 3])
    np.testing.assert_array_equal(weights["w"], [[0, 1], [2, 3]])


@pytest.mark.parametrize("where", ["whole file", "magic", "protocol", "system info", "state dict", "storage keys",
                                   "zip data.pkl", "sharded index"])
def test_a_malicious_pickle_is_refused_on_every_path_and_runs_nothing(tmp_path, where):
    marker = tmp_path / "pwned"
    evil = _evil(marker)
    magic, protocol, info = (pickle.dumps(v, 2) for v in (weight_files._LEGACY_MAGIC, 1001, {"little_endian": True}))
    files = {
        "whole file": {"pytorch_model.bin": evil},
        "magic": {"pytorch_model.bin": _legacy(header=(evil, protocol, info))},
        "protocol": {"pytorch_model.bin": _legacy(header=(magic, evil, info))},
        "system info": {"pytorch_model.bin": _legacy(header=(magic, protocol, evil))},
        "state dict": {"pytorch_model.bin": _legacy(state=evil)},
        "storage keys": {"pytorch_model.bin": _legacy(keys=evil)},
        "zip data.pkl": {"pytorch_model.bin": _zip(state=evil)},
        "sharded index": {"pytorch_model.bin.index.json": {"weight_map": {"w": "a.bin", "v": "b.bin"}},
                          "a.bin": _zip(), "b.bin": _legacy(state=evil)},
    }[where]
    folder = _folder(tmp_path, files)
    with pytest.raises(InputError, match=r"unreadable PyTorch checkpoint \(global posix.system is not a tensor "
                                         r"\(refused\)\)"):
        hf.read_weights(folder)
    assert not marker.exists(), f"the pickle ran its code ({where})"


@pytest.mark.parametrize("case", ["past the storage", "negative stride", "not a tensor", "shard outside",
                                  "absolute shard", "bomb"])
def test_hostile_weights_without_code_end_in_one_error_naming_the_file(tmp_path, case):
    if case == "past the storage":  # as_strided would read the memory after the storage
        files = {"pytorch_model.bin": _zip(_state_pickle({"w": ("0", 2, (64, 64), (64, 1))}))}
        match = "reads past its storage"
    elif case == "negative stride":
        files = {"pytorch_model.bin": _legacy(_state_pickle({"w": ("0", 3, (2,), (-1,))}))}
        match = "stride"
    elif case == "not a tensor":
        files = {"pytorch_model.bin": _zip(pickle.dumps({"w": [1.0, 2.0]}, 2))}
        match = "'w' is not a tensor"
    elif case in ("shard outside", "absolute shard"):
        outside = tmp_path / "outside.bin"
        outside.write_bytes(_zip())
        shard = "../outside.bin" if case == "shard outside" else str(outside)
        files = {"pytorch_model.bin.index.json": {"weight_map": {"w": shard}}}
        match = "is not a file name in this directory"
    else:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("archive/data.pkl", _state_pickle(GOOD))
            archive.writestr("archive/data/0", b"\0" * (64 << 20))
        files = {"pytorch_model.bin": buffer.getvalue()}
        match = "decompression bomb"
    folder = _folder(tmp_path, files)
    with pytest.raises(InputError, match=match) as error:
        hf.read_weights(folder)
    assert folder in str(error.value) and "\n" not in str(error.value)


def test_no_other_unsafe_deserialisation_in_the_tree():
    """The audit of issue 36, kept: pickle only in hf/weight_files.py (its restricted unpickler), no np.load with
    pickles, no yaml.load without SafeLoader, no eval/exec, no archive extraction in the package."""
    import re

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "xlnet_tf")
    patterns = {"pickle": r"\bpickle\.(load|loads|Unpickler)\b|\bimport (dill|shelve|marshal|joblib)\b",
                "np.load": r"allow_pickle\s*=\s*True", "yaml": r"yaml\.(load|unsafe_load|full_load)\(",
                "eval": r"(?<![\w.])(eval|exec)\(", "archive": r"\.extractall\(|\.extract\("}
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    for what, pattern in patterns.items():
                        if re.search(pattern, line) and not (name == "weight_files.py" and what == "pickle"):
                            found.append(f"{os.path.relpath(path, root)}:{number}: {line.strip()}")
    assert not found, found


def test_squad_eval_feature_cache_is_json_and_a_planted_pickle_is_never_read(tmp_path):
    """The cache was a pickle that any writer of the (possibly shared) output directory could replace."""
    from xlnet_tf.tasks.squad import squad_data

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dev = os.path.join(root, "tests", "fixtures", "squad", "dev-v2.0.json")
    s = squad_data.FeatureSettings(os.path.join(root, "data", "spiece.model"), 64, 16, 24, False)
    marker = tmp_path / "pwned"
    planted = str(squad_data.eval_feature_path(str(tmp_path), s)).replace(".json", ".pkl")
    with open(planted, "wb") as f:
        f.write(_evil(marker))
    _, built, skipped = squad_data.prepare_eval_features(dev, str(tmp_path), s)
    path = squad_data.eval_feature_path(str(tmp_path), s)
    with open(path, encoding="utf-8") as f:
        json.load(f)  # JSON, not a pickle
    _, cached, cached_skipped = squad_data.prepare_eval_features(dev, str(tmp_path), s)
    assert cached == built and cached_skipped == skipped and built
    assert not marker.exists()
