"""Permutation masks and the tf.data reader, end to end into the model."""

import os

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf.errors import InputError
from xlnet_tf.data import writer as cpd
from xlnet_tf.data import examples as ex
from xlnet_tf.data import manifest as mf
from xlnet_tf.objectives import get_objective
from xlnet_tf.objectives.plm import (local_permutation, make_pretraining_batch, make_pretraining_features,
                                    part_seeds)
from xlnet_tf.data.reader import pretrain_dataset
from xlnet_tf.tokenization import CLS_ID, SEP_ID

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SP_MODEL = os.path.join(ROOT, "data", "spiece.model")
BROWN = os.path.join(ROOT, "data", "corpus", "brown_sample.txt")

# --------------------------------------------------------------------------------------------- permutation


def test_local_permutation_is_block_local():
    seen_first = set()
    ranks = local_permutation(40, 24, 8, tf.constant([0, 7], tf.int64)).numpy()
    for rank in ranks:
        for b in range(3):
            np.testing.assert_array_equal(np.sort(rank[b * 8:(b + 1) * 8]), np.arange(b * 8, (b + 1) * 8))
        # the same offset permutation in every block
        np.testing.assert_array_equal(rank[8:16] - 8, rank[:8])
        seen_first.add(int(rank[0]))
    assert len(seen_first) == 8, "every offset can come first"


def _original_part_mask(inputs, is_masked, rank):
    """The original `_local_perm` in numpy, given the permutation `rank` (index)."""
    non_func = ~np.isin(inputs, [SEP_ID, CLS_ID])
    non_mask = ~is_masked & non_func
    masked_or_func = ~non_mask
    rev_index = np.where(non_mask, -1, rank)
    target = masked_or_func & non_func
    self_rev = np.where(target, rev_index, rev_index + 1)
    return ((self_rev[:, None] <= rev_index[None, :]) & masked_or_func[None, :]).astype(np.float32), target


def _random_example(gen, seq_len, reuse_len, num_masked):
    inputs = gen.integers(10, 8000, size=seq_len)
    sep_a = int(gen.integers(reuse_len + 1, seq_len - 3))
    inputs[[sep_a, seq_len - 2]] = SEP_ID
    inputs[seq_len - 1] = CLS_ID
    inputs[gen.integers(0, seq_len, size=2)] = SEP_ID  # functional tokens can appear anywhere
    is_masked = np.zeros(seq_len, bool)
    is_masked[gen.choice(seq_len, size=num_masked, replace=False)] = True
    seg = np.where(np.arange(seq_len) <= sep_a, 0, 1)
    seg[-1] = 2
    return inputs, is_masked, seg


@tf.function
def _features(inputs, is_masked, seg, seed, seq_len, reuse_len, perm_size, num_predict):
    return make_pretraining_features(inputs, is_masked, seg, seq_len, reuse_len, perm_size, num_predict, seed)


@pytest.mark.parametrize("perm_size", [4, 16])
def test_perm_mask_properties(perm_size):
    L, R, P = 32, 16, 12
    gen = np.random.default_rng(perm_size)
    for trial in range(40):
        num_masked = int(gen.integers(1, 16))
        inputs, is_masked, seg = _random_example(gen, L, R, num_masked)
        seed = tf.constant([trial, 3], tf.int64)
        f = {k: v.numpy() for k, v in _features(inputs, is_masked, seg, seed, L, R, perm_size, P).items()}
        pm = f["perm_mask"]
        func = np.isin(inputs, [SEP_ID, CLS_ID])
        target = is_masked & ~func
        ctx = ~is_masked & ~func
        part = (np.arange(L) >= R).astype(int)

        # the original formula with the same permutation
        seeds = part_seeds(seed)
        ranks = [local_permutation(1, R, perm_size, seeds[0]).numpy()[0],
                 local_permutation(1, L - R, perm_size, seeds[1]).numpy()[0]]
        m0, _ = _original_part_mask(inputs[:R], is_masked[:R], ranks[0])
        m1, _ = _original_part_mask(inputs[R:], is_masked[R:], ranks[1])
        np.testing.assert_array_equal(pm[:R, :R], m0)
        np.testing.assert_array_equal(pm[R:, R:], m1)

        # the reused part never sees the new part; the new part sees all of the reused part
        assert (pm[:R, R:] == 1).all() and (pm[R:, :R] == 0).all()
        for p in (0, 1):
            idx = np.flatnonzero(part == p)
            sub = pm[np.ix_(idx, idx)]
            c, t, fu = ctx[idx], target[idx], func[idx]
            mf_ = t | fu
            assert (sub[:, c] == 0).all(), "everybody sees the context tokens of its part"
            assert (sub[np.ix_(c, mf_)] == 1).all(), "context tokens see no target or functional token"
            assert (np.diag(sub)[t] == 1).all() and (np.diag(sub)[~t] == 0).all()
            # Targets and functional tokens form one acyclic (total) order: the k-th sees exactly the k-1
            # before it, plus all context tokens.
            ord_idx = np.flatnonzero(mf_)
            seen = (sub[np.ix_(ord_idx, ord_idx)] == 0) & ~np.eye(len(ord_idx), dtype=bool)
            counts = seen.sum(1)
            assert sorted(counts.tolist()) == list(range(len(ord_idx))), "a strict total order"
            assert (seen == (counts[None, :] < counts[:, None])).all(), "i sees j iff j comes earlier"
            # block-local: an earlier block comes first
            blocks = ord_idx // perm_size
            assert ((blocks[None, :] < blocks[:, None]) <= seen).all()

        # targets: one-hot rows at target positions (in position order), then zero rows
        pos = np.flatnonzero(target)[:P]
        n = len(pos)
        np.testing.assert_array_equal(f["target_mapping"][:n], np.eye(L, dtype=np.float32)[pos])
        assert (f["target_mapping"][n:] == 0).all()
        np.testing.assert_array_equal(f["target"][:n], inputs[pos])
        assert (f["target"][n:] == 0).all()
        np.testing.assert_array_equal(f["target_mask"], (np.arange(P) < n).astype(np.float32))
        assert not func[pos].any(), "functional tokens are never targets"
        np.testing.assert_array_equal(f["input_ids"], inputs)
        np.testing.assert_array_equal(f["segment_ids"], seg)


def test_batch_equals_examples_structure():
    gen = np.random.default_rng(1)
    exs = [_random_example(gen, 32, 16, int(gen.integers(1, 20))) for _ in range(6)]
    inputs, is_masked, seg = (np.stack(x) for x in zip(*exs))
    out = make_pretraining_batch(inputs, is_masked, seg, 32, 16, 8, 10, tf.constant([4, 4], tf.int64),
                                 perm_mask_dtype=tf.bool)
    assert out["perm_mask"].dtype == tf.bool and out["perm_mask"].shape == (6, 32, 32)
    f32 = make_pretraining_batch(inputs, is_masked, seg, 32, 16, 8, 10, tf.constant([4, 4], tf.int64))
    np.testing.assert_array_equal(out["perm_mask"].numpy(), f32["perm_mask"].numpy() > 0)
    # examples of a batch get different orders
    assert len({f32["perm_mask"].numpy()[i][:16, :16].tobytes() for i in range(6)}) > 1


def test_more_targets_than_num_predict_keeps_the_first():
    gen = np.random.default_rng(0)
    inputs, is_masked, seg = _random_example(gen, 32, 16, 20)
    f = _features(inputs, is_masked, seg, tf.constant([1, 2], tf.int64), 32, 16, 8, 5)
    pos = np.flatnonzero(is_masked & ~np.isin(inputs, [SEP_ID, CLS_ID]))[:5]
    np.testing.assert_array_equal(np.argmax(f["target_mapping"].numpy(), -1), pos)
    assert f["target_mask"].numpy().sum() == 5


# --------------------------------------------------------------------------------------------- reader

SEQ, REUSE, PERM, P, BSZ, CORES = 128, 64, 32, 20, 4, 2


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The whole bundled Brown sample, written with 2 cores per host and bi_data."""
    d = tmp_path_factory.mktemp("pretrain")
    settings = ex.ExampleSettings(seq_len=SEQ, reuse_len=REUSE, bsz_per_host=BSZ, num_core_per_host=CORES,
                                  bi_data=True, num_predict=P)
    cpd.run(cpd.WriterConfig(input_glob=BROWN, sp_path=SP_MODEL, save_dir=str(d), settings=settings,
                             batches_per_shard=300))
    return str(d)


def _records(data_dir, n):
    files = [s["path"] for s in mf.load_manifest(data_dir)["shards"]]
    out = []
    for raw in tf.data.TFRecordDataset(files).take(n):
        feat = tf.train.Example.FromString(raw.numpy()).features.feature
        out.append(np.array(feat["input"].int64_list.value))
    return np.stack(out)


def _dataset(data_dir, **kw):
    args = dict(per_replica_batch_size=BSZ // CORES, seq_len=SEQ, reuse_len=REUSE, perm_size=PERM,
                num_predict=P, bi_data=True, seed=5, objective=get_objective("plm"))
    args.update(kw)
    return pretrain_dataset(data_dir, **args)


def test_dataset_shapes_order_and_determinism(data_dir):
    m = mf.load_manifest(data_dir)
    assert m["num_records"] > 3000 and len(m["shards"]) >= 2
    batches = list(_dataset(data_dir).take(6))
    b = batches[0]
    assert b["input_ids"].shape == (2, SEQ) and b["input_ids"].dtype == tf.int32
    assert b["perm_mask"].shape == (2, SEQ, SEQ) and b["perm_mask"].dtype == tf.float32
    assert b["target_mapping"].shape == (2, P, SEQ) and b["target"].shape == (2, P)
    assert b["target_mask"].dtype == tf.float32 and b["segment_ids"].dtype == tf.int32
    for x in batches:
        np.testing.assert_array_equal(x["target_mask"].numpy(), 1.0)  # the writer gave exactly P targets
    ids = np.concatenate([x["input_ids"].numpy() for x in batches])
    np.testing.assert_array_equal(ids, _records(data_dir, 12)), "records in stream order, no shuffle"
    again = list(_dataset(data_dir).take(6))
    other = list(_dataset(data_dir, seed=6).take(6))
    for x, y, z in zip(batches, again, other):
        for k in x:
            np.testing.assert_array_equal(x[k].numpy(), y[k].numpy())
        np.testing.assert_array_equal(x["input_ids"].numpy(), z["input_ids"].numpy())
    assert any((x["perm_mask"].numpy() != z["perm_mask"].numpy()).any() for x, z in zip(batches, other))


def test_repeat_samples_new_orders(data_dir):
    m = mf.load_manifest(data_dir)
    # an epoch later, the same record gets another factorisation order
    first = next(iter(_dataset(data_dir).unbatch().take(1)))
    later = next(iter(_dataset(data_dir).unbatch().skip(m["num_records"]).take(1)))
    np.testing.assert_array_equal(first["input_ids"].numpy(), later["input_ids"].numpy())
    assert (first["perm_mask"].numpy() != later["perm_mask"].numpy()).any()


def test_reader_refuses_mismatched_settings(data_dir):
    with pytest.raises(ValueError, match="perm_size=48"):
        _dataset(data_dir, perm_size=48)
    with pytest.raises(ValueError, match="per_replica_batch_size=4"):
        _dataset(data_dir, per_replica_batch_size=4)
    with pytest.raises(ValueError, match=r"seq_len: data was written with 128, training uses 256(.|\n)*bi_data"):
        _dataset(data_dir, seq_len=256, reuse_len=128, bi_data=False)


def test_check_manifest_names_every_field(data_dir):
    m = mf.load_manifest(data_dir)
    mf.check_manifest(m, seq_len=SEQ, reuse_len=REUSE, bsz_per_host=BSZ, num_core_per_host=CORES, bi_data=True,
                      mask_alpha=6, mask_beta=1, num_predict=P, uncased=False, use_eod=True, vocab_size=8000,
                      sp_sha256=m["params"]["sp_sha256"])
    with pytest.raises(ValueError) as e:
        mf.check_manifest(m, num_predict=85, uncased=True, sp_sha256="0" * 64, mask_alpha=None)
    msg = str(e.value)
    assert "num_predict" in msg and "uncased" in msg and "sp_sha256" in msg and "mask_alpha" not in msg
    with pytest.raises(ValueError, match="unknown"):
        mf.check_manifest(m, perm_size=32)


def test_input_pipelines_get_contiguous_shards(data_dir):
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    m = mf.load_manifest(data_dir)
    second = m["shards"][len(m["shards"]) // 2]
    files = [second["path"]]
    first_rec = next(iter(tf.data.TFRecordDataset(files)))
    want = np.array(tf.train.Example.FromString(first_rec.numpy()).features.feature["input"].int64_list.value)
    b = next(iter(_dataset(data_dir, input_context=ctx)))
    np.testing.assert_array_equal(b["input_ids"].numpy()[0], want)
    bad = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=4)
    with pytest.raises(ValueError, match="num_core_per_host=4"):
        _dataset(data_dir, input_context=bad)
    # Each pipeline reads shards of its own: fewer shards than pipelines is refused, saying how to write them.
    shards, batches = len(m["shards"]), m["num_batches"]
    many = tf.distribute.InputContext(num_input_pipelines=shards + 1, input_pipeline_id=0,
                                      num_replicas_in_sync=CORES * (shards + 1))
    with pytest.raises(ValueError, match=rf"{shards} non-empty shards \({batches} host batches\) for {shards + 1} "
                                         rf"input pipelines.* --batches_per_shard={batches // (shards + 1)} or less"):
        _dataset(data_dir, input_context=many)


def test_replica_c_gets_core_c_rows(data_dir):
    """distribute_datasets_from_function hands consecutive per-replica batches round-robin to the replicas."""
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2
    strategy = tf.distribute.MirroredStrategy(devices)

    def fn(ctx):
        return _dataset(data_dir, per_replica_batch_size=ctx.get_per_replica_batch_size(BSZ), input_context=ctx)

    it = iter(strategy.distribute_datasets_from_function(fn))
    records = _records(data_dir, 3 * BSZ)
    for step in range(3):
        batch = next(it)
        per_replica = strategy.experimental_local_results(batch["input_ids"])
        for c in range(CORES):
            rows = records[step * BSZ + c * 2:step * BSZ + c * 2 + 2]
            np.testing.assert_array_equal(per_replica[c].numpy(), rows)
            # bi_data: the replica's second row is its first row's stream read backward
            assert not np.array_equal(rows[0][:REUSE], rows[1][:REUSE])


def test_end_to_end_into_the_model(data_dir):
    from xlnet_tf.config import XLNetConfig
    from xlnet_tf.models.xlnet import XLNetPretrainer

    cfg = XLNetConfig.from_json(os.path.join(ROOT, "configs", "tiny.json"), bi_data=True, mem_len=REUSE,
                                reuse_len=REUSE, dropout=0.0, dropatt=0.0)
    model = XLNetPretrainer(cfg)
    mems = None
    for batch in _dataset(data_dir).take(2):
        out = model(dict(batch, mems=mems) if mems is not None else batch, training=False)
        logits = out["lm_logits"].numpy()
        assert logits.shape == (2, P, 8000) and np.isfinite(logits).all()
        mems = out["new_mems"]
    # the model's prediction at a target depends on the permutation: a loss can be computed from the batch
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(batch["target"], out["lm_logits"])
    assert np.isfinite((loss * batch["target_mask"]).numpy().sum())


def test_skip_batches_resumes_exactly(data_dir):
    """A resumed run (skip_batches) sees the same batches, factorisation orders included, as an uninterrupted one."""
    m = mf.load_manifest(data_dir)
    first_shard = m["shards"][0]["num_records"] // 2  # batches of 2 in the first file
    for skip in (3, first_shard + 1):
        want = list(_dataset(data_dir).skip(skip).take(2))
        got = list(_dataset(data_dir, skip_batches=skip).take(2))
        for x, y in zip(want, got):
            for k in x:
                np.testing.assert_array_equal(x[k].numpy(), y[k].numpy())
    # past the end of an epoch: records (skip*2) mod N on, with the batch index (seed) of the uninterrupted run
    n = m["num_records"]
    skip = n // 2 + 5
    b = next(iter(_dataset(data_dir, skip_batches=skip)))
    files = [s["path"] for s in m["shards"]]
    raw = next(iter(tf.data.TFRecordDataset(files).skip((2 * skip) % n)))
    feat = tf.io.parse_single_example(raw, {k: tf.io.FixedLenFeature([SEQ], tf.int64)
                                            for k in ("input", "is_masked", "seg_id")})
    raw2 = next(iter(tf.data.TFRecordDataset(files).skip((2 * skip + 1) % n)))
    feat2 = tf.io.parse_single_example(raw2, {k: tf.io.FixedLenFeature([SEQ], tf.int64)
                                              for k in ("input", "is_masked", "seg_id")})
    want = make_pretraining_batch(*(tf.stack([feat[k], feat2[k]]) for k in ("input", "is_masked", "seg_id")),
                                  SEQ, REUSE, PERM, P, tf.constant([5, skip], tf.int64))
    for k in want:
        np.testing.assert_array_equal(b[k].numpy(), want[k].numpy())
    assert len(list(_dataset(data_dir, skip_batches=n, repeat=False))) == 0


def test_damaged_data_is_named_at_start_up(data_dir, tmp_path):
    """A missing or truncated shard and a damaged manifest.json are errors naming the file when training starts;
    a shard with flipped bits (same size) is found by find_damaged_shards, which a DataLossError triggers."""
    import shutil

    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    shards = mf.load_manifest(str(copy))["shards"]
    assert len(shards) >= 2 and all(s["bytes"] == os.path.getsize(s["path"]) for s in shards)
    first, second = shards[0]["path"], shards[1]["path"]
    data = open(first, "rb").read()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    open(first, "wb").write(bytes(flipped))
    damaged = mf.find_damaged_shards([s["path"] for s in shards])
    assert len(damaged) == 1 and damaged[0].startswith(f"{first}: ") and "corrupted record" in damaged[0]
    open(first, "wb").write(data[: len(data) // 2])
    os.remove(second)
    # InputErrors: the tools print them as one line, without a traceback
    with pytest.raises(InputError) as error:
        mf.load_manifest(str(copy))
    assert f"{first}: {len(data) // 2} bytes, written with {len(data)}" in str(error.value)
    assert f"{second}: missing" in str(error.value)
    with open(copy / "manifest.json", "w") as f:
        f.write('{"format": "xlnet_tf.pretraining_data/1", "shards": [')
    with pytest.raises(InputError, match=r"manifest\.json: not a valid JSON file"):
        mf.load_manifest(str(copy))


def test_package_exports_the_reader_function():
    """``from xlnet_tf.data import pretrain_dataset`` is the function (no module of that name shadows it)."""
    from xlnet_tf.data import pretrain_dataset as exported

    assert exported is pretrain_dataset and callable(exported)
