"""The data manifest: what a pretraining data directory holds and the settings it was written with.

``save_dir/manifest.json`` (``manifest-<split>.json`` for other splits) is the single source of truth for
the reader: shards in stream order with record counts, and the parameters that training must match. Every
writer task also leaves ``save_dir/parts/<split>-pass<P>-task<T>.json``; the manifest is the merge of all the
parts, so tasks of a cluster run can finish in any order.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

from xlnet_tf import io_utils
from xlnet_tf.errors import InputError, MissingInputError

FORMAT = "xlnet_tf.pretraining_data/1"

# Settings that must be identical between writing and training (the original encoded them in file names).
MATCH_FIELDS = ("seq_len", "reuse_len", "bsz_per_host", "num_core_per_host", "bi_data", "mask_alpha",
                "mask_beta", "num_predict", "uncased", "use_eod", "vocab_size", "sp_sha256")


def manifest_name(split: str = "train") -> str:
    return "manifest.json" if split == "train" else f"manifest-{split}.json"


def part_path(save_dir: str, split: str, pass_id: int, task: int) -> str:
    return os.path.join(save_dir, "parts", f"{split}-pass{pass_id}-task{task}.json")


def write_json_atomic(path: str, obj: Any) -> None:
    """Writes a manifest or sidecar atomically (``xlnet_tf.io_utils``; leftovers of a killed writer are named
    ``.<name>.tmp-*``, so a writer task can find and delete its own)."""
    io_utils.write_json_atomic(path, obj, indent=1, sort_keys=True)


def _read_json(path: str) -> dict:
    with io_utils.open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: not a valid JSON file ({e}); it may have been damaged: rewrite the data "
                             "(the writer skips the shards that are intact)") from None


def merge_parts(save_dir: str, split: str = "train") -> dict:
    """Builds the manifest from the task parts on disk: shards ordered by (pass, task, shard index)."""
    parts_dir = os.path.join(save_dir, "parts")
    names = [n for n in io_utils.listdir(parts_dir) if n.startswith(f"{split}-pass") and n.endswith(".json")] \
        if io_utils.isdir(parts_dir) else []
    parts = [_read_json(os.path.join(parts_dir, n)) for n in names]
    if not parts:
        raise InputError(f"{save_dir}: no finished writer task for split '{split}' (no parts/{split}-*.json)")
    parts.sort(key=lambda p: (p["pass_id"], p["task"]))
    first = parts[0]
    for p in parts[1:]:
        diff = [k for k in first["params"] if p["params"].get(k) != first["params"][k]]
        if diff or p["num_task"] != first["num_task"]:
            raise InputError(f"{save_dir}: writer tasks disagree on {diff or ['num_task']} "
                             f"(pass {p['pass_id']} task {p['task']} vs pass {first['pass_id']} task "
                             f"{first['task']}); write them into separate directories")
    num_task = first["num_task"]
    passes = sorted({p["pass_id"] for p in parts})
    # Each part lists every pass its run was asked for (--pass_id, --num_passes), so that a run killed between
    # passes leaves an incomplete data set, not a smaller complete one; parts written before they did so only
    # count their own pass.
    requested = sorted({q for p in parts for q in p.get("passes_requested", [p["pass_id"]])})
    have = {(p["pass_id"], p["task"]) for p in parts}
    missing = [f"pass {q} task {t}" for q in requested for t in range(num_task) if (q, t) not in have]
    shards = [s for p in parts for s in p["shards"]]
    return {
        "format": FORMAT,
        "split": split,
        "params": first["params"],
        "writer": {k: v for k, v in first["writer"].items() if k not in ("task", "pass_id")},
        "num_task": num_task,
        "passes": passes,
        "passes_requested": requested,
        "complete": not missing,
        "missing_tasks": missing,
        "shards": shards,
        "num_records": sum(s["num_records"] for s in shards),
        "num_batches": sum(s["num_batches"] for s in shards),
        "input_report": {f"pass{p['pass_id']}-task{p['task']}": p["input_report"] for p in parts},
    }


def load_manifest(data_dir: str, split: str = "train") -> dict:
    """Reads ``data_dir``'s manifest; shard paths are made absolute. Raises ValueError if tasks are missing."""
    path = os.path.join(data_dir, manifest_name(split))
    if not io_utils.exists(path):
        raise MissingInputError(f"{path}: no data manifest; write data with "
                                "`python -m xlnet_tf.cli.create_data --save_dir=...`")
    manifest = _read_json(path)
    if manifest.get("format") != FORMAT:
        raise InputError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    if not manifest["complete"]:
        # Tasks of a cluster run finish in any order; the last one to write the manifest may not have seen
        # another's part yet. The parts on disk are authoritative.
        manifest = merge_parts(data_dir, split)
        if not manifest["complete"]:
            raise InputError(f"{data_dir}: data incomplete, writer tasks missing: "
                             f"{', '.join(manifest['missing_tasks'])}; {completing_command(data_dir, manifest)}")
    for shard in manifest["shards"]:
        shard["path"] = os.path.join(data_dir, shard["file"])
    _check_shard_files(path, manifest["shards"])
    return manifest


def completing_command(data_dir: str, manifest: dict) -> str:
    """How to write the passes and tasks an incomplete manifest lacks: its create_data command (the settings it
    records), which resumes, skipping what is written."""
    missing = [tuple(int(w) for w in m.split()[1::2]) for m in manifest["missing_tasks"]]  # "pass P task T"
    params, writer = manifest["params"], manifest.get("writer", {})
    requested = manifest.get("passes_requested") or sorted({q for q, _ in missing})
    tasks = sorted({t for _, t in missing})
    flags = dict(input_glob=writer.get("input_glob"), spiece_model_file=writer.get("sp_path"), save_dir=data_dir,
                 **{k: params.get(k) for k in ("seq_len", "reuse_len", "num_predict", "bsz_per_host",
                                               "num_core_per_host", "bi_data", "mask_alpha", "mask_beta",
                                               "uncased", "use_eod")},
                 **{k: writer.get(k) for k in ("seed", "original_span_bug", "batches_per_shard", "max_line_bytes")},
                 split=manifest.get("split"), pass_id=requested[0], num_passes=requested[-1] - requested[0] + 1,
                 task="<T>" if len(tasks) > 1 else tasks[0], num_task=manifest.get("num_task"))
    words = [(f"--{k}" if v else f"--no{k}") if isinstance(v, bool)
             else f"--{k}={v if v == '<T>' else shlex.quote(str(v))}" for k, v in flags.items() if v is not None]
    tasks_note = f" for each --task=<T> of {', '.join(map(str, tasks))}" if len(tasks) > 1 else ""
    return (f"write them by rerunning the command that wrote the data{tasks_note} (it skips what is written): "
            "python -m xlnet_tf.cli.create_data " + " ".join(words))


def _check_shard_files(manifest_path: str, shards: list) -> None:
    """Every shard the manifest lists exists with the size it was written with (checked now, not when the reader
    reaches it hours later); a ValueError names each one that does not."""
    problems = []
    for shard in shards:
        if not shard["num_records"]:
            continue
        if not io_utils.exists(shard["path"]):
            problems.append(f"{shard['path']}: missing")
            continue
        size = io_utils.getsize(shard["path"])
        if shard.get("bytes") is not None and size != shard["bytes"]:
            problems.append(f"{shard['path']}: {size} bytes, written with {shard['bytes']} (truncated or replaced)")
    if problems:
        raise InputError(f"{manifest_path} lists shards that are not intact:\n  " + "\n  ".join(problems[:20])
                         + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
                         + "\nrerunning the create_data command that wrote the data rewrites them")


def find_damaged_shards(paths: list) -> list:
    """The shards among ``paths`` whose records fail to read (a CRC mismatch, a cut-off record), each as
    'path: error'. Reads every record: for diagnosing a DataLossError, not for every start."""
    import tensorflow as tf

    damaged = []
    for path in paths:
        try:
            for _ in tf.data.TFRecordDataset(path):
                pass
        except tf.errors.OpError as e:
            damaged.append(f"{path}: {e.message.splitlines()[0]}")
    return damaged


def check_manifest(manifest: dict, **training_flags) -> None:
    """Raises ValueError naming every field where the data differs from the training settings.

    Pass the training values by name, e.g. ``check_manifest(m, seq_len=512, reuse_len=256, bi_data=True)``;
    None values are not checked. Fields: ``MATCH_FIELDS``.
    """
    unknown = sorted(set(training_flags) - set(MATCH_FIELDS))
    if unknown:
        raise ValueError(f"check_manifest: unknown field(s) {unknown}; known: {list(MATCH_FIELDS)}")
    params = manifest["params"]
    wrong = []
    for key, want in training_flags.items():
        if want is None:
            continue
        have = params.get(key)
        if isinstance(have, bool) or isinstance(want, bool):
            same = bool(have) == bool(want)
        else:
            same = have == want
        if not same:
            wrong.append(f"{key}: data was written with {have!r}, training uses {want!r}")
    if wrong:
        raise InputError("pretraining data does not match the training settings:\n  " + "\n  ".join(wrong))
