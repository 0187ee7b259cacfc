"""The benchmark workload shared by every implementation: configs, synthetic pretraining batches (numpy), threads.

The batches follow the original ``data_utils._local_perm`` construction: ``num_predict`` target positions per
sequence, a random factorization order in which the targets come last, ``perm_mask[i, j] = 1`` when ``i`` may not
see ``j``, and ``target_mapping`` one-hot rows at the targets. Every implementation gets the same arrays.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

THREADS = 2


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    name: str
    n_layer: int
    d_model: int
    n_head: int
    d_head: int
    d_inner: int
    n_token: int
    seq_len: int
    reuse_len: int
    mem_len: int
    num_predict: int
    batch: int
    dropout: float = 0.1

    def memory(self, objective: str = "plm") -> int:
        """The memory length of ``objective``'s step: this config's for XLNet's, none for the others."""
        from xlnet_tf.objectives import get_objective
        return self.mem_len if get_objective(objective).has_memory else 0

    def xlnet_config(self, objective: str = "plm"):
        from xlnet_tf.config import XLNetConfig
        mem_len = self.memory(objective)
        return XLNetConfig(n_token=self.n_token, n_layer=self.n_layer, d_model=self.d_model, n_head=self.n_head,
                           d_head=self.d_head, d_inner=self.d_inner, ff_activation="gelu", untie_r=True,
                           mem_len=mem_len, reuse_len=self.reuse_len if mem_len else None, bi_data=False,
                           attn_type="bi", dropout=self.dropout, dropatt=self.dropout)

    def train_flops_per_step(self, objective: str = "plm") -> float:
        from xlnet_tf.flops import train_flops_per_sequence
        return self.batch * train_flops_per_sequence(self.n_layer, self.d_model, self.d_inner, self.seq_len,
                                                     self.memory(objective), self.num_predict, self.n_token,
                                                     self.batch, objective=objective,
                                                     d_attn=self.n_head * self.d_head)

    def forward_flops_per_step(self) -> float:
        """The inference forward's: the content stream, no memory, no LM head."""
        from xlnet_tf.flops import forward_flops_per_sequence
        return self.batch * forward_flops_per_sequence(self.n_layer, self.d_model, self.d_inner, self.seq_len, 0, 0,
                                                       0, self.batch, d_attn=self.n_head * self.d_head)

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq_len


BENCH_SMALL = BenchConfig("bench-small", n_layer=6, d_model=512, n_head=8, d_head=64, d_inner=2048, n_token=32000,
                          seq_len=128, reuse_len=64, mem_len=64, num_predict=20, batch=8)
BASE_512 = BenchConfig("base-512", n_layer=12, d_model=768, n_head=12, d_head=64, d_inner=3072, n_token=32000,
                       seq_len=512, reuse_len=256, mem_len=384, num_predict=85, batch=4)
# Inference: content stream only, XLNet-Base shape, batch 32, seq 128, no memory.
INFER_BASE = BenchConfig("infer-base", n_layer=12, d_model=768, n_head=12, d_head=64, d_inner=3072, n_token=32000,
                         seq_len=128, reuse_len=0, mem_len=0, num_predict=0, batch=32)
CONFIGS = {c.name: c for c in (BENCH_SMALL, BASE_512, INFER_BASE)}


def make_batch(cfg: BenchConfig, seed: int) -> dict[str, np.ndarray]:
    """One pretraining batch: input_ids, segment_ids, perm_mask [B,L,L] (1 = blocked), target_mapping [B,P,L],
    target [B,P], target_mask [B,P]."""
    rng = np.random.default_rng(seed)
    b, s, p = cfg.batch, cfg.seq_len, cfg.num_predict
    input_ids = rng.integers(5, cfg.n_token, size=(b, s), dtype=np.int64).astype(np.int32)
    # Two segments (A up to a random split, B after), as the original's pairs of sentences.
    split = rng.integers(s // 4, 3 * s // 4, size=(b, 1))
    segment_ids = (np.arange(s)[None, :] >= split).astype(np.int32)
    perm_mask = np.zeros((b, s, s), np.float32)
    target_mapping = np.zeros((b, p, s), np.float32)
    target = np.zeros((b, p), np.int32)
    target_mask = np.ones((b, p), np.float32)
    for i in range(b):
        targets = np.sort(rng.choice(s, size=p, replace=False))
        is_target = np.zeros(s, bool)
        is_target[targets] = True
        # Factorization order: non-targets first (rank -1, visible to all), then the targets in random order.
        rank = np.full(s, -1, np.int64)
        rank[rng.permutation(targets)] = np.arange(p)
        # Target i sees target j iff rank[j] < rank[i] (query stream); non-targets see no target.
        blocked = (rank[None, :] >= rank[:, None]) & is_target[None, :]
        perm_mask[i] = blocked
        target_mapping[i, np.arange(p), targets] = 1.0
        target[i] = input_ids[i, targets]
    return dict(input_ids=input_ids, segment_ids=segment_ids, perm_mask=perm_mask, target_mapping=target_mapping,
                target=target, target_mask=target_mask)


def set_thread_env(threads: int = THREADS) -> None:
    """Before importing TensorFlow/torch: size the OpenMP/MKL pools and TensorFlow's intra-op and inter-op pools
    to ``threads`` (TensorFlow's own default when ``threads`` is the core count)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)
