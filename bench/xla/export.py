"""Exports our real training steps as XLA modules that jax runs anywhere (``runner.py``), with TF's own results.

    .venv/bin/python bench/xla/export.py --out /tmp/bundle --config tiny --batch 4 --objectives plm,pmlm \\
        --dtypes float32,mixed_bfloat16 --finetune clf --ref_steps 3
    .venv/bin/python bench/xla/export.py --out bench/gpu/bundle --preset gpu    # the device bundle (docs below)

Each workload is the step the training loops run, in ``tf.function(jit_compile=True)`` (so the plain kernels,
``xlnet_tf.kernels``), dropout on:
* pretraining (``--objectives``): ``xlnet_tf.training.pretraining.make_replica_step`` with ``create_optimizer``
  (warmup/decay AdamW, weight decay, global-norm clipping 1.0), memory carried between steps for XLNet's
  objective, on the batches of ``bench/workload.py`` (the original's ``_local_perm`` construction; the other
  objectives build theirs with the reader's own builder), masks as uint8 as the pipeline ships them;
* fine-tuning (``--finetune``): ``xlnet_tf.finetuning.trainer.make_replica_step`` with the classifier's loss
  (``clf``: ``XLNetClassifier``, 2 labels, inputs packed by ``finetuning.records.pack_sequence``) or SQuAD's
  (``squad``: ``XLNetSquad`` and ``squad_loss``);
* inference (``--infer``): ``XLNetModel``'s content stream, training=False.

For every workload the bundle holds the HLO module (``experimental_get_compiler_ir(...)(stage="hlo_serialized")``,
gzipped), the batches, how to generate the initial state (``bundle.py``), the model FLOPs (``xlnet_tf.flops``) and,
with ``--ref_steps N``, TF's results on this CPU for the first N steps from that state (loss, gradient norm, norms
of the weights and of the optimizer state after each step; inference: the output's norm), computed by the same
``tf.function`` (XLA on CPU). ``--ref_steps 0`` leaves a workload unverified (one too large for this machine); the
runner says so.

Configs: ``--config`` one of ``bench/workload.py``'s (bench-small, base-512, infer-base) or ``tiny``, changed by
``--set n_layer=3,d_model=96,...`` (any ``BenchConfig`` field); ``--batch`` overrides the config's batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
for path in (ROOT, BENCH, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

import numpy as np  # noqa: E402

import bundle as fmt  # noqa: E402
from workload import CONFIGS, BenchConfig, make_batch  # noqa: E402

TINY = BenchConfig("tiny", n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=128, n_token=1000, seq_len=32,
                   reuse_len=16, mem_len=16, num_predict=6, batch=4)
SHORT_DTYPE = {"float32": "f32", "mixed_bfloat16": "bf16"}

# The device bundle (``--preset gpu``): what bench/gpu/run_on_device.sh runs. base-512 is timed at batch 32 (what
# a GPU wants; TF's XLA step on CPU at that batch needs ~53 GB, more than this 2-core, 23 GB machine has) and
# checked at batch 2 (the same module but for the batch dimension); fine-tuning and the forward likewise.
GPU_PRESET = [
    # (config, batch, objectives, dtypes, finetune, infer, ref_steps): each workload timed at a GPU's batch and,
    # where TF's reference step would not fit this machine at that batch, checked at a small one.
    ("base-512", 32, "plm,pmlm,mpnet", "float32,mixed_bfloat16", "", False, 0),
    ("bench-small", 32, "plm,pmlm,mpnet", "float32,mixed_bfloat16", "", False, 2),
    ("base-512", 2, "plm,pmlm,mpnet", "float32,mixed_bfloat16", "", False, 2),
    ("infer-base", 32, "", "float32,mixed_bfloat16", "clf", True, 0),
    ("infer-base", 4, "", "float32,mixed_bfloat16", "clf", True, 2),
    ("squad-512", 8, "", "float32,mixed_bfloat16", "squad", False, 0),
    ("squad-512", 2, "", "float32,mixed_bfloat16", "squad", False, 2),
]


# What a bundle's steps are built from: a bundle records their digest (``source_stamp``), and workloads are added
# only to a bundle from the same sources, so that a device run measures one tree, the one the report names.
SOURCES = ("xlnet_tf", "bench/workload.py", "bench/xla/export.py", "bench/xla/bundle.py")


def source_stamp() -> dict:
    """``{"commit", "modified", "digest"}``: the checkout's commit (None outside git), whether these sources differ
    from it, and a SHA-256 of their contents (every ``.py`` under ``SOURCES``, by path)."""
    import subprocess

    paths = []
    for source in SOURCES:
        full = os.path.join(ROOT, source)
        if os.path.isfile(full):
            paths.append(source)
        for parent, dirs, files in os.walk(full):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            paths += [os.path.relpath(os.path.join(parent, f), ROOT) for f in files if f.endswith(".py")]
    digest = hashlib.sha256()
    for path in sorted(paths):
        with open(os.path.join(ROOT, path), "rb") as f:
            digest.update(path.encode() + b"\0" + hashlib.sha256(f.read()).digest())

    def git(*args):
        try:
            proc = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None
    commit = git("rev-parse", "--short=12", "HEAD")
    status = git("status", "--porcelain", "--", *SOURCES) if commit else None
    return {"commit": commit, "modified": bool(status), "digest": digest.hexdigest()}


def describe_source(source: dict | None) -> str:
    if not source:
        return "unknown sources (a bundle from before bundles were stamped)"
    at = source.get("commit") or "a tree outside git"
    return f"{at}{' with local changes' if source.get('modified') else ''} (sources {source['digest'][:12]})"


def same_source_or_refuse(out_dir: str, manifest: dict | None, source: dict | None) -> None:
    """Raises ``ConfigError`` when ``out_dir`` holds workloads exported from other sources."""
    if not manifest or not manifest["workloads"]:
        return
    theirs = manifest.get("source")
    if not theirs or not source or theirs.get("digest") != source.get("digest"):
        raise ConfigError(f"{out_dir}: its {len(manifest['workloads'])} workloads were exported from "
                          f"{describe_source(theirs)}, this tree is {describe_source(source)}: export into a new "
                          f"--out, or empty this one first (--drop '*')")


class ConfigError(ValueError):
    """A config or flag the exporter refuses up front: one line naming the field and why (``main`` prints it
    without a traceback), instead of a numpy or TensorFlow error deep inside a build, or a silently odd step."""


def config_named(name: str, overrides: str = "") -> BenchConfig:
    if name == "squad-512":  # XLNet-Base fine-tuned on SQuAD: sequences of 512, no memory
        cfg = dataclasses.replace(CONFIGS["base-512"], name="squad-512", mem_len=0, reuse_len=0, num_predict=0)
    elif name == "tiny":
        cfg = TINY
    elif name in CONFIGS:
        cfg = CONFIGS[name]
    else:
        raise ConfigError(f"--config {name}: not a config (tiny, squad-512, {', '.join(CONFIGS)})")
    fields = {f.name: f for f in dataclasses.fields(BenchConfig)}
    for item in filter(None, overrides.split(",")):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep:
            raise ConfigError(f"--set {item}: expected field=value")
        if key not in fields:
            raise ConfigError(f"--set {key}: not a BenchConfig field (fields: {', '.join(fields)})")
        kind = type(getattr(cfg, key))
        try:
            cfg = dataclasses.replace(cfg, **{key: kind(value)})
        except ValueError:
            raise ConfigError(f"--set {key}={value}: {key} is {'an integer' if kind is int else 'a ' + kind.__name__}")
    return cfg


# The ids below 9 are <unk> ... <eop> (xlnet_tf.tokenization): the batches draw ordinary tokens past them.
MIN_VOCAB = 10


def config_errors(cfg: BenchConfig, objectives=(), dtypes=(), finetune=(), infer=False) -> list:
    """What the exporter cannot build for ``cfg``, one message per field, each naming it and why; empty when every
    requested workload can be exported. Checked before anything is traced, so that a config the batches or the
    model cannot take is refused in one line rather than failing in a builder (or exporting a step that is not
    the one asked for)."""
    from xlnet_tf.errors import InputError
    from xlnet_tf.objectives import OBJECTIVES

    errors = []
    for name in ("n_layer", "d_model", "n_head", "d_head", "d_inner", "seq_len", "batch"):
        if getattr(cfg, name) < 1:
            errors.append(f"{name}={getattr(cfg, name)} must be positive")
    # workload.make_batch draws ids from 5 on; the fine-tuning batches and PMLM's and MPNet's corruption draw
    # ordinary tokens past the 9 special ids (<unk> ... <eop>).
    min_vocab = MIN_VOCAB if finetune or any(o in ("pmlm", "mpnet") for o in objectives) else 6
    if cfg.n_token < min_vocab:
        errors.append(f"n_token={cfg.n_token} must be >= {min_vocab}: the batches draw ordinary tokens past the "
                      "special ids")
    for name in ("mem_len", "reuse_len", "num_predict"):
        if getattr(cfg, name) < 0:
            errors.append(f"{name}={getattr(cfg, name)} must be >= 0")
    if not cfg.name or not all(c.isalnum() or c in "-_." for c in cfg.name):  # it names the bundle's files
        errors.append(f"name={cfg.name!r} must be letters, digits, '-', '_' or '.'")
    if not errors:  # the model's own checks (d_model even, dropout in [0, 1), ...), as XLNetConfig words them
        try:
            cfg.xlnet_config()
        except InputError as e:
            errors.append(str(e).replace("XLNetConfig: ", ""))
    if errors:
        return errors
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown:
        errors.append(f"--objectives {','.join(unknown)}: not an objective (registered: {', '.join(OBJECTIVES)})")
    unknown = [t for t in finetune if t not in ("clf", "squad")]
    if unknown:
        errors.append(f"--finetune {','.join(unknown)}: not a fine-tuning step (clf, squad)")
    for dtype in dtypes:
        if dtype not in SHORT_DTYPE:  # any Keras policy exports (mixed_float16, bfloat16 did, and verify)
            import keras
            try:
                keras.mixed_precision.Policy(dtype)
            except ValueError:
                errors.append(f"--dtypes {dtype}: not a Keras precision policy (float32, mixed_bfloat16, ...)")
    # workload.make_batch (every pretraining batch starts from its records) places num_predict distinct targets in
    # the sequence and splits it into two segments.
    if "plm" in objectives and not 1 <= cfg.num_predict <= cfg.seq_len:
        errors.append(f"num_predict={cfg.num_predict} must be in [1, seq_len={cfg.seq_len}] for plm")
    elif objectives and cfg.num_predict > cfg.seq_len:
        errors.append(f"num_predict={cfg.num_predict} must be <= seq_len={cfg.seq_len} for {','.join(objectives)}")
    if "plm" in objectives and cfg.mem_len and cfg.reuse_len > cfg.seq_len:
        errors.append(f"reuse_len={cfg.reuse_len} must be <= seq_len={cfg.seq_len}: the memory caches the first "
                      "reuse_len positions of each sequence")
    if cfg.seq_len < 2:
        errors.append(f"seq_len={cfg.seq_len} must be >= 2 (two segments)")
    # PMLM's and MPNet's batches pad the blockwise prediction set to max_masked(seq_len) slots, taken from the
    # sequence: they need that many positions.
    blockwise = [o for o in objectives if o in ("pmlm", "mpnet")]
    if blockwise:
        from xlnet_tf.data.factorization import max_masked  # TensorFlow comes with it: imported only when needed
        if max_masked(cfg.seq_len) > cfg.seq_len:
            errors.append(f"seq_len={cfg.seq_len} is too short for {','.join(blockwise)}: its batches take "
                          f"max_masked(seq_len)={max_masked(cfg.seq_len)} prediction slots from the sequence")
    # The fine-tuning batches: A <sep> B <sep> <cls> (clf) and P <sep> Q <sep> <cls> (squad), a token at least in
    # each part.
    if finetune and cfg.seq_len < 5:
        errors.append(f"seq_len={cfg.seq_len} must be >= 5 for {','.join(finetune)} (text <sep> text <sep> <cls>)")
    return errors


# ---------------------------------------------------------------------------------------------------------------
# The steps


def _optimizer(model):
    from xlnet_tf.training.optimization import create_optimizer
    optimizer = create_optimizer(model, 1e-4, 100_000, 0, weight_decay=0.01)
    optimizer.build(model.trainable_variables)
    return optimizer


def pretrain_batches(cfg, objective, n):
    """The ``n`` input batches of ``objective`` (seeds 0..n-1), masks as uint8 (the pipeline's wire type)."""
    import tensorflow as tf
    from xlnet_tf.objectives import BatchShape, get_objective
    from xlnet_tf.training.pretraining import PERM_MASK_WIRE_DTYPE

    batches = []
    for seed in range(n):
        b = make_batch(cfg, seed)
        if objective == "plm":
            batch = {k: tf.constant(v) for k, v in b.items()}
            batch["perm_mask"] = tf.cast(batch["perm_mask"], PERM_MASK_WIRE_DTYPE)
        else:
            records = {"input": tf.constant(b["input_ids"]), "is_masked": tf.constant(b["perm_mask"][:, 0] > 0),
                       "seg_id": tf.constant(b["segment_ids"])}
            batch = get_objective(objective).make_batch(
                records, BatchShape(cfg.seq_len, cfg.reuse_len, cfg.reuse_len, cfg.num_predict),
                tf.constant([seed, 0], tf.int64), cfg.n_token, PERM_MASK_WIRE_DTYPE)
        batches.append(batch)
    return batches


def build_pretrain(cfg, objective, dtype):
    import tensorflow as tf
    from xlnet_tf.models.xlnet import XLNetPretrainer
    from xlnet_tf.training.pretraining import make_replica_step, zero_mems_fn

    model = XLNetPretrainer(cfg.xlnet_config(objective), dtype=dtype)
    optimizer = _optimizer(model)
    replica_step = make_replica_step(model, optimizer, clip=1.0, objective=objective)

    def step(batch, mems):
        new_mems, loss, norm, metrics = replica_step([batch], mems)
        return {"mems": new_mems, "loss": loss, "grad_norm": norm, "metrics": metrics}

    mems = zero_mems_fn(model.config, cfg.batch, model.compute_dtype)()
    return dict(fn=tf.function(step, jit_compile=True), batches=pretrain_batches(cfg, objective, 2), state=mems,
                model=model, optimizer=optimizer, flops=cfg.train_flops_per_step(objective), kind="train",
                carry={"mems": "state"})


def finetune_batches(cfg, task, n):
    import tensorflow as tf
    from xlnet_tf.finetuning.records import pack_sequence
    from xlnet_tf.tokenization import CLS_ID, SEP_ID, SQUAD_SEG_ID_CLS, SQUAD_SEG_ID_P, SQUAD_SEG_ID_PAD, \
        SQUAD_SEG_ID_Q

    batches = []
    for seed in range(n):
        rng = np.random.default_rng(1000 + seed)
        rows = []
        for _ in range(cfg.batch):
            if task == "clf":  # A <sep> B <sep> <cls>, left-padded; some rows shorter than the sequence
                total = int(rng.integers(cfg.seq_len // 2, cfg.seq_len - 3 + 1))
                split = int(rng.integers(1, total))
                tokens = rng.integers(9, cfg.n_token, total).tolist()
                ids, segs, mask = pack_sequence(tokens[:split], tokens[split:], cfg.seq_len)
                rows.append(dict(input_ids=ids, segment_ids=segs, padding_mask=mask, label=int(rng.integers(2)),
                                 is_real_example=1))
            else:  # SQuAD: P <sep> Q <sep> <cls>, right-padded, an answer span in P (or none: is_impossible)
                # questions of 8-31 tokens at 512 (the device bundle's draws); shorter where the sequence is short
                q = int(rng.integers(min(8, cfg.seq_len // 8), min(32, cfg.seq_len // 4)))
                p = int(rng.integers(cfg.seq_len // 2, cfg.seq_len - q - 3 + 1))
                ids = (rng.integers(9, cfg.n_token, p).tolist() + [SEP_ID] + rng.integers(9, cfg.n_token, q).tolist()
                       + [SEP_ID, CLS_ID])
                segs = [SQUAD_SEG_ID_P] * (p + 1) + [SQUAD_SEG_ID_Q] * (q + 1) + [SQUAD_SEG_ID_CLS]
                n_real, pad = len(ids), cfg.seq_len - len(ids)
                impossible = bool(rng.random() < 0.3)
                start = 0 if impossible else int(rng.integers(0, p))
                end = start if impossible else int(min(p - 1, start + rng.integers(0, 8)))
                cls_index = n_real - 1
                p_mask = [0.0] * p + [1.0] * (cfg.seq_len - p)
                p_mask[cls_index] = 0.0  # "no answer" is the CLS position (squad_data: CLS 0)
                rows.append(dict(input_ids=ids + [0] * pad, segment_ids=segs + [SQUAD_SEG_ID_PAD] * pad,
                                 padding_mask=[1.0] * n_real + [0.0] * pad, p_mask=p_mask,
                                 cls_index=cls_index, start_positions=cls_index if impossible else start,
                                 end_positions=cls_index if impossible else end, is_impossible=float(impossible)))
        batch = {}
        for key in rows[0]:
            values = np.asarray([r[key] for r in rows])
            batch[key] = tf.constant(values.astype(np.float32 if values.dtype.kind == "f" else np.int32))
        batches.append(batch)
    return batches


def build_finetune(cfg, task, dtype):
    import tensorflow as tf
    from xlnet_tf.finetuning.trainer import make_replica_step
    from xlnet_tf.flops import finetune_flops_per_sequence
    from xlnet_tf.tasks.classification.classification_head import XLNetClassifier
    from xlnet_tf.tasks.squad.squad_head import XLNetSquad

    config = cfg.xlnet_config("pmlm").replace(mem_len=0, reuse_len=None)
    if task == "clf":
        from xlnet_tf.tasks.base import weighted_loss

        model = XLNetClassifier(config, num_labels=2, task_scope="bench", dtype=dtype)

        def loss_fn(features, outputs):
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["label"],
                                                                         logits=outputs["logits"])
            return weighted_loss(per_example, features)
    else:
        from xlnet_tf.tasks.squad.squad_answers import squad_loss as loss_fn

        model = XLNetSquad(config, start_n_top=5, end_n_top=5, dtype=dtype)
    optimizer = _optimizer(model)
    replica_step = make_replica_step(model, optimizer, loss_fn, clip=1.0)

    def step(features, state):
        state, loss, norm = replica_step(features, state)
        return {"state": state, "loss": loss, "grad_norm": norm}

    # what the trainer reports
    flops = cfg.batch * finetune_flops_per_sequence(config, cfg.seq_len, cfg.batch, model.last_layer_rows)
    return dict(fn=tf.function(step, jit_compile=True), batches=finetune_batches(cfg, task, 2),
                state=tf.zeros([]), model=model, optimizer=optimizer, flops=flops, kind="train",
                carry={"state": "state"})


def build_infer(cfg, dtype):
    import tensorflow as tf
    from xlnet_tf.models.xlnet import XLNetModel

    model = XLNetModel(cfg.xlnet_config("pmlm").replace(mem_len=0, reuse_len=None), dtype=dtype)
    batches = []
    for seed in range(2):
        # Token ids and segments only: make_batch draws them before the targets, so num_predict (which the forward
        # has no use for, and which make_batch needs <= seq_len) is 0 here, and the batches are as before.
        b = make_batch(dataclasses.replace(cfg, num_predict=0), seed)
        batches.append({"input_ids": tf.constant(b["input_ids"]), "segment_ids": tf.constant(b["segment_ids"])})

    def fn(inputs, state):
        return {"sequence_output": model(inputs, training=False)["sequence_output"], "state": state}

    return dict(fn=tf.function(fn, jit_compile=True), batches=batches, state=tf.zeros([]), model=model,
                optimizer=None, flops=cfg.forward_flops_per_step(), kind="infer", carry={"state": "state"})


# ---------------------------------------------------------------------------------------------------------------
# Export


def _aliases(hlo_text: str) -> dict:
    """The module's ``input_output_alias``: {output index: parameter number} (the variables TF's bridge updates)."""
    header = hlo_text.split("\n", 1)[0]
    return {int(o): int(p) for o, p in re.findall(r"\{(\d+)\}: \((\d+), \{\}", header)}


def compact_hlo(proto: bytes, min_param_bytes: int = 1 << 16) -> tuple[bytes, list]:
    """The module with its large constants out of the file: TF's bridge folds every dropout's Philox counter into
    a constant ``0, 1, ..., n-1`` (tens of MiB at a GPU's batch), which becomes an ``iota`` again; the remaining
    constants of the entry computation over ``min_param_bytes`` (position encodings, attention-structure masks)
    become extra parameters after the step's own: ``(module, [(name, value)])``, their values stored once per
    bundle. Same computation, same numbers."""
    from tensorflow.compiler.xla import xla_data_pb2
    from tensorflow.compiler.xla.service import hlo_pb2

    module = hlo_pb2.HloModuleProto.FromString(proto)
    t = xla_data_pb2.PrimitiveType
    fields = {t.F32: ("f32s", np.float32), t.S32: ("s32s", np.int32), t.U32: ("u32s", np.uint32),
              t.PRED: ("preds", np.bool_), t.S64: ("s64s", np.int64), t.BF16: ("bf16s", "bfloat16"),
              t.U8: ("u8s", np.uint8), t.S8: ("s8s", np.int8), t.F16: ("f16s", np.float16)}
    entry = next(c for c in module.computations if c.id == module.entry_computation_id)
    extra = []
    for computation in module.computations:
        for ins in computation.instructions:
            if ins.opcode != "constant" or ins.shape.element_type not in fields:
                continue
            field, dtype = fields[ins.shape.element_type]
            dims = list(ins.shape.dimensions)
            n = int(np.prod(dims, dtype=np.int64)) if dims else 1
            if n < 256:
                continue
            raw = getattr(ins.literal, field)
            if isinstance(raw, bytes):  # bf16s, f16s, u8s, s8s: packed little-endian bytes
                value = np.frombuffer(raw, fmt.np_dtype(dtype) if isinstance(dtype, str) else dtype)
            else:
                value = np.asarray(raw, dtype)
            if value.size != n:
                continue
            if len(dims) == 1 and value.dtype.kind in "iu" and np.array_equal(value, np.arange(n)):
                ins.opcode = "iota"
                ins.ClearField("literal")
                del ins.dimensions[:]
                ins.dimensions.append(0)
                continue
            layout = list(ins.shape.layout.minor_to_major)
            if (computation.id != module.entry_computation_id or value.nbytes < min_param_bytes
                    or layout != sorted(layout, reverse=True)):
                continue
            ins.opcode = "parameter"
            ins.ClearField("literal")
            ins.parameter_number = len(entry.program_shape.parameters)
            entry.program_shape.parameters.append(ins.shape)
            entry.program_shape.parameter_names.append(ins.name)
            module.host_program_shape.parameters.append(ins.shape)
            module.host_program_shape.parameter_names.append(ins.name)
            extra.append((ins.name, value.reshape(dims)))
    return module.SerializeToString(), extra


def _paths(structure, prefix=""):
    """``tf.nest.flatten``'s order with each leaf's path ("0/input_ids", "mems/1"): dicts by sorted key."""
    if isinstance(structure, dict):
        items = [(str(k), structure[k]) for k in sorted(structure)]
    elif isinstance(structure, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(structure)]
    else:
        return [(prefix, structure)]
    return [leaf for key, value in items for leaf in _paths(value, f"{prefix}/{key}" if prefix else key)]


def _read(handle, dtype):
    import tensorflow as tf
    return tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)


def export_workload(out_dir: str, name: str, built: dict, meta: dict, ref_steps: int, seed: int, log,
                    min_param_bytes: int = 1 << 16) -> dict:
    import tensorflow as tf

    fn, batches, state = built["fn"], built["batches"], built["state"]
    t0 = time.perf_counter()
    args = (batches[0], state)
    concrete = fn.get_concrete_function(*args)
    ir = fn.experimental_get_compiler_ir(*args)
    proto = ir(stage="hlo_serialized")
    text = ir(stage="hlo")
    trace_s = time.perf_counter() - t0
    entry = next(line for line in text.splitlines() if line.startswith("ENTRY"))
    n_params = len(re.findall(r"\barg\d+\.\d+: ", entry.split("->")[0]))

    explicit = _paths(args)
    captured = list(concrete.captured_inputs)
    if len(explicit) + len(captured) != n_params:
        raise RuntimeError(f"{name}: {len(explicit)} inputs + {len(captured)} captured != {n_params} HLO parameters")
    # Which variable each captured handle is (names for the report, the group for the reference's norms).
    names = {}
    for group, variables in (("weights", built["model"].variables),
                             ("optimizer", built["optimizer"].variables if built["optimizer"] else [])):
        for v in variables:
            names.setdefault(id(v.handle), (group, v.path))
    # Parameter dtypes as the module has them (ReadVariableOp needs them for captured resources).
    entry_types = re.findall(r"\barg\d+\.\d+: (\w+)\[", entry.split("->")[0])
    xla_to_tf = {"f32": tf.float32, "bf16": tf.bfloat16, "f16": tf.float16, "s32": tf.int32, "s64": tf.int64,
                 "u8": tf.uint8, "pred": tf.bool, "u32": tf.uint32, "f64": tf.float64}

    npz, params = {}, []
    for path, tensor in explicit:
        top, _, rest = path.partition("/")
        if top == "0":
            params.append({"role": "batch", "key": rest, "shape": tensor.shape.as_list(),
                           "dtype": tensor.dtype.name})
        else:
            value = tensor.numpy()
            if not np.all(value == value.reshape(-1)[:1]):
                raise ValueError(f"{name}: state input {path} is not constant")
            params.append({"role": "state", "name": "state/" + rest if rest else "state", "group": "state",
                           "shape": list(value.shape), "dtype": tensor.dtype.name,
                           "init": {"const": value.reshape(-1)[0].item() if value.size else 0}})
    initial = []
    for i, handle in enumerate(captured):
        index = len(explicit) + i
        dtype = xla_to_tf[entry_types[index]] if handle.dtype == tf.resource else handle.dtype
        value = (_read(handle, dtype) if handle.dtype == tf.resource else handle).numpy()
        group, vname = names.get(id(handle), ("other", f"captured_{i}"))
        flat = value.reshape(-1)
        if value.size and np.all(flat == flat[0]):
            init = {"const": flat[0].item()}
        elif dtype.is_floating and value.size > 16:
            v64 = value.astype(np.float64)
            init = {"uniform": [float(v64.mean()), float(v64.std())]}
        else:
            if value.size > 100_000:
                raise ValueError(f"{name}: {vname} ({value.shape} {dtype.name}) would be stored")
            init = {"stored": f"param{index}"}
            fmt.pack(f"param{index}", value, npz)
        params.append({"role": "variable" if handle.dtype == tf.resource else "captured", "name": vname,
                       "group": group, "shape": list(value.shape), "dtype": dtype.name, "init": init})
        generated = fmt.generate(init, seed, index, value.shape, dtype.name, npz)
        initial.append((handle, generated))
    batch_npz = {}
    for b, batch in enumerate(batches):
        for key, tensor in batch.items():
            fmt.pack(f"batch{b}/{key}", tensor.numpy(), batch_npz)

    outputs = [path for path, _ in _paths(concrete.structured_outputs)]
    carry = {str(o): p for o, p in _aliases(text).items()}
    state_params = [i for i, p in enumerate(params) if p["role"] == "state"]
    state_outputs = [i for i, o in enumerate(outputs) if o.split("/")[0] in built["carry"]]
    if len(state_params) != len(state_outputs):
        raise RuntimeError(f"{name}: {len(state_outputs)} state outputs for {len(state_params)} state inputs")
    carry.update({str(o): p for o, p in zip(state_outputs, state_params)})

    # TF's reference: the same tf.function on this CPU, from the generated state.
    reference = None
    if ref_steps:
        for handle, value in initial:
            if handle.dtype == tf.resource:
                tf.raw_ops.AssignVariableOp(resource=handle, value=tf.constant(value))
        state_value = state
        steps = []
        t1 = time.perf_counter()
        for s in range(ref_steps):
            result = fn(batches[s % len(batches)], state_value)
            flat = tf.nest.flatten(result)
            state_value = tf.nest.pack_sequence_as(state, [flat[i] for i in state_outputs])
            record = {}
            if built["kind"] == "train":
                record["loss"] = float(result["loss"].numpy())
                record["grad_norm"] = float(result["grad_norm"].numpy())
                values = [_read(h, tf.as_dtype(params[len(explicit) + i]["dtype"])).numpy()
                          if h.dtype == tf.resource else None for i, (h, _) in enumerate(initial)]
                record.update(fmt.state_norms([None] * len(explicit) + values, {"params": params},
                                              [None] * len(explicit) + [g for _, g in initial]))
            else:
                out = result["sequence_output"].numpy().astype(np.float64)
                record["output_norm"] = float(np.sqrt(np.sum(out * out)))
                record["output_mean"] = float(out.mean())
            steps.append(record)
            log(f"    TF step {s + 1}: " + ", ".join(f"{k} {v:.7g}" for k, v in record.items()))
        reference = {"steps": steps, "by": f"TensorFlow {tf.__version__} XLA on CPU ({os.cpu_count()} cores)",
                     "seconds": time.perf_counter() - t1}

    proto, constants = compact_hlo(proto, min_param_bytes)
    for cname, value in constants:  # stored once per bundle, by content (shared by a config's workloads)
        store = {}
        fmt.pack("value", value, store)
        digest = hashlib.sha1(np.ascontiguousarray(value).tobytes() + str(value.dtype).encode()).hexdigest()[:12]
        file = f"const-{digest}.npz"
        if not os.path.exists(os.path.join(out_dir, file)):
            np.savez_compressed(os.path.join(out_dir, file), **store)
        params.append({"role": "constant", "name": cname, "group": "constant", "shape": list(value.shape),
                       "dtype": "bfloat16" if value.dtype.name == "bfloat16" else value.dtype.name,
                       "init": {"file": file}})
    hlo_name, npz_name = f"{name}.hlo.pb.gz", f"{name}.npz"
    with gzip.open(os.path.join(out_dir, hlo_name), "wb", compresslevel=9) as f:
        f.write(proto)
    np.savez_compressed(os.path.join(out_dir, npz_name), **npz)
    # The batches: one file per distinct content (a float32 and a bfloat16 step of a config read the same ones).
    digest = hashlib.sha1()
    for key in sorted(batch_npz):
        digest.update(key.encode() + np.ascontiguousarray(batch_npz[key]).tobytes())
    batches_name = f"batches-{digest.hexdigest()[:12]}.npz"
    if not os.path.exists(os.path.join(out_dir, batches_name)):
        np.savez_compressed(os.path.join(out_dir, batches_name), **batch_npz)
    workload = dict(meta, name=name, kind=built["kind"], hlo=hlo_name, npz=npz_name, batches=batches_name,
                    seed=seed,
                    n_batches=len(batches), params=params, outputs=outputs, carry=carry,
                    flops_per_step=built["flops"], hlo_bytes=len(proto),
                    hlo_ops=_op_mix(text), reference=reference, trace_seconds=trace_s)
    files = {hlo_name, npz_name, batches_name} | {p["init"]["file"] for p in params if p["role"] == "constant"}
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in files)
    log(f"  {name}: {n_params} parameters (+{len(constants)} large constants), {len(outputs)} outputs + "
        f"{len(_aliases(text))} updated variables, HLO {len(proto) / 2**20:.1f} MiB, {size / 2**20:.2f} MiB on disk, "
        f"traced in {trace_s:.0f} s")
    return workload


def _op_mix(hlo_text: str) -> dict:
    """HLO instructions by opcode (before XLA's optimisations), the most frequent 25."""
    import collections
    ops = collections.Counter(re.findall(r"= [^ ]+ ([a-z][\w-]*)\(", hlo_text))
    return dict(ops.most_common(25))


def workload_name(cfg, kind: str, what, dtype: str) -> str:
    label = {"pretrain": f"{cfg.name}_{what}", "finetune": f"{what}-{cfg.seq_len}",
             "infer": f"{cfg.name}_forward"}[kind]
    return f"{label}_{SHORT_DTYPE.get(dtype, dtype)}_b{cfg.batch}"


def export(out_dir, cfg, objectives, dtypes, finetune, infer, ref_steps, seed, log=print, manifest=None,
           min_param_bytes=1 << 16, for_tpu=False):
    import keras

    from xlnet_tf import ops

    errors = config_errors(cfg, objectives, dtypes, finetune, infer)
    if errors:
        raise ConfigError(f"config {cfg.name}: " + "; ".join(errors))
    source = source_stamp()
    same_source_or_refuse(out_dir, manifest, source)
    os.makedirs(out_dir, exist_ok=True)
    manifest = manifest or {"format": fmt.FORMAT, "workloads": []}
    manifest["source"] = source
    known = {w["name"] for w in manifest["workloads"]}
    jobs = [("pretrain", o, d) for o in objectives for d in dtypes]
    jobs += [("finetune", t, d) for t in finetune for d in dtypes]
    jobs += [("infer", None, d) for d in dtypes] if infer else []
    for kind, what, dtype in jobs:
        name = workload_name(cfg, kind, what, dtype)
        if name in known:
            raise ValueError(f"{out_dir} already has {name}")
        log(f"[{name}] {kind} {what or ''} {dtype}: {cfg}")
        keras.utils.set_random_seed(seed)
        meta = dict(config=dataclasses.asdict(cfg), workload=kind, objective=what, dtype=dtype, batch=cfg.batch,
                    seq_len=cfg.seq_len, tokens_per_step=cfg.batch * cfg.seq_len, for_tpu=for_tpu)
        with ops.building_for_tpu(for_tpu):  # the step is traced here: ops take their TPU form (ops.for_tpu)
            built = (build_pretrain(cfg, what, dtype) if kind == "pretrain" else
                     build_finetune(cfg, what, dtype) if kind == "finetune" else build_infer(cfg, dtype))
            manifest["workloads"].append(export_workload(out_dir, name, built, meta, ref_steps, seed, log,
                                                         min_param_bytes))
        fmt.write_manifest(out_dir, manifest)
    return manifest


def drop(out_dir: str, patterns: list) -> None:
    import fnmatch

    manifest = fmt.read_manifest(out_dir)
    gone = [w for w in manifest["workloads"] if any(fnmatch.fnmatch(w["name"], p) for p in patterns)]
    manifest["workloads"] = [w for w in manifest["workloads"] if w not in gone]

    def files(w):
        return {w["hlo"], w["npz"], w.get("batches")} | {p["init"]["file"] for p in w["params"]
                                                           if "file" in p.get("init", {})}
    kept = set().union(*(files(w) for w in manifest["workloads"])) if manifest["workloads"] else set()
    for name in set().union(*(files(w) for w in gone)) - kept - {None} if gone else set():
        if os.path.exists(os.path.join(out_dir, name)):  # (one already gone need not stop the drop)
            os.remove(os.path.join(out_dir, name))
    if not manifest["workloads"]:  # an empty bundle takes the next export's sources
        manifest.pop("source", None)
    fmt.write_manifest(out_dir, manifest)
    print(f"dropped {len(gone)} workloads: {', '.join(w['name'] for w in gone)}")


def merge(out_dir: str, other: str) -> None:
    """Adds ``other``'s workloads to ``out_dir`` (two exports run side by side, each into its own directory)."""
    import shutil

    extra = fmt.read_manifest(other)
    os.makedirs(out_dir, exist_ok=True)  # merging into a new directory copies ``other``
    manifest = (fmt.read_manifest(out_dir) if os.path.exists(os.path.join(out_dir, "manifest.json"))
                else {"format": fmt.FORMAT, "workloads": []})
    names = {w["name"] for w in manifest["workloads"]}
    clash = sorted(names & {w["name"] for w in extra["workloads"]})
    if clash:
        raise ValueError(f"{out_dir} already has {', '.join(clash)}")
    if extra["workloads"]:
        same_source_or_refuse(out_dir, manifest, extra.get("source"))
        manifest["source"] = extra.get("source")
    for name in os.listdir(other):
        if name != "manifest.json" and not os.path.exists(os.path.join(out_dir, name)):
            shutil.copy2(os.path.join(other, name), os.path.join(out_dir, name))
    manifest["workloads"] += extra["workloads"]
    fmt.write_manifest(out_dir, manifest)
    print(f"merged {len(extra['workloads'])} workloads into {out_dir}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="bundle directory (workloads are added to its manifest)")
    parser.add_argument("--preset", choices=("gpu",), default=None, help="the device bundle (GPU_PRESET)")
    parser.add_argument("--config", default="tiny", help="tiny, squad-512 or one of bench/workload.py's")
    parser.add_argument("--set", default="", help="BenchConfig fields to change: n_layer=3,d_model=96,...")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--objectives", default="plm", help="pretraining objectives (comma list; empty: none)")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--finetune", default="", help="fine-tuning steps: clf, squad (comma list)")
    parser.add_argument("--infer", action="store_true", help="also the inference forward")
    parser.add_argument("--ref_steps", type=int, default=3, help="TF's reference steps (0: none)")
    parser.add_argument("--for_tpu", action="store_true", help="the steps as a TPU runs them (ops.for_tpu: some "
                                                               "ops take another form there), for runner.py --target "
                                                               "tpu-*")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min_param_bytes", type=int, default=1 << 16,
                        help="the module's constants from this size on become parameters stored once per bundle")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--merge", default="", help="add the workloads of this bundle directory to --out; export "
                                                    "nothing")
    parser.add_argument("--drop", default="", help="remove these workloads (comma list of globs) from --out, and "
                                                   "the files no other workload uses; export nothing")
    args = parser.parse_args(argv)
    if args.drop:
        drop(args.out, [g for g in args.drop.split(",") if g])
        return
    manifest = None
    if os.path.exists(os.path.join(args.out, "manifest.json")):
        manifest = fmt.read_manifest(args.out)
    try:
        if args.merge:
            merge(args.out, args.merge)
            return
        source = source_stamp()
        same_source_or_refuse(args.out, manifest, source)  # before anything is built
    except ConfigError as e:
        sys.exit(f"export.py: refused: {e}")
    print(f"export.py: the steps of {describe_source(source)} into {args.out}", flush=True)

    from workload import set_thread_env
    set_thread_env(args.threads)  # (also quiets TensorFlow's start-up logs, should the checks below import it)

    def split(s):
        return [x for x in s.split(",") if x]

    cfg = None
    if args.preset is None:  # refused here in one line, before anything is built (a traceback says nothing more)
        try:
            cfg = config_named(args.config, args.set)
            if args.batch is not None:
                cfg = dataclasses.replace(cfg, batch=args.batch)
            errors = config_errors(cfg, split(args.objectives), split(args.dtypes), split(args.finetune),
                                   args.infer)
        except ConfigError as e:
            errors = [str(e)]
        if errors:
            sys.exit("export.py: refused: " + "; ".join(errors))

    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    t0 = time.perf_counter()
    if args.preset == "gpu":  # one process per workload: TF's compiled reference steps are freed after each
        import subprocess
        done = {w["name"] for w in (manifest or {"workloads": []})["workloads"]}
        for config, batch, objectives, dtypes, finetune, infer, ref_steps in GPU_PRESET:
            cfg = dataclasses.replace(config_named(config), batch=batch)
            jobs = [("--objectives", o) for o in split(objectives)] + [("--finetune", t) for t in split(finetune)]
            jobs += [("--infer", None)] if infer else []
            for flag, what in jobs:
                for dtype in split(dtypes):
                    kind = {"--objectives": "pretrain", "--finetune": "finetune", "--infer": "infer"}[flag]
                    if workload_name(cfg, kind, what, dtype) in done:  # a rerun continues where the last stopped
                        continue
                    cmd = [sys.executable, os.path.abspath(__file__), "--out", args.out, "--config", config,
                           "--batch", str(batch), "--objectives", what if flag == "--objectives" else "",
                           "--finetune", what if flag == "--finetune" else "", "--dtypes", dtype,
                           "--ref_steps", str(ref_steps), "--seed", str(args.seed), "--threads", str(args.threads)]
                    cmd += ["--infer"] if flag == "--infer" else []
                    print("$ " + " ".join(cmd), flush=True)
                    subprocess.run(cmd, check=True)
        manifest = fmt.read_manifest(args.out)
    else:
        manifest = export(args.out, cfg, split(args.objectives), split(args.dtypes), split(args.finetune),
                          args.infer, args.ref_steps, args.seed, manifest=manifest,
                          min_param_bytes=args.min_param_bytes, for_tpu=args.for_tpu)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"wrote {args.out}: {len(manifest['workloads'])} workloads, {size / 2**20:.1f} MiB, "
          f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
