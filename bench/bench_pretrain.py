"""XLNet pretraining-step benchmark: ours (TF 2 / Keras 3) side by side with HuggingFace PyTorch and TF Model Garden.

    .venv/bin/python bench/bench_pretrain.py            # full run (6-10 min, 2 cores): bench/results.md + README tables
    .venv/bin/python bench/bench_pretrain.py --quick    # short run (fewer repetitions, no XLA, smaller memory run)

Peers need the ``bench`` extra (torch==2.13.0 CPU, transformers 5.x); Model Garden is tf-models-official (a core
dependency). Everything runs in one process on the same cores with the same compute-thread count (``--threads``,
default 2: torch ``set_num_threads``; TensorFlow intra-op threads, plus as many inter-op threads, which is
TensorFlow's default on a machine with that many cores and what our entry points run with), on the same synthetic
batches (``bench/workload.py``), and the repetitions of all implementations are interleaved so that load from
other processes affects them alike; figures are medians.

What is timed, per implementation, is one full pretraining step on bench-small: forward (two-stream, memory from
the previous step), permutation-LM loss over the P targets, backward, global-norm clipping and the AdamW update.
Ours is ``xlnet_tf.training.pretraining.make_replica_step`` with ``create_optimizer`` (the training loop's own
step) inside ``tf.function``. MFU = model FLOPs (``xlnet_tf.flops``: the matmuls the step runs, query stream on its
P rows, W_r once per step, no content stream in the last layer, whose output no head reads) / step time / the
matmul peak measured here with the same threads (fp32 peak for fp32 rows, bf16 peak for mixed_bfloat16 rows).
The base-512 memory figures come from a separate process per precision (peak RSS).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from workload import BASE_512, BENCH_SMALL, INFER_BASE, THREADS, make_batch, set_thread_env  # noqa: E402
from reporting import replace_block  # noqa: E402


# ---------------------------------------------------------------------------------------------------------------
# Ours


def _tf():
    import tensorflow as tf
    return tf


def setup_tf(threads: int):
    """``threads`` intra-op threads and as many inter-op threads: TensorFlow's default on a machine with
    ``threads`` cores, and what the training entry points run with. Independent ops (the two streams, dropout
    bits, the XLA kernels' single-threaded reductions) then overlap instead of leaving a core idle."""
    tf = _tf()
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf


def tf_batch(cfg, seed, objective="plm"):
    """The synthetic batch of ``seed``; other objectives than XLNet's build their inputs from its tokens and
    segments with the reader's own builder (the objective's ``make_batch``, ``xlnet_tf.objectives``)."""
    tf = _tf()
    batch = {k: tf.constant(v) for k, v in make_batch(cfg, seed).items()}
    if objective == "plm":
        return batch
    from xlnet_tf.objectives import BatchShape, get_objective
    records = {"input": batch["input_ids"], "is_masked": batch["perm_mask"][:, 0] > 0, "seg_id": batch["segment_ids"]}
    return get_objective(objective).make_batch(records, BatchShape(cfg.seq_len, cfg.reuse_len, cfg.reuse_len,
                                                                   cfg.num_predict),
                                               tf.constant([seed, 0], tf.int64), cfg.n_token)


class OursTrain:
    """Our real training step (``make_replica_step`` + ``create_optimizer``) in ``tf.function``, for a pretraining
    objective (XLNet's by default; the others without memory: they have none)."""

    def __init__(self, cfg, dtype="float32", jit=False, objective="plm"):
        tf = _tf()
        from xlnet_tf.models.xlnet import XLNetPretrainer
        from xlnet_tf.training.optimization import create_optimizer
        from xlnet_tf.training.pretraining import make_replica_step, zero_mems_fn

        self.cfg, self.dtype, self.objective = cfg, dtype, objective
        self.name = f"ours {dtype}" + ("" if objective == "plm" else f" {objective}") + (" XLA" if jit else "")
        self.flops = cfg.train_flops_per_step(objective)
        config = cfg.xlnet_config(objective)
        model = XLNetPretrainer(config, dtype=dtype)
        optimizer = create_optimizer(model, 1e-4, 100_000, 0, weight_decay=0.01)
        optimizer.build(model.trainable_variables)
        replica_step = make_replica_step(model, optimizer, clip=1.0, objective=objective)
        self._step = tf.function(lambda batch, mems: replica_step([batch], mems), jit_compile=jit)
        self.mems = zero_mems_fn(config, cfg.batch, model.compute_dtype)()
        self.batches = [tf_batch(cfg, seed, objective) for seed in range(2)]
        self.i = 0
        self.loss = None

    def step(self):
        self.mems, loss, *_ = self._step(self.batches[self.i % 2], self.mems)
        self.loss = float(loss.numpy())  # waits for the step
        self.i += 1


class OursInfer:
    """Content stream only (no target_mapping / perm_mask / memory), training=False, with the process's kernel
    backend (``XLNET_TF_KERNELS``, default fast), as a batch-prediction job would run it."""

    def __init__(self, cfg, dtype="float32", jit=False):
        tf = _tf()
        from xlnet_tf.models.xlnet import XLNetModel

        self.name = f"ours {dtype}" + (" XLA" if jit else "")
        model = XLNetModel(cfg.xlnet_config(), dtype=dtype)
        batch = make_batch(cfg, 0)
        self.inputs = {"input_ids": tf.constant(batch["input_ids"]), "segment_ids": tf.constant(batch["segment_ids"])}
        self._fn = tf.function(lambda x: model(x, training=False)["sequence_output"], jit_compile=jit)

    def step(self):
        self._fn(self.inputs).numpy()


# ---------------------------------------------------------------------------------------------------------------
# HuggingFace transformers (PyTorch)


def hf_config(cfg):
    from transformers import XLNetConfig as HFConfig
    return HFConfig(vocab_size=cfg.n_token, d_model=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
                    d_inner=cfg.d_inner, ff_activation="gelu", untie_r=True, attn_type="bi", bi_data=False,
                    clamp_len=-1, same_length=False, mem_len=cfg.mem_len or None, reuse_len=cfg.reuse_len or None,
                    use_mems_train=True, use_mems_eval=False, dropout=cfg.dropout, initializer_range=0.02)


class HFTrain:
    """``XLNetLMHeadModel`` on the same arrays: perm_mask, target_mapping, mems carried (use_mems); loss = target-
    masked CE over the P targets; clip_grad_norm_ 1.0; torch AdamW. ``precision``: "fp32", or "bf16" (autocast: HF's
    mixed precision, the counterpart of our mixed_bfloat16); ``compile``: the model under ``torch.compile``
    (inductor, HF's fastest mode where it compiles)."""

    def __init__(self, cfg, precision="fp32", compile=False):
        import torch
        from transformers import XLNetLMHeadModel

        torch.manual_seed(0)
        self.torch, self.precision = torch, precision
        self.name = ("HF torch.compile " if compile else "HF torch ") + ("fp32" if precision == "fp32" else
                                                                          "bf16 autocast")
        self.model = XLNetLMHeadModel(hf_config(cfg)).train()
        self.forward = torch.compile(self.model) if compile else self.model
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-8)
        self.batches = []
        for seed in range(2):
            b = make_batch(cfg, seed)
            self.batches.append(dict(
                input_ids=torch.from_numpy(b["input_ids"]).long(),
                token_type_ids=torch.from_numpy(b["segment_ids"]).long(),
                perm_mask=torch.from_numpy(b["perm_mask"]), target_mapping=torch.from_numpy(b["target_mapping"]),
                target=torch.from_numpy(b["target"]).long(), target_mask=torch.from_numpy(b["target_mask"])))
        self.mems = None
        self.i = 0
        self.loss = None

    def step(self):
        torch = self.torch
        b = self.batches[self.i % 2]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            out = self.forward(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                               perm_mask=b["perm_mask"], target_mapping=b["target_mapping"], mems=self.mems,
                               use_mems=True)
        logits = out.logits.float()
        losses = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["target"].reshape(-1),
                                                   reduction="none")
        mask = b["target_mask"].reshape(-1)
        loss = (losses * mask).sum() / mask.sum().clamp(min=1.0)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.mems = [m.detach().float() for m in out.mems]
        self.loss = float(loss.detach())
        self.i += 1


class HFInfer:
    def __init__(self, cfg, precision="fp32"):
        import torch
        from transformers import XLNetModel as HFModel

        self.torch, self.precision = torch, precision
        self.name = "HF torch " + ("fp32" if precision == "fp32" else "bf16 autocast")
        self.model = HFModel(hf_config(cfg)).eval()
        b = make_batch(cfg, 0)
        self.input_ids = torch.from_numpy(b["input_ids"]).long()
        self.token_type_ids = torch.from_numpy(b["segment_ids"]).long()

    def step(self):
        torch = self.torch
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            self.model(input_ids=self.input_ids, token_type_ids=self.token_type_ids, use_mems=False)


# ---------------------------------------------------------------------------------------------------------------
# TF Model Garden (tf-models-official, tf_keras)


class ModelGardenTrain:
    """``official.nlp.modeling.models.XLNetPretrainer`` over ``networks.XLNetBase(two_stream=True)``; its masks use
    1 = may attend (the inverse of perm_mask); tf_keras AdamW with global-norm clipping; memory carried as ``state``.
    Its LM head adds a dense + LayerNorm transform the original XLNet doesn't have (a few % more FLOPs)."""

    def __init__(self, cfg, jit=False):
        tf = _tf()
        import tf_keras
        from official.nlp.modeling import models, networks

        self.name = "Model Garden fp32" + (" XLA" if jit else "")
        network = networks.XLNetBase(
            vocab_size=cfg.n_token, num_layers=cfg.n_layer, hidden_size=cfg.d_model, num_attention_heads=cfg.n_head,
            head_size=cfg.d_head, inner_size=cfg.d_inner, dropout_rate=cfg.dropout,
            attention_dropout_rate=cfg.dropout, attention_type="bi", bi_data=False,
            initializer=tf_keras.initializers.RandomNormal(stddev=0.02), two_stream=True,
            tie_attention_biases=False, memory_length=cfg.mem_len, reuse_length=cfg.reuse_len,
            inner_activation="gelu")
        model = models.XLNetPretrainer(network=network)
        optimizer = tf_keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-8)
        self.batches = []
        for seed in range(2):
            b = make_batch(cfg, seed)
            self.batches.append(dict(
                input_word_ids=tf.constant(b["input_ids"]), input_type_ids=tf.constant(b["segment_ids"]),
                masked_tokens=tf.constant((b["perm_mask"].sum(1) > 0).astype("float32")),
                permutation_mask=tf.constant(1.0 - b["perm_mask"]), target_mapping=tf.constant(b["target_mapping"]),
                target=tf.constant(b["target"]), target_mask=tf.constant(b["target_mask"])))
        self.state = [tf.zeros([cfg.batch, cfg.mem_len, cfg.d_model]) for _ in range(cfg.n_layer)]

        def step(batch, state):
            inputs = {k: batch[k] for k in ("input_word_ids", "input_type_ids", "masked_tokens", "permutation_mask",
                                            "target_mapping")}
            inputs["state"] = state
            with tf.GradientTape() as tape:
                logits, new_state = model(inputs, training=True)
                losses = tf.nn.sparse_softmax_cross_entropy_with_logits(batch["target"], logits)
                mask = batch["target_mask"]
                loss = tf.reduce_sum(losses * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
            grads = tape.gradient(loss, model.trainable_variables)
            grads, _ = tf.clip_by_global_norm(grads, 1.0)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return new_state, loss

        self._step = tf.function(step, jit_compile=jit)
        self.i = 0
        self.loss = None

    def step(self):
        self.state, loss = self._step(self.batches[self.i % 2], self.state)
        self.loss = float(loss.numpy())
        self.i += 1


# ---------------------------------------------------------------------------------------------------------------
# Timing


def matmul_peak(dtype, windows=6, seconds=0.5, size=2048):
    """Achievable TF matmul FLOP/s in ``dtype`` with this process's threads (``progress.measure_matmul_peak``'s
    measurement), as the best of several short windows: on a shared CPU a long average measures the neighbours."""
    from xlnet_tf.training import progress
    best = 0.0
    for _ in range(windows):
        progress._cpu_peak_cache.pop(dtype, None)
        best = max(best, progress.measure_matmul_peak(dtype, size=size, seconds=seconds))
    return best


def interleaved(systems, reps, steps_per_rep, warmup, log, cpu_times=None):
    """Warms every system up, then runs ``reps`` rounds; in each round every system (in turn) times
    ``steps_per_rep`` consecutive steps. Returns {name: [step seconds]}; ``cpu_times`` (a dict), if given,
    receives {name: [this process's CPU seconds per step]}, which other processes' load disturbs less."""
    times = {s.name: [] for s in systems}
    cpu = cpu_times if cpu_times is not None else {}
    cpu.update({s.name: [] for s in systems})
    for s in systems:
        t0 = time.perf_counter()
        for _ in range(warmup):
            s.step()
        log(f"  warm-up {s.name}: {time.perf_counter() - t0:.1f} s (trace/compile + {warmup} steps)")
    for r in range(reps):
        for s in systems:
            for _ in range(steps_per_rep):
                t0, c0 = time.perf_counter(), time.process_time()
                s.step()
                times[s.name].append(time.perf_counter() - t0)
                cpu[s.name].append(time.process_time() - c0)
        log(f"  round {r + 1}/{reps}: " + ", ".join(f"{n} {statistics.median(t):.3f}s" for n, t in times.items()))
    return times


def peer_guard(make, log, label):
    """Builds a peer; returns None (and logs why) where it can't run here."""
    try:
        system = make()
        system.step()  # fail here rather than in the timed loop
        return system
    except Exception as e:  # noqa: BLE001 - a peer that can't run is reported, not fatal
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        log(f"  {label} could not run: {msg}")
        return msg


# ---------------------------------------------------------------------------------------------------------------
# base-512 memory (separate process: peak RSS is per process)


def memory_child(dtype, steps, threads):
    tf = setup_tf(threads)
    system = OursTrain(BASE_512, dtype=dtype)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        system.step()
        times.append(time.perf_counter() - t0)
    peak_kb = peak_rss_kb()
    print("RESULT " + json.dumps(dict(dtype=dtype, peak_rss_gb=peak_kb / 2**20, step_times=times, loss=system.loss,
                                      tf=tf.__version__)))


def peak_rss_kb() -> int:
    """This process image's peak resident set (KiB). Linux's ``ru_maxrss`` is not that: exec keeps the larger of
    the old image's peak and the new one's, and a child forked from the benchmark starts with the parent's pages
    mapped, so every child reported the parent's RSS at the fork (TensorFlow, torch and every peer's model loaded:
    12 GB against a 7.5 GB step). ``VmHWM`` is the high-water mark of this image alone."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: the best there is


def run_memory(dtype, steps, threads, log):
    cmd = [sys.executable, os.path.abspath(__file__), "--_memory_child", dtype, "--_steps", str(steps),
           "--threads", str(threads)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            log(f"  base-512 {dtype}: peak RSS {result['peak_rss_gb']:.2f} GB, steps "
                f"{', '.join(f'{t:.1f}' for t in result['step_times'])} s ({time.perf_counter() - t0:.0f} s wall)")
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    log(f"  base-512 {dtype} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return {"dtype": dtype, "error": f"exit {proc.returncode}: {' | '.join(tail)[:300]}"}


# ---------------------------------------------------------------------------------------------------------------
# Report


def custom_kernels_note() -> str:
    """Which kernel backend our rows ran (``xlnet_tf.kernels``)."""
    from xlnet_tf import kernels, ops

    if kernels.backend() == "plain":
        return "the plain TensorFlow ops (`XLNET_TF_KERNELS=plain`)"
    if ops.fused_adamw() is not None:
        return ("the fast kernel backend (`xlnet_tf/kernels/fast.py`): C++ CPU kernels for the attention "
                "probabilities, residual LayerNorm, feed-forward activation, LM cross-entropy and AdamW")
    return "the C++ kernels of `xlnet_tf/ops` could not be built: the plain TensorFlow ops"


def machine_info():
    from reporting import cpu_name

    cpu = cpu_name()
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
        amx = "AMX" if "amx_bf16" in flags else "AVX512-BF16 without AMX" if "avx512_bf16" in flags else "no AMX"
    except OSError:
        amx = "?"
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu} ({amx}), {os.cpu_count()} logical CPUs, {mem_gb:.0f} GiB RAM, "
            f"{platform.system()} {platform.release()}")


def versions():
    out = {}
    for mod in ("tensorflow", "keras", "tf_keras", "torch", "transformers"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            out[mod] = "not installed"
    try:
        from importlib.metadata import version
        out["tf-models-official"] = version("tf-models-official")
    except Exception:  # noqa: BLE001
        out["tf-models-official"] = "not installed"
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, no XLA rows, memory run in bf16 only")
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--reps", type=int, default=None, help="interleaved rounds (default 5, --quick 2)")
    parser.add_argument("--steps_per_rep", type=int, default=2)
    parser.add_argument("--xla", choices=("auto", "on", "off"), default="auto",
                        help="XLA rows: auto = fp32 XLA row in the full run only (bf16 XLA matmuls don't use AMX)")
    parser.add_argument("--skip", default="", help="comma list of: hf, compile (HF's torch.compile rows), mg, infer, "
                                                   "memory")
    parser.add_argument("--objectives", default="pmlm,mpnet",
                        help="other pretraining objectives timed next to XLNet's on the same backbone and batch "
                             "(comma list of pmlm, mpnet; empty: none)")
    parser.add_argument("--dtypes", default="float32,mixed_bfloat16", help="precisions of our training rows")
    parser.add_argument("--out", default=os.path.join(HERE, "results.md"))
    parser.add_argument("--_memory_child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_steps", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()

    set_thread_env(args.threads)
    if args._memory_child:
        memory_child(args._memory_child, args._steps, args.threads)
        return

    skip = set(filter(None, args.skip.split(",")))
    reps = args.reps or (2 if args.quick else 5)
    xla = args.xla == "on" or (args.xla == "auto" and not args.quick)

    def log(msg):
        print(msg, flush=True)

    start = time.time()
    load_before = os.getloadavg()
    setup_tf(args.threads)
    torch = None
    if "hf" not in skip or "infer" not in skip:
        try:
            import torch
            torch.set_num_threads(args.threads)
            torch.set_num_interop_threads(1)
        except Exception as e:  # noqa: BLE001
            log(f"torch unavailable ({e}); install the bench extra: pip install torch==2.13.0 'transformers>=5,<6'")
            torch = None
            skip |= {"hf"}

    log(f"machine: {machine_info()}; load average {load_before[0]:.2f}; {args.threads} threads")
    peak32, peak16 = matmul_peak("float32"), matmul_peak("bfloat16")
    log(f"matmul peak (TF, 2048^3, {args.threads} threads): fp32 {peak32 / 1e9:.0f} GFLOP/s, "
        f"bf16 {peak16 / 1e9:.0f} GFLOP/s")

    # --- training step, bench-small -----------------------------------------------------------------------------
    cfg = BENCH_SMALL
    log(f"\n[train] {cfg.name}: {cfg}")
    dtypes = args.dtypes.split(",")
    objectives = ["plm", *filter(None, args.objectives.split(","))]
    systems = [OursTrain(cfg, dtype, objective=objective) for objective in objectives for dtype in dtypes]
    if xla:
        systems.append(OursTrain(cfg, "float32", jit=True))
    notes = {}
    if "hf" not in skip:  # HF at its best: fp32, bf16 autocast, and torch.compile of each where it compiles here
        modes = [("fp32", False), ("bf16", False)] + ([] if "compile" in skip else [("fp32", True), ("bf16", True)])
        for precision, compiled in modes:
            hf = peer_guard(lambda: HFTrain(cfg, precision, compiled), log, f"HF {precision} compile={compiled}")
            if isinstance(hf, str):
                notes[("HF torch.compile " if compiled else "HF torch ") + precision] = hf
            else:
                systems.append(hf)
    if "mg" not in skip:
        mg = peer_guard(lambda: ModelGardenTrain(cfg), log, "Model Garden")
        if isinstance(mg, str):
            notes["Model Garden fp32"] = mg
        else:
            systems.append(mg)
    train_cpu = {}
    train_times = interleaved(systems, reps, args.steps_per_rep, warmup=4, log=log, cpu_times=train_cpu)
    losses = {s.name: s.loss for s in systems}

    # --- inference, content stream, Base shape, batch 32 x 128 ----------------------------------------------------
    infer_times = {}
    if "infer" not in skip:
        icfg = INFER_BASE
        log(f"\n[inference] content stream, XLNet-Base shape, batch {icfg.batch} x seq {icfg.seq_len}")
        isystems = [OursInfer(icfg, "float32"), OursInfer(icfg, "mixed_bfloat16")]
        if torch is not None:
            for precision in ("fp32", "bf16"):
                h = peer_guard(lambda: HFInfer(icfg, precision), log, f"HF inference {precision}")
                if not isinstance(h, str):
                    isystems.append(h)
        infer_times = interleaved(isystems, max(2, reps - 1), 2, warmup=1, log=log)

    # --- memory, base-512 batch 4 ---------------------------------------------------------------------------------
    memory = []
    if "memory" not in skip:
        log(f"\n[memory] base-512 batch {BASE_512.batch} (separate process each): {BASE_512}")
        for dtype in (["mixed_bfloat16"] if args.quick else ["float32", "mixed_bfloat16"]):
            memory.append(run_memory(dtype, 2 if args.quick else 3, args.threads, log))

    # The CPU is shared: re-measure the peak at the end and keep the best (an achievable peak, not a loaded one).
    peak32, peak16 = max(peak32, matmul_peak("float32")), max(peak16, matmul_peak("bfloat16"))
    log(f"matmul peak, best of start and end: fp32 {peak32 / 1e9:.0f} GFLOP/s, bf16 {peak16 / 1e9:.0f} GFLOP/s")
    load_after = os.getloadavg()
    report, readme_block = render(args, cfg, peak32, peak16, train_times, losses, notes, infer_times, memory,
                                  load_before, load_after, time.time() - start, train_cpu=train_cpu)
    print("\n" + report)
    with open(args.out, "w") as f:
        f.write(report)
    log(f"wrote {args.out}")
    if not args.quick:
        update_readme(readme_block, log)


def update_readme(block: str, log=print) -> None:
    """Writes ``block`` (the tables: never typed by hand) between the README's markers. The README holds the
    tables only; the run's details (machine, versions, memory, notes) are in bench/results.md."""
    path = os.path.join(os.path.dirname(HERE), "README.md")
    try:
        replace_block(path, "bench_pretrain.py", block)
    except ValueError as error:
        log(f"{error}; README not updated")
        return
    log(f"updated the performance tables of {path}")


def _objective_of(name: str):
    """The objective of one of our rows other than XLNet's ('pmlm', 'mpnet'), or None."""
    return next((o for o in ("pmlm", "mpnet") if name.split()[-1] == o), None)


def render(args, cfg, peak32, peak16, train_times, losses, notes, infer_times, memory, load_before, load_after,
           seconds, now=None, train_cpu=None):
    """This run's report: ``(results, readme)``. ``results`` is the whole report (bench/results.md);
    ``readme`` the README's block: one line naming the run, the training table, the ratios, the inference table.
    ``train_cpu``: CPU seconds per step of the training rows (the objectives' table compares them too)."""
    now = now or datetime.datetime.now()
    flops = cfg.train_flops_per_step()
    objective_med = {name: statistics.median(t) for name, t in train_times.items() if _objective_of(name)}
    med = {name: statistics.median(t) for name, t in train_times.items() if not _objective_of(name)}
    hf = med.get("HF torch fp32")
    mg = med.get("Model Garden fp32")
    ours = {n: t for n, t in med.items() if n.startswith("ours")}
    best32 = min((n for n in ours if "float32" in n), key=ours.get)
    best16 = min((n for n in ours if "bfloat16" in n), key=ours.get, default=None)
    # The faster precision on this machine: mixed_bfloat16 where the CPU multiplies bf16 natively (AMX,
    # AVX512-BF16), else fp32.
    fastest = min(filter(None, (best32, best16)), key=ours.get)
    cmd = "python bench/bench_pretrain.py" + (" " + " ".join(sys.argv[1:]) if len(sys.argv) > 1 else "")
    v = versions()
    machine = machine_info()
    date = now.strftime('%Y-%m-%d %H:%M')

    def is_bf16(name: str) -> bool:
        return "bfloat16" in name or "bf16" in name

    def ours_best(bf16: bool) -> str:
        return best16 if bf16 and best16 else best32

    def train_table(with_loss: bool) -> list[str]:
        loss_head, loss_rule = (" loss |", "---:|") if with_loss else ("", "")
        rows = [f"| implementation | step (s, median) | tokens/s | MFU | ours vs this, same precision |{loss_head}",
                f"|---|---:|---:|---:|---:|{loss_rule}"]
        for name, t in sorted(med.items(), key=lambda kv: kv[1]):
            peak = peak16 if is_bf16(name) else peak32
            mfu = flops / t / peak
            tag = ""
            if name == fastest:
                tag = " (fastest here)"
            elif name in (best32, best16):
                tag = " (best fp32)" if name == best32 else " (best bf16)"
            ratio = f"{t / med[ours_best(is_bf16(name))]:.2f}x"
            loss = f" {losses.get(name, float('nan')):.3f} |" if with_loss else ""
            rows.append(f"| {name}{tag} | {t:.3f} | {cfg.tokens_per_step / t:,.0f} | {100 * mfu:.0f}% | "
                        f"{ratio if not name.startswith('ours') else '-'} |{loss}")
        for name, why in notes.items():
            rows.append(f"| {name} | could not run: {why} | | | |" + (" |" if with_loss else ""))
        return rows

    def objective_table() -> list[str]:
        """XLNet's row against the other objectives' on the same backbone and batch (their own model FLOPs)."""
        cpu = {name: statistics.median(t) for name, t in (train_cpu or {}).items()}
        rows = ["| objective | precision | memory | step (s, median) | text tokens/s | GFLOP/step | MFU | MFU vs plm "
                "| same, by CPU time |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for dtype in ("float32", "mixed_bfloat16"):
            plm = f"ours {dtype}"
            if plm not in med:
                continue
            peak = peak16 if "bfloat16" in dtype else peak32
            for objective in ("plm", "pmlm", "mpnet"):
                name = plm + ("" if objective == "plm" else f" {objective}")
                t = med.get(name, objective_med.get(name))
                if t is None:
                    continue
                step_flops = cfg.train_flops_per_step(objective)

                def relative(times):  # this row's FLOP/s over XLNet's
                    return step_flops / times[name] / (flops / times[plm]) if name in times else float("nan")

                rows.append(f"| {objective} | {dtype} | {cfg.memory(objective)} | {t:.3f} | "
                            f"{cfg.tokens_per_step / t:,.0f} | {step_flops / 1e9:.1f} | "
                            f"{100 * step_flops / t / peak:.0f}% | {relative({**med, **objective_med}):.2f} | "
                            f"{relative(cpu):.2f} |")
        return rows

    ratios = []
    if hf:
        ratios.append(f"**Ours vs HF PyTorch fp32 (tokens/s):** fp32 {hf / med[best32]:.2f}x (target >= 2.0x)"
                      + (f"; mixed_bfloat16 {hf / med[best16]:.2f}x (target >= 3.5x with AMX)" if best16 else ""))
    # Each side at its best: our fastest row against the fastest peer row, and precision by precision.
    peers = {n: t for n, t in med.items() if not n.startswith("ours")}
    best_line = ""
    if peers:
        peer_best = min(peers, key=peers.get)
        best_line = (f"**Best against best:** `{fastest}` vs {peer_best} {peers[peer_best] / ours[fastest]:.2f}x. "
                     "Same precision, each peer's fastest row:")
        for label, mine, bf16 in (("bfloat16", best16, True), ("float32", best32, False)):
            same = {n: t for n, t in peers.items() if is_bf16(n) == bf16}
            by_peer = {}  # "HF" / "Model Garden": its fastest row of this precision
            for n, t in sorted(same.items(), key=lambda kv: kv[1]):
                by_peer.setdefault("HF" if n.startswith("HF") else n.rsplit(" ", 1)[0], t)
            if mine and by_peer:
                best_line += f" {label} " + ", ".join(f"{p} {t / med[mine]:.2f}x" for p, t in by_peer.items()) + ";"
        best_line = best_line.rstrip(";") + "."
        ratios.append(best_line)
    if mg:
        ratios.append(f"**Ours vs Model Garden fp32:** fp32 {mg / med[best32]:.2f}x"
                      + (f"; mixed_bfloat16 {mg / med[best16]:.2f}x" if best16 else ""))

    infer_title, infer_table = None, []
    if infer_times:
        icfg = INFER_BASE
        imed = {n: statistics.median(t) for n, t in infer_times.items()}
        ihf = imed.get("HF torch fp32")
        infer_title = (f"Inference (content stream only, XLNet-Base shape: 12 layers, d_model 768; batch {icfg.batch} "
                       f"x seq {icfg.seq_len}, no memory, training=False / inference_mode):")
        infer_table = ["| implementation | forward (s, median) | tokens/s | vs HF |", "|---|---:|---:|---:|"]
        for name, t in sorted(imed.items(), key=lambda kv: kv[1]):
            infer_table.append(f"| {name} | {t:.3f} | {icfg.tokens_per_step / t:,.0f} | "
                               f"{(ihf / t if ihf else float('nan')):.2f}x |")

    out = [
        "# XLNet pretraining-step benchmark",
        "",
        f"- Date: {date} ; command: `{cmd}` ; run time {seconds / 60:.1f} min",
        f"- Machine: {machine}; {args.threads} compute threads for TF and torch (TF: {args.threads} intra-op + "
        f"{args.threads} inter-op, its default on {args.threads} cores); load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after (the CPU is shared: figures are medians of "
        f"interleaved repetitions)",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- Matmul peak measured in this run (TF, 2048x2048x2048): fp32 {peak32 / 1e9:.0f} GFLOP/s, "
        f"bf16 {peak16 / 1e9:.0f} GFLOP/s",
        f"- Training step: {cfg.name} = n_layer {cfg.n_layer}, d_model {cfg.d_model}, n_head {cfg.n_head}, d_head "
        f"{cfg.d_head}, d_inner {cfg.d_inner}, vocab {cfg.n_token}, seq_len {cfg.seq_len}, reuse_len {cfg.reuse_len}, "
        f"mem_len {cfg.mem_len}, num_predict {cfg.num_predict}, batch {cfg.batch}, dropout {cfg.dropout}; "
        f"forward (two streams, memory carried) + loss + backward + clip + AdamW (ours {custom_kernels_note()}); "
        f"{flops / 1e9:.1f} GFLOP/step (model FLOPs, `xlnet_tf/flops.py`)",
        "",
        *train_table(with_loss=True),
        "",
        *ratios,
        "",
    ]
    if objective_med:
        out += ["Pretraining objectives on the same backbone and batch (`--objective`, docs/objectives.md): XLNet's "
                f"permutation LM with memory (mem_len {cfg.mem_len}), UniLMv2's pseudo-masked LM and MPNet without "
                "(they have none). Each row's MFU uses its own model FLOPs (`xlnet_tf/flops.py`: PMLM's 2K "
                "appended rows, MPNet's K placeholders and K query rows, K = the padded maximum of masked tokens); "
                "text tokens/s counts the seq_len tokens of text per sequence. The last column compares FLOP/s by "
                "this process's CPU time per step, which the other processes on a shared machine disturb less "
                "than wall time.", "", *objective_table(), ""]
    if infer_table:
        out += [infer_title, "", *infer_table, ""]
    if memory:
        m = BASE_512
        out += [f"Memory: XLNet-Base shape, seq_len {m.seq_len}, mem_len {m.mem_len}, reuse_len {m.reuse_len}, "
                f"num_predict {m.num_predict}, batch {m.batch}, full training step (ours), one process per row:", "",
                "| precision | peak RSS (GB) | step (s, after warm-up) | tokens/s |", "|---|---:|---:|---:|"]
        for r in memory:
            if "error" in r:
                out.append(f"| {r['dtype']} | failed: {r['error']} | | |")
                continue
            steady = r["step_times"][1:] or r["step_times"]
            t = statistics.median(steady)
            out.append(f"| {r['dtype']} | {r['peak_rss_gb']:.2f} | {t:.2f} | {m.tokens_per_step / t:,.0f} |")
        out.append("")
    out.append("MFU of every row uses the same model FLOPs (ours: query stream on the P target rows, W_r once per "
               "step, the last layer's unread content stream left out); HF and Model Garden execute more "
               "(full-length query stream via target_mapping, W_r per example, every layer's content stream), so "
               "their MFU is useful-work utilisation, not hardware utilisation. fp32 rows against the "
               "fp32 peak, mixed_bfloat16 rows against the bf16 peak (both measured in this run).")
    out.append("")
    out.append(f"Fastest here: `{fastest}` (the bf16 matmul peak is {peak16 / peak32:.1f}x the fp32 one). "
               "Recommended: mixed_bfloat16 (`XLNetPretrainer(config, dtype=\"mixed_bfloat16\")`, graph mode on "
               "oneDNN, no XLA: XLA's CPU dots don't use AMX) where the hardware multiplies bfloat16 natively (TPUs, "
               "GPUs, CPUs with AMX or AVX512-BF16); float32 on CPUs without, where "
               "bfloat16 matmuls run slower than float32 ones (compare the matmul peaks above).")
    results = "\n".join(out) + "\n"

    readme = [
        f"Training step on bench-small ({cfg.n_layer} layers, d_model {cfg.d_model}, seq_len {cfg.seq_len}, batch "
        f"{cfg.batch}, two streams + memory, AdamW), measured {date} with {args.threads} threads on "
        f"{machine.split(',')[0]}; machine, versions, memory and losses: [bench/results.md](bench/results.md).",
        "",
        *train_table(with_loss=False),
        "",
        *([best_line] if best_line else []),
    ]
    if infer_table:
        readme += ["", infer_title, "", *infer_table]
    return results, "\n".join(readme) + "\n"


if __name__ == "__main__":
    main()
