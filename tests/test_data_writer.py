"""The TFRecord writer: records, manifest, bad input, task sharding, resume after a kill."""

import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from background import background, resource
from xlnet_tf.data import writer as cpd
from xlnet_tf.data import examples as ex
from xlnet_tf.data import manifest as mf
from xlnet_tf.errors import InputError
from xlnet_tf.tokenization import CLS_ID, EOD_ID, SEP_ID, XLNetTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SP_MODEL = os.path.join(ROOT, "data", "spiece.model")
BROWN = os.path.join(ROOT, "data", "corpus", "brown_sample.txt")
SETTINGS = ex.ExampleSettings(seq_len=32, reuse_len=16, bsz_per_host=4, num_core_per_host=2, bi_data=True,
                              mask_alpha=6, mask_beta=1, num_predict=6)


def brown_lines(n):
    with open(BROWN, encoding="utf-8") as f:
        return f.read().splitlines()[:n]


def write_corpus(directory):
    directory.mkdir()
    lines = brown_lines(400)
    (directory / "a.txt").write_text("\n".join(lines[:200]) + "\n", encoding="utf-8")
    (directory / "b.txt").write_text("\n".join(lines[200:]) + "\n", encoding="utf-8")
    return directory


def cli_flags(corpus_glob, save_dir, **kw):
    """``python -m xlnet_tf.cli.create_data``'s flags for what ``config`` sets (SETTINGS; ``kw``: writer flags)."""
    s = SETTINGS
    flags = dict(input_glob=corpus_glob, sp_path=SP_MODEL, save_dir=save_dir, seq_len=s.seq_len,
                 reuse_len=s.reuse_len, bsz_per_host=s.bsz_per_host, num_core_per_host=s.num_core_per_host,
                 bi_data=s.bi_data, mask_alpha=s.mask_alpha, mask_beta=s.mask_beta, num_predict=s.num_predict,
                 batches_per_shard=40, num_workers=1)
    flags.update(kw)
    return [f"--{name}={value}" for name, value in flags.items()]


def create_data(*args, timeout=120):
    """The command line as a user runs it; its finished process (output captured)."""
    return subprocess.run([sys.executable, "-m", "xlnet_tf.cli.create_data", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@resource
def reference_run(tmp_path):
    """The corpus (400 lines of the Brown sample in two files) and its data written by the command line with
    ``config``'s settings, uninterrupted: made by a process on the background thread, so that the killed runs'
    tests there compare with it while the tests in front read it (``corpus``, ``written``)."""
    corpus = write_corpus(tmp_path / "corpus")
    done = create_data(*cli_flags(corpus / "*.txt", tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-3000:]
    return corpus, tmp_path / "out"


@pytest.fixture(scope="module")
def corpus():
    return reference_run.value()[0]


def config(corpus_glob, save_dir, **kw):
    settings = kw.pop("settings", SETTINGS)
    return cpd.WriterConfig(input_glob=str(corpus_glob), sp_path=SP_MODEL, save_dir=str(save_dir),
                            settings=settings, batches_per_shard=kw.pop("batches_per_shard", 40), **kw)


def read_records(path):
    out = []
    for raw in tf.data.TFRecordDataset(path):
        f = tf.train.Example.FromString(raw.numpy()).features.feature
        out.append({k: np.array(f[k].int64_list.value) for k in ("input", "is_masked", "seg_id", "label")})
    return out


def raw_records(path):
    """A TFRecord file's records, as bytes. Read without TensorFlow, which a background body may not run: each
    record is its length (8 bytes, little-endian), 4 bytes of its CRC, the record and 4 bytes of the record's CRC
    (the CRCs are not checked: the tests compare the bytes themselves)."""
    records = []
    with open(path, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            record = f.read(length + 4)[:length]
            assert len(header) == 12 and len(record) == length, f"{path}: a record cut short"
            records.append(record)
    return records


def shard_bytes(save_dir):
    d = os.path.join(save_dir, "tfrecords")
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)) if n.endswith(".tfrecord")}


@pytest.fixture(scope="module")
def written():
    """The reference run's data directory and the manifest it wrote."""
    save_dir = reference_run.value()[1]
    with open(save_dir / "manifest.json", encoding="utf-8") as f:
        return save_dir, json.load(f)


def test_records_and_manifest(written):
    save_dir, manifest = written
    loaded = mf.load_manifest(str(save_dir))
    assert loaded["complete"] and loaded["num_records"] == manifest["num_records"] > 0
    p = loaded["params"]
    for key, want in dict(seq_len=32, reuse_len=16, bsz_per_host=4, num_core_per_host=2, bi_data=True,
                          mask_alpha=6, mask_beta=1, num_predict=6, uncased=False, use_eod=True,
                          vocab_size=8000).items():
        assert p[key] == want, key
    assert p["sp_sha256"] == XLNetTokenizer(SP_MODEL).fingerprint()
    total = 0
    files = [s["file"] for s in loaded["shards"]]
    assert files == sorted(files), "shards listed in stream order"
    for shard in loaded["shards"]:
        records = read_records(shard["path"])
        assert len(records) == shard["num_records"] == shard["num_batches"] * 4
        total += len(records)
        for r in records:
            assert len(r["input"]) == 32 and r["input"][-1] == CLS_ID and r["input"][-2] == SEP_ID
            assert r["is_masked"].sum() == 6, "exactly num_predict targets"
            assert not r["is_masked"][np.isin(r["input"], [SEP_ID, CLS_ID])].any()
            assert set(r["seg_id"][:16]) == {0} and r["seg_id"][-1] == 2 and r["label"][0] in (0, 1)
    assert total == loaded["num_records"]
    assert not any(n.startswith(".") for n in os.listdir(os.path.join(save_dir, "tfrecords")))


def test_stream_rows_continue_and_bi_data_rows_reverse(written, corpus):
    """Row r of host batch k+1 continues row r of batch k; per core, rows [fwd ; bwd] with bwd = reversed fwd."""
    save_dir, manifest = written
    m = mf.load_manifest(str(save_dir))
    records = [r for s in m["shards"] for r in read_records(s["path"])]
    num_batches = len(records) // 4
    rows = [np.concatenate([records[b * 4 + r]["input"][:16] for b in range(num_batches)]) for r in range(4)]
    # the task's stream, rebuilt independently from the tokenizer
    tok = XLNetTokenizer(SP_MODEL)
    files = [cpd.tokenize_file(str(corpus / n), tok, True, 10**6) for n in ("a.txt", "b.txt")]
    stream, _, order = cpd.build_stream(files, 0, 0)
    assert EOD_ID in stream
    steps = len(stream) // 2
    fwd = stream[:2 * steps].reshape(2, steps)
    n = num_batches * 16
    np.testing.assert_array_equal(rows[0], fwd[0][:n])          # core 0 forward
    np.testing.assert_array_equal(rows[1], fwd[0][::-1][:n])    # core 0 backward: the same row reversed
    np.testing.assert_array_equal(rows[2], fwd[1][:n])          # core 1 forward
    np.testing.assert_array_equal(rows[3], fwd[1][::-1][:n])


def test_deterministic_rerun_skips_done_shards_and_refuses_other_settings(written, corpus, tmp_path):
    save_dir, _ = written
    before = shard_bytes(save_dir)
    cpd.run(config(corpus / "*.txt", save_dir))
    assert shard_bytes(save_dir) == before
    with pytest.raises(ValueError, match="seed"):
        cpd.run(config(corpus / "*.txt", save_dir, seed=1))


def test_min_shards_splits_the_same_records_into_a_shard_per_input_pipeline(written, corpus, tmp_path):
    """Data that run_pretrain.py writes for N input pipelines (workers) has N shards at least, each pipeline reading
    its own: the same records in the same order as any other split of the stream."""
    save_dir, manifest = written
    pipelines = len(manifest["shards"]) + 3  # more than --batches_per_shard (40 here) makes
    split = cpd.run(config(corpus / "*.txt", tmp_path / "split", min_shards=pipelines))
    assert len(split["shards"]) >= pipelines and split["num_batches"] == manifest["num_batches"]
    assert split["writer"]["batches_per_shard"] == manifest["num_batches"] // pipelines

    def stream(d):
        return [r for name, data in shard_bytes(d).items() for r in raw_records(os.path.join(d, "tfrecords", name))]
    assert stream(tmp_path / "split") == stream(save_dir)


def test_resume_after_simulated_crash(written, corpus, tmp_path):
    save_dir, manifest = written
    reference = shard_bytes(save_dir)
    copy = tmp_path / "copy"
    (copy / "tfrecords").mkdir(parents=True)
    names = sorted(reference)
    assert len(names) >= 3
    for n in names[:1]:  # only the first shard finished
        (copy / "tfrecords" / n).write_bytes(reference[n])
        side = os.path.join(save_dir, "tfrecords", n + ".json")
        (copy / "tfrecords" / (n + ".json")).write_text(open(side).read())
    # killed between sidecar and rename, and in the middle of a shard
    side = os.path.join(save_dir, "tfrecords", names[1] + ".json")
    (copy / "tfrecords" / (names[1] + ".json")).write_text(open(side).read())
    (copy / "tfrecords" / f".{names[2]}.tmp-999").write_bytes(reference[names[2]][:100])
    m = cpd.run(config(corpus / "*.txt", copy))
    assert shard_bytes(copy) == reference
    assert m["num_records"] == manifest["num_records"]
    assert not any(n.startswith(".") for n in os.listdir(copy / "tfrecords"))


# `python -m xlnet_tf.cli.create_data ARGS`, started in a session of its own, that sends SIGINT to its process group
# (the CLI and its pool workers) as the second finished shard is reported to it, while the workers write the next
# ones.
# (Killed from inside, at a fixed point: a kill from here would race 85 shards of ~3 ms each against polling.)
_KILLED_AT_SECOND_SHARD = """
import os, runpy, signal, sys
from xlnet_tf.progress_lines import Progress
report, done = Progress.advance, []
def report_or_die(self, n=1, *, force=False, note=""):
    report(self, n, force=force, note=note)
    done.append(force)
    if done.count(True) == 2:
        os.killpg(0, signal.SIGINT)  # a terminal's Ctrl-C: to the writer and its workers
Progress.advance = report_or_die
sys.argv[0] = "xlnet_tf.cli.create_data"
runpy.run_module("xlnet_tf.cli.create_data", run_name="__main__", alter_sys=True)
"""


@pytest.mark.multiprocess
@pytest.mark.slow
@background
def test_resume_after_killed_parallel_run(tmp_path):
    """Stop a real 2-worker CLI run mid-way with Ctrl-C (one line, exit 130), rerun the same command: its records
    are byte-identical to an uninterrupted run's."""
    corpus, reference_dir = reference_run.value()
    out = tmp_path / "killed"
    args = cli_flags(corpus / "*.txt", out, batches_per_shard=4, num_workers=2)
    # The reference used 40 batches per shard; this run's plan differs, so compare records, not files.
    killed = subprocess.run([sys.executable, "-c", _KILLED_AT_SECOND_SHARD, *args], cwd=ROOT,
                            capture_output=True, text=True, start_new_session=True, timeout=120)
    # One line, not a traceback per process, nor multiprocessing's warning of semaphores left behind.
    assert killed.returncode == 130 and killed.stderr.splitlines()[-1:] == [
        "xlnet_tf.cli.create_data: stopped by Ctrl-C"], killed.stderr[-3000:]
    assert "Traceback" not in killed.stderr and "leaked" not in killed.stderr, killed.stderr[-3000:]
    assert not (out / "manifest.json").exists(), "the manifest is written last"
    finished = [n for n in os.listdir(out / "tfrecords") if n.endswith(".tfrecord")]
    rerun = create_data(*args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    m = mf.load_manifest(str(out))
    assert 2 <= len(finished) < len(m["shards"]) == 85, (len(finished), len(m["shards"]))
    # Record for record, byte for byte: the killed run's shards were written by other processes than the
    # reference, with other hash seeds, which set the order of an Example's features unless it is serialized
    # deterministically.
    got = [r for s in m["shards"] for r in raw_records(s["path"])]
    ref = [r for s in mf.load_manifest(str(reference_dir))["shards"] for r in raw_records(s["path"])]
    assert len(got) == len(ref) == m["num_records"]
    assert not any(n.startswith(".") for n in os.listdir(out / "tfrecords")), "no temporary file left"
    differ = [i for i, (a, b) in enumerate(zip(got, ref)) if a != b]
    assert not differ, f"{len(differ)} of {len(ref)} records differ in their bytes (the first: {differ[:5]})"


def test_bad_input_is_reported_and_skipped(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    good = brown_lines(120)
    (d / "good.txt").write_text("\n".join(good) + "\n", encoding="utf-8")
    (d / "bad_utf8.txt").write_bytes(("\n".join(good[:2]) + "\n").encode() + b"caf\xe9 \xff\xfe broken\n"
                                     + ("\n".join(good[2:40]) + "\n").encode())
    (d / "empty.txt").write_bytes(b"")
    (d / "blank.txt").write_text("\n\n  \n")
    (d / "huge.txt").write_bytes(("\n".join(good[:3]) + "\n").encode() + b"x" * 5000 + b"\n"
                                 + ("\n".join(good[3:30]) + "\n").encode())
    (d / "huge_no_newline.txt").write_bytes(b"y" * 7000)
    m = cpd.run(config(d / "*.txt", tmp_path / "out", max_line_bytes=1000))
    report = m["input_report"]["pass0-task0"]
    assert report["files"] == 6 and report["files_used"] == 3
    assert sorted(os.path.basename(f) for f in report["files_without_text"]) == \
        ["blank.txt", "empty.txt", "huge_no_newline.txt"]
    bad = "\n".join(report["bad_examples"])
    assert "bad_utf8.txt:3: invalid UTF-8" in bad
    assert "huge.txt:4: line longer than --max_line_bytes=1000" in bad
    assert "huge_no_newline.txt:1: line longer" in bad
    assert "empty.txt:0: empty file" in bad
    assert report["bad_lines"] == 6
    assert m["num_records"] > 0
    # the skipped lines are gone, every other line kept
    tok = XLNetTokenizer(SP_MODEL)
    got = cpd.tokenize_file(str(d / "bad_utf8.txt"), tok, True, 1000)
    want = [i for line in good[:40] for i in tok.encode_ids(line)] + [EOD_ID]
    np.testing.assert_array_equal(got.tokens, want)


def test_documents_get_one_eod_and_sentence_ids_flip(tmp_path):
    tok = XLNetTokenizer(SP_MODEL)
    p = tmp_path / "doc.txt"
    p.write_text("\n\nFirst sentence here.\nSecond one.\n\n\n\nNew document.\n", encoding="utf-8")
    t = cpd.tokenize_file(str(p), tok, True, 1000)
    s1, s2, s3 = (tok.encode_ids(x) for x in ("First sentence here.", "Second one.", "New document."))
    np.testing.assert_array_equal(t.tokens, s1 + s2 + [EOD_ID] + s3 + [EOD_ID])
    sid = t.sent_ids.astype(int).tolist()
    n1, n2, n3 = len(s1), len(s2), len(s3)
    assert sid == [1] * n1 + [0] * (n2 + 1) + [1] * (n3 + 1), "<eod> joins its document's last sentence"
    t = cpd.tokenize_file(str(p), tok, False, 1000)
    assert EOD_ID not in t.tokens.tolist()


def _original_create_data(lines: list, tok: XLNetTokenizer) -> tuple:
    """The original data_utils.py's ``_create_data`` loop over one file's lines (use_eod), ids and sentence ids:
    a blank line is one <eod>; the id flips after every line, a line of no tokens included."""
    data, sids, sent_id = [], [], True
    for line in lines:
        if not line.strip():
            sent_id = not sent_id
            cur = [EOD_ID]
        else:
            cur = tok.encode_ids(line.strip())
        data.extend(cur)
        sids.extend([sent_id] * len(cur))
        sent_id = not sent_id
    return data, sids


def test_tokenised_lines_equal_the_originals_around_control_and_zero_width_characters(tmp_path):
    """Two lines the original reads otherwise than SentencePiece alone: "1\x01," (the normaliser deletes the
    control character, leaving the piece "▁1,", which the digit-comma fix splits) and a line of zero-width space
    only (no tokens: the sentence id still flips, so the sentences around it share one)."""
    tok = XLNetTokenizer(SP_MODEL)
    lines = ["It cost 1\x01, then.", "Hello there.", "\u200b", "Good day, 1,000 of them.", "", "Next."]
    assert tok.encode_ids(lines[0]) != tok.sp.EncodeAsIds(lines[0]) and tok.encode_ids(lines[2]) == []
    p = tmp_path / "doc.txt"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t = cpd.tokenize_file(str(p), tok, True, 1000)
    data, sids = _original_create_data(lines, tok)
    assert t.tokens.tolist() == data + [EOD_ID]  # the end of the file ends its document
    assert t.sent_ids.tolist() == sids + [sids[-1]]


def test_task_sharding_and_incomplete_manifest(corpus, tmp_path):
    out = tmp_path / "tasks"
    cpd.run(config(corpus / "*.txt", out, task=1, num_task=2))
    with pytest.raises(ValueError, match="pass 0 task 0"):
        mf.load_manifest(str(out))
    cpd.run(config(corpus / "*.txt", out, task=0, num_task=2))
    m = mf.load_manifest(str(out))
    assert m["complete"] and [s["task"] for s in m["shards"]] == sorted(s["task"] for s in m["shards"])
    assert {s["task"] for s in m["shards"]} == {0, 1}
    assert m["input_report"]["pass0-task0"]["file_order"][0].endswith("a.txt")
    assert m["input_report"]["pass0-task1"]["file_order"][0].endswith("b.txt")


def test_num_passes_writes_each_pass_of_the_text_with_other_masks(written, corpus, tmp_path):
    """The original data_utils.py's --num_passes=N: N passes in one data set, as N runs of --pass_id would write."""
    save_dir, one_pass = written
    manifest = cpd.run(config(corpus / "*.txt", tmp_path, num_passes=2))
    assert manifest["passes"] == [0, 1] and manifest["complete"]
    assert manifest["num_records"] == 2 * one_pass["num_records"]
    shards = shard_bytes(tmp_path)
    first = {n: b for n, b in shards.items() if "-pass0-" in n}
    assert first == shard_bytes(save_dir)
    second = [b for n, b in shards.items() if "-pass1-" in n]
    assert len(second) == len(first) and b"".join(second) != b"".join(first.values())


def test_writer_refuses_impossible_settings(corpus, tmp_path):
    bad = dataclasses.replace(SETTINGS, num_predict=40)
    with pytest.raises(ValueError, match="--num_predict"):
        cpd.run(config(corpus / "*.txt", tmp_path, settings=bad))
    with pytest.raises(ValueError, match="--task"):
        cpd.run(config(corpus / "*.txt", tmp_path, task=2, num_task=2))
    with pytest.raises(ValueError, match="matches no file"):
        cpd.run(config(tmp_path / "nothing*.txt", tmp_path))
    with pytest.raises(ValueError, match=r"--input_glob: '.*a_typo\*\.txt' matches no file"):  # one of several
        cpd.run(config(f"{corpus / 'a.txt'},{tmp_path / 'a_typo*.txt'}", tmp_path))


def test_too_little_text_is_an_error_that_says_why(tmp_path):
    """A corpus too short for one host batch writes no manifest (no 'complete' data set of 0 records) and says
    how much text one batch needs."""
    (tmp_path / "short.txt").write_text("A few words.\nNot enough for a batch.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"produced no pretraining records: \d+ tokens from 1 files .*\(about 64 "
                                         r"tokens\)\. Give more text"):
        cpd.run(config(tmp_path / "short.txt", tmp_path / "out"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="0 tokens from 1 files"):
        cpd.run(config(tmp_path / "empty.txt", tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_surprising_num_predict_is_warned_about(monkeypatch):
    warnings = []
    monkeypatch.setattr(ex.logging, "warning", lambda message, *args: warnings.append(message % args))
    dataclasses.replace(SETTINGS, seq_len=128, reuse_len=64, num_predict=100).validate()
    assert len(warnings) == 1 and "--num_predict=100 makes 78% of the 128 tokens prediction targets" in warnings[0]


def test_cli_refuses_with_flag_name(tmp_path):
    r = subprocess.run([sys.executable, "-m", "xlnet_tf.cli.create_data", f"--input_glob={BROWN}",
                        f"--sp_path={SP_MODEL}", f"--save_dir={tmp_path}", "--seq_len=64", "--reuse_len=32",
                        "--num_predict=85", "--bsz_per_host=4"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "--num_predict=85" in r.stderr + r.stdout
    assert not os.path.exists(tmp_path / "manifest.json")


def test_manifest_json_is_plain(written):
    save_dir, _ = written
    with open(os.path.join(save_dir, "manifest.json")) as f:
        data = json.load(f)
    assert all(not os.path.isabs(s["file"]) for s in data["shards"]), "relocatable: paths relative to save_dir"


# The command line, stopped as Ctrl-C would stop it (KeyboardInterrupt) as it starts the first shard of pass 1.
_KILLED_IN_PASS_1 = """
import runpy, sys
from xlnet_tf.data import writer
write = writer.write_shard
def killed_in_pass_1(save_dir, job, *args, **kw):
    if "-pass1-" in job.file:
        raise KeyboardInterrupt
    return write(save_dir, job, *args, **kw)
writer.write_shard = killed_in_pass_1
sys.argv[0] = "xlnet_tf.cli.create_data"
runpy.run_module("xlnet_tf.cli.create_data", run_name="__main__", alter_sys=True)
"""


@background
def test_a_run_killed_between_passes_is_incomplete_and_training_names_the_command_that_completes_it(tmp_path):
    """--num_passes=2 stopped during pass 1 leaves a manifest marked incomplete (it was complete with pass 0 only,
    and training used half the data); the error names the missing pass and the command that writes it."""
    corpus, reference_dir = reference_run.value()
    out = tmp_path / "passes"
    killed = subprocess.run([sys.executable, "-c", _KILLED_IN_PASS_1, *cli_flags(corpus / "*.txt", out, num_passes=2)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == 130, killed.stderr[-3000:]
    with open(out / "manifest.json") as f:
        written_manifest = json.load(f)
    assert not written_manifest["complete"] and written_manifest["missing_tasks"] == ["pass 1 task 0"]
    with pytest.raises(InputError, match="writer tasks missing: pass 1 task 0; write them by rerunning") as error:
        mf.load_manifest(str(out))
    command = str(error.value).split("python -m ", 1)[1]
    assert "--pass_id=0 --num_passes=2" in command and f"--save_dir={out}" in command
    done = subprocess.run([sys.executable, "-m", *shlex.split(command)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    m = mf.load_manifest(str(out))
    one_pass = mf.load_manifest(str(reference_dir))
    assert m["complete"] and m["passes"] == [0, 1] and m["num_records"] == 2 * one_pass["num_records"]


def test_manifests_written_before_passes_were_recorded_still_load(written, tmp_path):
    """Parts and manifests without ``passes_requested`` (older writers) count only the passes they hold."""
    import shutil

    save_dir, manifest = written
    old = tmp_path / "old"
    shutil.copytree(save_dir, old)
    for path in [*(old / "parts").iterdir(), old / "manifest.json"]:
        data = json.loads(path.read_text())
        data.pop("passes_requested")
        data["complete"] = path.name != "manifest.json"  # a stale manifest: load_manifest merges the parts
        path.write_text(json.dumps(data))
    m = mf.load_manifest(str(old))
    assert m["complete"] and m["num_records"] == manifest["num_records"]


def test_rerun_rewrites_a_truncated_shard(written, corpus, tmp_path, caplog):
    """A shard cut short after it was written (a partial copy) is refused by training, which says that a rerun
    repairs it, and the rerun rewrites it (it used to trust any file that existed)."""
    import shutil

    save_dir, _ = written
    reference = shard_bytes(save_dir)
    copy = tmp_path / "copy"
    shutil.copytree(save_dir, copy)
    name = sorted(reference)[1]
    (copy / "tfrecords" / name).write_bytes(reference[name][:1000])
    with pytest.raises(InputError, match=r"truncated or replaced\)\nrerunning the create_data command"):
        mf.load_manifest(str(copy))
    with caplog.at_level("WARNING", logger="xlnet_tf.data"):
        cpd.run(config(corpus / "*.txt", copy))
    assert f"rewriting tfrecords/{name}: 1000 bytes, written with {len(reference[name])}" in caplog.text
    assert shard_bytes(copy) == reference
    assert mf.load_manifest(str(copy))["complete"]


def test_rerun_accepts_shards_whose_sidecar_records_the_batches_per_shard_flag(corpus, tmp_path, caplog):
    """Writers before min_shards recorded the --batches_per_shard flag (500) in each sidecar where the current one
    records the value it used (the text's 500 batches or fewer): the same shards, which an identical rerun skips.
    A shard that holds other host batches is still refused."""
    out = tmp_path / "old"
    first = cpd.run(config(corpus / "a.txt", out, batches_per_shard=500))
    (shard,) = first["shards"]
    total = shard["num_batches"]
    assert total < 500 and first["writer"]["batches_per_shard"] == total
    for path in [out / (shard["file"] + ".json"), *(out / "parts").iterdir(), out / "manifest.json"]:
        data = json.loads(path.read_text())
        (data["writer"] if "writer" in data else data)["batches_per_shard"] = 500  # as the older writer left it
        path.write_text(json.dumps(data))
    before = shard_bytes(out)
    with caplog.at_level("INFO", logger="xlnet_tf.data"):
        again = cpd.run(config(corpus / "a.txt", out, batches_per_shard=500))
    assert "1 already written, 0 to write" in caplog.text
    assert shard_bytes(out) == before
    assert again["writer"]["batches_per_shard"] == total
    assert mf.load_manifest(str(out))["writer"]["batches_per_shard"] == total
    with pytest.raises(InputError, match=rf"holds host batches \[0, {total}\) where this run plans \[0, 4\)"):
        cpd.run(config(corpus / "a.txt", out, batches_per_shard=4))
    assert shard_bytes(out) == before


def test_shards_of_other_tokens_are_not_mixed_with_this_runs(corpus, tmp_path, caplog):
    """A shard records the digest of the token stream it was cut from. Resuming over shards of other tokens of the
    same text (a killed run of an xlnet_tf that tokenised some lines otherwise, or another sentencepiece) wrote the
    missing shards from this run's tokens beside them: two datasets in one, in silence. Refused now; finished data
    of an older writer (no digest) is still taken as it is by an identical rerun."""
    out = tmp_path / "data"
    first = cpd.run(config(corpus / "*.txt", out, batches_per_shard=2))
    sidecars = sorted((out / "tfrecords").glob("*.tfrecord.json"))
    assert len(sidecars) > 2 and all("stream_sha256" in json.loads(p.read_text()) for p in sidecars)
    for path in sidecars:  # as the older writer left them
        data = json.loads(path.read_text())
        del data["stream_sha256"]
        path.write_text(json.dumps(data))
    before = shard_bytes(out)
    with caplog.at_level("INFO", logger="xlnet_tf.data"):
        cpd.run(config(corpus / "*.txt", out, batches_per_shard=2))
    assert f"{len(sidecars)} already written, 0 to write" in caplog.text and shard_bytes(out) == before
    with pytest.raises(InputError, match="older than 2026-12-01"):  # another pass beside them
        cpd.run(config(corpus / "*.txt", out, batches_per_shard=2, pass_id=1))
    assert not list((out / "tfrecords").glob("train-pass1-*"))
    last = out / first["shards"][-1]["file"]
    os.remove(last)  # killed before its last shard
    with pytest.raises(InputError, match=r"shard\(s\) written by an xlnet_tf older than 2026-12-01 .* and 1 to "
                                         r"write: they would mix two tokenisations"):
        cpd.run(config(corpus / "*.txt", out, batches_per_shard=2))
    assert not last.exists()
    # a digest of other tokens (another tokenisation) is refused too
    shutil.rmtree(out)
    cpd.run(config(corpus / "*.txt", out, batches_per_shard=2))
    data = json.loads(sidecars[0].read_text())
    data["stream_sha256"] = "0" * 64
    sidecars[0].write_text(json.dumps(data))
    with pytest.raises(InputError, match="from other tokens of the same text"):
        cpd.run(config(corpus / "*.txt", out, batches_per_shard=2))


def test_a_failed_shard_write_removes_its_temporary_file(corpus, tmp_path, monkeypatch):
    """A write error (a full disk) leaves no partial shard filling the disk until a rerun."""
    calls = []
    serialize = cpd.serialize_example

    def disk_full(tf_module, e):
        calls.append(1)
        if len(calls) > 20:
            raise OSError(28, "No space left on device")
        return serialize(tf_module, e)

    monkeypatch.setattr(cpd, "serialize_example", disk_full)
    with pytest.raises(OSError, match="No space left"):
        cpd.run(config(corpus / "*.txt", tmp_path / "full"))
    assert not [n for n in os.listdir(tmp_path / "full" / "tfrecords") if ".tmp-" in n]


def test_the_stream_copy_for_workers_is_removed_after_a_failure_and_by_a_rerun(written, corpus, tmp_path,
                                                                                monkeypatch):
    """save_dir/.work (the token stream for the shard workers, ~1.2x the corpus) does not outlive the run: not
    after a failure, nor when a killed run left it and its rerun has nothing to write."""
    import shutil

    def no_pool(n, initializer, initargs):
        assert initializer is cpd._init_shard_worker and os.path.isdir(initargs[0]), "the stream copy is written"
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(cpd, "_spawn_pool", no_pool)
    with pytest.raises(OSError, match="Too many open files"):  # one file: tokenised in this process
        cpd.run(config(corpus / "a.txt", tmp_path / "failed", num_workers=2, batches_per_shard=4))
    assert not (tmp_path / "failed" / ".work").exists()
    monkeypatch.undo()
    save_dir, _ = written
    copy = tmp_path / "copy"
    shutil.copytree(save_dir, copy)
    left = copy / ".work" / "train-pass0-task0"
    left.mkdir(parents=True)
    (left / "rows.npy").write_bytes(b"x" * 1000)
    cpd.run(config(corpus / "*.txt", copy))
    assert not (copy / ".work").exists()


def test_shards_find_sentence_starts_once_per_pass_and_copy_no_rows(corpus, tmp_path, monkeypatch):
    """Each shard used to convert the whole stream to int64 and find every sentence start again: O(shards x
    tokens) time, and a copy of the stream in every worker. Now sentence starts are found once per pass, and a
    shard reads its windows of the (memory-mapped) rows."""
    import tracemalloc

    calls = []
    boundaries = ex.sentence_boundaries
    monkeypatch.setattr(ex, "sentence_boundaries", lambda s: calls.append(1) or boundaries(s))
    m = cpd.run(config(corpus / "*.txt", tmp_path / "few", batches_per_shard=4))
    assert len(m["shards"]) > 10 and len(calls) == SETTINGS.bsz_per_host

    rng = np.random.default_rng(0)
    steps = 400_000
    tokens = rng.integers(100, 8000, size=(SETTINGS.bsz_per_host, steps), dtype=np.int32)
    np.save(tmp_path / "rows.npy", tokens)
    rows = np.load(tmp_path / "rows.npy", mmap_mode="r")
    sent = (np.arange(steps) // 20) % 2 == 0
    bounds = cpd.RowBoundaries.of(np.stack([sent] * SETTINGS.bsz_per_host))
    is_start = ex.start_piece_table(XLNetTokenizer(SP_MODEL))
    (tmp_path / "tfrecords").mkdir()
    job = cpd.ShardJob(0, 0, 3, "tfrecords/x.tfrecord", {})
    tracemalloc.start()
    side = cpd.write_shard(str(tmp_path), job, rows, bounds, SETTINGS, is_start, (0, 0, 0))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert side["num_records"] == 3 * SETTINGS.bsz_per_host
    assert peak < tokens.nbytes / 10, f"{peak} bytes allocated for a shard of 3 host batches"


def test_tokenising_a_big_file_logs_progress(tmp_path, monkeypatch, caplog):
    """One big input file takes minutes to tokenise: lines with bytes done, rate and ETA, as shards get."""
    path = tmp_path / "big.txt"
    path.write_text("\n".join(brown_lines(3000)) + "\n", encoding="utf-8")
    monkeypatch.setattr(cpd, "PROGRESS_EVERY_S", 0.0)
    with caplog.at_level("INFO", logger="xlnet_tf.data"):
        cpd.tokenize_file(str(path), XLNetTokenizer(SP_MODEL), True, 10**6)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tokenising")]
    size = os.path.getsize(path) / 1e6
    assert len(lines) >= 2, caplog.text
    assert re.fullmatch(rf"tokenising {re.escape(str(path))} \| [\d.]+/{size:.1f} MB \(\d+%\), [\d.]+ MB/s, ETA "
                        r"\d+m\d\ds", lines[0]), lines[0]
