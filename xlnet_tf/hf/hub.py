"""``hf://owner/name[@revision]``: a model on the HuggingFace Hub, found in the HF cache or, when the machine is
online, downloaded there with ``huggingface_hub`` (the ``hf`` extra). Nothing else downloads."""

from __future__ import annotations

import os
import re

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError

SCHEME = "hf://"
# What a model needs from a Hub repository (not its TF/Flax/ONNX weights, READMEs...): these files and its
# safetensors weights, or pytorch_model.bin where it has none.
HUB_FILES = ["config.json", "spiece.model", "tokenizer_config.json"]
_SAFETENSORS = ["*.safetensors", "model.safetensors.index.json"]


def is_hub(path) -> bool:
    return isinstance(path, str) and path.startswith(SCHEME)


def _hub_repo(uri: str) -> tuple:
    name = uri[len(SCHEME):].strip("/")
    name, _, revision = name.partition("@")
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        raise InputError(f"{uri}: not a HuggingFace Hub model name (hf://owner/name or hf://owner/name@revision)")
    return name, revision or None


def resolve(path: str) -> str:
    """``path`` itself, or for ``hf://owner/name[@revision]`` the model's directory in the HF cache: found there
    (no network), else downloaded into it when online. Offline, an InputError says what to download and where."""
    path = os.fspath(path)
    if not is_hub(path):
        return path
    repo, revision = _hub_repo(path)
    files = "config.json model.safetensors spiece.model tokenizer_config.json"
    files += f" --revision {revision}" if revision else ""
    manual = (f"where there is network, `hf download {repo} {files}` (pytorch_model.bin where the model has no "
              f"safetensors; files listed at https://huggingface.co/{repo}/tree/{revision or 'main'}) with "
              "--local-dir DIR, and pass DIR instead; or without --local-dir into the HF cache this machine reads "
              f"(HF_HUB_CACHE={_hub_cache()}), where {path} then finds it")
    try:
        import huggingface_hub
    except ImportError:
        raise InputError(f"{path}: huggingface_hub is not installed (pip install 'xlnet_tf[hf]'); or, {manual}") \
            from None

    def snapshot(local_files_only: bool) -> str:
        folder = huggingface_hub.snapshot_download(repo, revision=revision, allow_patterns=HUB_FILES + _SAFETENSORS,
                                                   local_files_only=local_files_only)
        if io_utils.glob(io_utils.join(folder, "*.safetensors")):
            return folder
        return huggingface_hub.snapshot_download(repo, revision=revision,
                                                 allow_patterns=HUB_FILES + ["pytorch_model.bin"],
                                                 local_files_only=local_files_only)

    try:
        return snapshot(local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached (the hub raises several kinds): download below
        pass
    try:
        return snapshot(local_files_only=False)
    except Exception as error:  # noqa: BLE001 - offline, unknown repo, gated model: all end here, named
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"{path}: not in the HF cache and cannot be downloaded ({type(error).__name__}: "
                         f"{reason}); {manual}") from None


def _hub_cache() -> str:
    try:
        from huggingface_hub import constants
        return constants.HF_HUB_CACHE
    except ImportError:
        return os.environ.get("HF_HUB_CACHE", "~/.cache/huggingface/hub")
