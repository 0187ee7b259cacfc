"""The one command-line mechanism (xlnet_tf.cli.flags): flags defined from the settings dataclasses (each once, with
its help), --config_file with command-line precedence, aliases, positional arguments, and the same usage errors
for every tool: a bad flag, a bad config file or a missing input is one line naming it, never a traceback; a bug
keeps its traceback."""

import ast
import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from absl import flags

from background import background
from classifier_helpers import REPO
from cli_helpers import assert_usage_error, parsed
from xlnet_tf.cli import flags as cli
from xlnet_tf.cli.convert import ConvertSettings
from xlnet_tf.cli.create_data import CreateDataSettings
from xlnet_tf.cli.export import ExportSettings
from xlnet_tf.cli.jobs import JobsSettings
from xlnet_tf.cli.launch import LaunchSettings
from xlnet_tf.cli.predict import PredictSettings
from xlnet_tf.cli.serving_ops import ServingOpsSettings
from xlnet_tf.cli.train_spm import TrainSpmSettings
from xlnet_tf.tasks.task_settings import ClassifierSettings
from xlnet_tf.tasks.squad import SquadSettings
from xlnet_tf.tasks.tagging import TaggingSettings
from xlnet_tf.training.settings import PretrainDataSettings, PretrainSettings, RunSettings, SettingsError

TOOL_SETTINGS = [PretrainSettings, ClassifierSettings, SquadSettings, ExportSettings, PredictSettings, JobsSettings,
                 CreateDataSettings, ConvertSettings, TrainSpmSettings, ServingOpsSettings,
                 LaunchSettings, TaggingSettings]


# -- defining flags from the settings ---------------------------------------------------------------------------------

@pytest.mark.parametrize("settings_cls", TOOL_SETTINGS, ids=lambda c: c.__name__)
def test_every_field_is_one_flag_with_the_fields_default_help_and_choices(settings_cls):
    values, _ = parsed(settings_cls)
    positional = cli.positional_fields(settings_cls)
    for field in dataclasses.fields(settings_cls):
        meta = cli.field_metadata(settings_cls, field.name)
        assert meta["help"], field.name
        if field.name in positional or field.name in settings_cls.NOT_FLAGS:
            assert field.name not in values
            continue
        flag = values[field.name]
        assert flag.default == field.default and meta["help"] in flag.help, field.name
        if meta.get("bounds"):  # the range validate() checks, in the help
            assert flag.help.endswith(f" Must be {meta['bounds']}."), field.name
        if meta["choices"] is not None:
            assert flag.parser.enum_values == [str(c) for c in meta["choices"]], field.name
    assert values["config_file"].default is None  # no config file the user did not name
    settings = cli.settings_from_flags(settings_cls, values, ["finetune", "job.yaml"][:len(positional)])
    assert isinstance(settings, settings_cls)


def test_a_subclass_default_keeps_the_base_help_and_a_field_without_help_is_refused():
    values, _ = parsed(PretrainSettings)
    assert values["train_batch_size"].default is None  # PretrainSettings' own default ...
    assert values["train_batch_size"].help.startswith("Global training batch size")  # ... RunSettings' help

    @dataclasses.dataclass
    class Undocumented(RunSettings):
        extra: int = 3

    with pytest.raises(TypeError, match="Undocumented.extra has no help"):
        parsed(Undocumented)


def test_pretraining_data_settings_are_defined_once():
    """create_data and run_pretrain.py share the data shape: same flags, help and defaults (bi_data was True in the
    writer and False in training); the SentencePiece model and lower-casing are RunSettings' definitions. The span
    masking, which only the writer uses, is by default the data's in run_pretrain.py (given, it must be)."""
    data, pretrain = parsed(CreateDataSettings)[0], parsed(PretrainSettings)[0]
    for field in dataclasses.fields(PretrainDataSettings):
        if field.name in ("mask_alpha", "mask_beta"):
            assert data[field.name].default == field.default and pretrain[field.name].default is None
            assert pretrain[field.name].help.startswith(field.metadata["help"]) and "the data's" in \
                pretrain[field.name].help
            continue
        assert data[field.name].default == pretrain[field.name].default == field.default, field.name
        # (--input_glob: run_pretrain.py's help says when it reads it; create_data always does)
        assert pretrain[field.name].help.startswith(data[field.name].help), field.name
    assert data["bi_data"].default is False
    for name in ("spiece_model_file", "uncased"):
        assert data[name].help == pretrain[name].help and data[name].default == pretrain[name].default


def test_config_file_sets_flags_and_the_command_line_wins(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("learning_rate: 0.1\nseed: 3\nuncased: true\nmodel_dir: null\nobjective: pmlm\n")
    values, _ = parsed(PretrainSettings, "--learning_rate=0.5")
    assert cli.apply_config_file(values, str(config)) == {"seed": 3, "uncased": True, "model_dir": None,
                                                          "objective": "pmlm"}
    assert values.learning_rate == 0.5 and values.seed == 3 and values.uncased and values.objective == "pmlm"


def test_config_file_errors_name_the_file_and_the_key(tmp_path):
    values, _ = parsed(PretrainSettings)
    for text, message in [("seed: 1\nlearning_rte: 0.1\n", "unknown flag 'learning_rte'"),
                          ("seed: many\n", "bad value for 'seed'"),
                          ("objective: bert\n", "bad value for 'objective'")]:
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        with pytest.raises(flags.ValidationError, match=f"{path}: {message}"):
            cli.apply_config_file(values, str(path))
    (tmp_path / "broken.yaml").write_text("seed: [1\n")
    with pytest.raises(flags.ValidationError, match="--config_file=.*broken.yaml: not valid YAML"):
        cli.apply_config_file(values, str(tmp_path / "broken.yaml"))
    (tmp_path / "twice.yaml").write_text("seed: 1\nlearning_rate: 0.1\nseed: 2\n")
    with pytest.raises(flags.ValidationError, match=r"twice.yaml: not valid YAML \(key 'seed' given twice .*line 3"):
        cli.apply_config_file(values, str(tmp_path / "twice.yaml"))
    (tmp_path / "list.yaml").write_text("- seed\n")
    with pytest.raises(flags.ValidationError, match="list.yaml: expected a mapping"):
        cli.apply_config_file(values, str(tmp_path / "list.yaml"))
    with pytest.raises(flags.ValidationError, match="--config_file=.*missing.yaml: file not found"):
        cli.apply_config_file(values, str(tmp_path / "missing.yaml"))
    assert cli.apply_config_file(values, None) == {} and cli.apply_config_file(values, "") == {}


def test_config_file_values_of_another_type_are_refused_naming_the_key_and_the_type(tmp_path):
    """A YAML value of another type than the setting's is one line naming the file, the key and the type (they were
    absl's TypeErrors with a traceback), every one at once; a whole number written as a float sets an integer
    (YAML reads 1e3 as a string), a fraction does not."""
    values, _ = parsed(ClassifierSettings)
    path = tmp_path / "types.yaml"
    path.write_text("train_steps: 10.5\nmodel_dir: 5\nlearning_rate: [1, 2]\ndo_train: maybe\nseed: true\n"
                    "strategy: 1\n")
    with pytest.raises(flags.ValidationError) as refused:
        cli.apply_config_file(values, str(path))
    assert str(refused.value) == (
        f"{path}: bad value for 'train_steps': 10.5 (expected an integer); bad value for 'model_dir': 5 is a number "
        "(expected a string; quote it if you mean the text '5'); bad value for 'learning_rate': [1, 2] (expected a "
        "number); bad value for 'do_train': 'maybe' (expected true or false); bad value for 'seed': True (expected "
        "an integer); bad value for 'strategy': 1 is a number (expected one of one_device, mirrored, multi_worker, "
        "tpu; quote it if you mean the text '1')")
    path.write_text("train_steps: 10.0\nsave_steps: 1e3\nwarmup_steps: 0x10\nlearning_rate: 3\n"
                    "model_dir: '5'\n")
    cli.apply_config_file(values, str(path))
    assert (values.train_steps, values.save_steps, values.warmup_steps, values.learning_rate, values.model_dir) == \
        (10, 1000, 16, 3.0, "5")
    assert type(values.train_steps) is int and type(values.learning_rate) is float


def test_a_null_is_refused_where_the_setting_cannot_be_unset(tmp_path):
    """null unsets an Optional setting (a path); for one that cannot be unset it is refused by name before anything
    runs (it passed, and the run failed in the optimizer after encoding its data); a training run's step count and
    batch size, Optional for pretraining's sake, must be set when it trains."""
    values, _ = parsed(ClassifierSettings)
    path = tmp_path / "nulls.yaml"
    path.write_text("learning_rate: null\nmax_seq_length: null\ndo_train: null\noutput_dir: null\n")
    with pytest.raises(flags.ValidationError) as refused:
        cli.apply_config_file(values, str(path))
    assert str(refused.value) == (
        f"{path}: bad value for 'learning_rate': null (expected a number: this setting cannot be unset); bad value "
        "for 'max_seq_length': null (expected an integer: this setting cannot be unset); bad value for 'do_train': "
        "null (expected true or false: this setting cannot be unset)")
    path.write_text("init_checkpoint: null\ntrain_steps: null\ntrain_batch_size: null\ndo_train: true\n")
    values, _ = parsed(ClassifierSettings)
    assert cli.apply_config_file(values, str(path)) == dict(init_checkpoint=None, train_steps=None,
                                                             train_batch_size=None, do_train=True)
    errors = cli.settings_from_flags(ClassifierSettings, values).errors()
    assert "--train_batch_size, --train_steps: unset (null), but the run trains: give them a value" in errors
    values["do_train"].value = False  # evaluation only: no step count needed
    assert not [e for e in cli.settings_from_flags(ClassifierSettings, values).errors() if "--train_" in e]


def test_an_empty_path_flag_takes_the_file_beside_init_checkpoint(tmp_path):
    """--model_config_path= (clearing a config file's value) is unset, as every empty path flag: the release's file
    beside --init_checkpoint is used (it said the flag was missing, naming the file that was there)."""
    release = tmp_path / "release"
    release.mkdir()
    for name in ("xlnet_config.json", "spiece.model", "xlnet_model.ckpt.index"):
        (release / name).write_text("{}")
    config = tmp_path / "run.yaml"
    config.write_text("model_config_path: elsewhere/xlnet_config.json\nspiece_model_file: elsewhere/spiece.model\n")
    values, _ = parsed(ClassifierSettings, f"--config_file={config}", "--model_config_path=", "--spiece_model_file=",
                       f"--init_checkpoint={release / 'xlnet_model.ckpt'}")
    cli.apply_config_file(values, str(config))
    s = cli.settings_from_flags(ClassifierSettings, values)
    assert (s.model_config_path, s.spiece_model_file) == (str(release / "xlnet_config.json"),
                                                          str(release / "spiece.model"))
    assert not [e for e in s.errors() if "model_config_path" in e or "spiece_model_file" in e]


def test_a_flag_the_tool_refuses_is_not_defined_and_says_what_to_use(tmp_path):
    """run_tagger.py lists none of run_classifier.py's batch-prediction flags (--help showed them, then the run
    refused them): given anyway, on the command line or in a config file, the error says what tags large inputs."""
    values, _ = parsed(TaggingSettings)
    # (and none of those a tagger never reads: --long_document=memory trained as without, recorded as with)
    for name in ("predict_input_glob", "predict_text_fields", "predict_id_field", "long_document", "max_segments",
                 "mem_len", "max_qa_length", "high_only", "middle_only", "summary_type", "use_summ_proj",
                 "is_regression"):
        assert name not in values and name in TaggingSettings.NOT_FLAGS
    config = tmp_path / "memory.yaml"
    config.write_text("long_document: memory\n")
    with pytest.raises(flags.ValidationError, match=r"unknown flag 'long_document' \(a tagger reads a long text in "
                                                     r"overlapping windows"):
        cli.apply_config_file(values, str(config), TaggingSettings)
    assert cli.settings_from_flags(TaggingSettings, values).predict_input_glob is None
    config = tmp_path / "tag.yaml"
    config.write_text("predict_input_glob: big/*.jsonl\n")
    with pytest.raises(flags.ValidationError, match=r"tag.yaml: unknown flag 'predict_input_glob' \(run_tagger.py "
                                                     r"tags large inputs through its export: python -m xlnet_tf"):
        cli.apply_config_file(values, str(config), TaggingSettings)
    done = _run(["run_tagger.py"], "--predict_input_glob=big/*.jsonl")
    assert_usage_error(done, "run_tagger.py", "Unknown command line flag 'predict_input_glob' (run_tagger.py tags "
                                              "large inputs through its export: python -m xlnet_tf.cli.predict "
                                              "--saved_model=<--export_dir> --input_glob=... --text_fields=text)")
    assert "predict_input_glob" in parsed(ClassifierSettings)[0]  # run_classifier.py keeps them


@pytest.mark.parametrize("settings_cls", [PretrainSettings, ClassifierSettings, SquadSettings, TaggingSettings,
                                          CreateDataSettings, ExportSettings, PredictSettings, ConvertSettings,
                                          TrainSpmSettings, JobsSettings, LaunchSettings, ServingOpsSettings])
def test_every_flag_a_tools_help_names_is_a_flag_of_that_tool(settings_cls):
    """--help is read as the tool's own: run_classifier.py's said --train_batch_size was "per micro-batch with
    --grad_accum_steps", a flag only run_pretrain.py has (it refused it)."""
    values, _ = parsed(settings_cls)
    named = {(name, flag) for name in values for flag in re.findall(r"--([a-z][a-z0-9_]*)", values[name].help or "")}
    assert not {(name, flag) for name, flag in named if flag not in values}


def test_original_flags_declared_by_the_settings_apply():
    values, _ = parsed(PretrainSettings, "--record_info_dir=D")
    assert cli.settings_from_flags(PretrainSettings, values).data_dir == "D"
    values, _ = parsed(PretrainSettings, "--record_info_dir=D", "--data_dir=E")  # the new name wins
    assert cli.settings_from_flags(PretrainSettings, values).data_dir == "E"
    values, _ = parsed(CreateDataSettings, "--sp_path=m.model")
    assert cli.settings_from_flags(CreateDataSettings, values).spiece_model_file == "m.model"
    values, _ = parsed(ClassifierSettings, "--use_tpu", "--use_bfloat16", "--num_hosts=4")
    s = cli.settings_from_flags(ClassifierSettings, values)
    assert (s.strategy, s.dtype) == ("tpu", "mixed_bfloat16")
    values, _ = parsed(SquadSettings, "--init_range=0.5", "--summary_type=first")  # accepted, without effect
    assert cli.settings_from_flags(SquadSettings, values) == SquadSettings()


def test_original_flag_names_follow_the_precedence_command_line_config_file_defaults(tmp_path):
    """An original name (--sp_path, --record_info_dir, --use_bfloat16, --use_tpu) ranks as the new one: on the
    command line it beats the config file's new name, and in the config file it loses to the command line's (the
    data was written with the file's SentencePiece model, and the file's use_bfloat16 overrode --dtype=float32).
    A switch and its target contradicting each other on one level is an error naming both."""
    def settings(settings_cls, file_text, *argv):
        config = tmp_path / "run.yaml"
        config.write_text(file_text)
        values, _ = parsed(settings_cls, *argv)
        cli.apply_config_file(values, str(config), settings_cls)
        return cli.settings_from_flags(settings_cls, values)

    assert settings(CreateDataSettings, "spiece_model_file: a.model\n", "--sp_path=b.model").spiece_model_file == \
        "b.model"
    assert settings(CreateDataSettings, "sp_path: a.model\n", "--spiece_model_file=b.model").spiece_model_file == \
        "b.model"
    assert settings(CreateDataSettings, "sp_path: a.model\n").spiece_model_file == "a.model"
    assert settings(PretrainSettings, "data_dir: old\n", "--record_info_dir=new").data_dir == "new"
    assert settings(PretrainSettings, "record_info_dir: old\ndata_dir: new\n").data_dir == "new"
    assert settings(PretrainSettings, "use_bfloat16: true\n", "--dtype=float32").dtype == "float32"
    assert settings(PretrainSettings, "use_tpu: true\n", "--strategy=one_device").strategy == "one_device"
    s = settings(PretrainSettings, "dtype: float32\nstrategy: mirrored\n", "--use_bfloat16", "--use_tpu")
    assert (s.dtype, s.strategy) == ("mixed_bfloat16", "tpu")
    assert settings(PretrainSettings, "use_bfloat16: true\ndtype: mixed_bfloat16\n").dtype == "mixed_bfloat16"
    with pytest.raises(SettingsError, match=r"^--use_tpu \(--strategy=tpu\) contradicts --strategy=mirrored on the "
                                            r"command line: give one of them; --use_bfloat16 "
                                            r"\(--dtype=mixed_bfloat16\) contradicts --dtype=float32 on the command "
                                            r"line"):
        settings(PretrainSettings, "", "--use_bfloat16", "--dtype=float32", "--use_tpu", "--strategy=mirrored")
    with pytest.raises(SettingsError, match=r"--use_bfloat16 \(--dtype=mixed_bfloat16\) contradicts --dtype=float32 "
                                            r"in --config_file"):
        settings(PretrainSettings, "use_bfloat16: true\ndtype: float32\n")


def test_create_data_writes_the_original_num_passes():
    """--num_passes of the original data_utils.py (its README's data command) was an unknown flag."""
    values, _ = parsed(CreateDataSettings, "--num_passes=20", "--pass_id=2")
    config = cli.settings_from_flags(CreateDataSettings, values).writer_config()
    assert (config.pass_id, config.num_passes) == (2, 20)
    assert "--num_passes=0 must be >= 1" in CreateDataSettings(seq_len=64, reuse_len=32, num_predict=8,
                                                               num_passes=0).errors()


def test_a_glob_pattern_that_matches_no_file_is_an_error_naming_it(tmp_path):
    """Of comma-separated globs, one that matches no file (a typo) was dropped while the others matched: each tool
    names it before any work, with the settings' other errors."""
    (tmp_path / "a.txt").write_text("text\n")
    (tmp_path / "texts").mkdir()
    glob = f"{tmp_path / 'a.txt'},{tmp_path / 'a_typo*.txt'},{tmp_path / 'texts'}"
    typo = f"'{tmp_path / 'a_typo*.txt'}' matches no file"
    folder = f"'{tmp_path / 'texts'}' is a directory: give a glob of its files, e.g. '{tmp_path / 'texts' / '*.txt'}'"
    assert [e for e in TrainSpmSettings(input=glob).errors() if e.startswith("--input")] == \
        [f"--input: {typo}", f"--input: {folder}"]
    assert [e for e in CreateDataSettings(input_glob=glob, seq_len=64, reuse_len=32, num_predict=8).errors()
            if e.startswith("--input_glob")] == [f"--input_glob: {typo}", f"--input_glob: {folder}"]
    assert f"--input_glob: {typo}" in PretrainSettings(input_glob=glob, data_dir=str(tmp_path / "new")).errors()
    assert [e for e in TrainSpmSettings(input=str(tmp_path / "a.txt")).errors() if e.startswith("--input")] == []
    assert TrainSpmSettings(input=glob).files == [str(tmp_path / "a.txt")]


def test_train_spm_names_the_flag_of_a_directory_input_or_a_prefix_under_a_file(tmp_path):
    """They were bare errno lines ("[Errno 21] Is a directory", "[Errno 17] File exists") once training began."""
    (tmp_path / "a.txt").write_text("text\n")
    errors = TrainSpmSettings(input=str(tmp_path), model_prefix=str(tmp_path / "a.txt" / "sp")).errors()
    assert f"--input: '{tmp_path}' is a directory: give a glob of its files, e.g. '{tmp_path / '*.txt'}'" in errors
    assert f"--model_prefix={tmp_path / 'a.txt' / 'sp'}: {tmp_path / 'a.txt'} is a file, not a directory" in errors
    assert not TrainSpmSettings(input=str(tmp_path / "a.txt"), model_prefix=str(tmp_path / "new" / "sp")).errors()


def test_train_spm_trains_on_lines_longer_than_sentencepieces_default_limit(tmp_path):
    """SentencePiece skips lines over 4192 bytes unless told otherwise: a corpus of a paragraph per line was
    "empty or blank", and a long line's words were missing from a mixed corpus's vocabulary."""
    from xlnet_tf.cli import train_spm
    from xlnet_tf.tokenization import XLNetTokenizer

    words = "the quick brown fox jumps over a lazy dog while zebras graze quietly".split()
    paragraph = " ".join(words[i % len(words)] + ("" if i % 7 else "s") for i in range(1200))
    assert len(paragraph.encode()) > 4192
    (tmp_path / "paragraphs.txt").write_text(f"{paragraph}\n\n{paragraph[::-1]}\n")
    train_spm.main(TrainSpmSettings(input=str(tmp_path / "paragraphs.txt"), model_prefix=str(tmp_path / "sp"),
                                    vocab_size=60))
    vocab = {XLNetTokenizer(str(tmp_path / "sp.model")).sp.id_to_piece(i) for i in range(60)}
    assert "\u2581zebras" in vocab or "\u2581zebra" in vocab, sorted(vocab)


def test_train_spm_skips_and_reports_lines_that_are_not_utf8(tmp_path, caplog):
    """They were decoded with U+FFFD, silently: a Latin-1 corpus's accented letters were all <unk>."""
    from xlnet_tf.tokenization import train_sentencepiece

    words = "the quick brown fox jumps over a lazy dog while zebras graze quietly".split()
    good = "\n".join(" ".join(words[i:] + words[:i]) for i in range(len(words)))
    (tmp_path / "good.txt").write_text(good + "\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9 na\u00efve\nr\u00e9sum\u00e9\n".encode("latin-1"))
    with caplog.at_level("WARNING"):
        train_sentencepiece([str(tmp_path / "good.txt"), str(tmp_path / "latin1.txt")], str(tmp_path / "sp"), 50)
    assert f"skipping {tmp_path / 'latin1.txt'}:1: invalid UTF-8 at byte 3" in caplog.text
    assert "skipped 2 unusable lines" in caplog.text
    with pytest.raises(cli.InputError, match=r"no UTF-8 text to train on: all 2 line\(s\) of 1 file\(s\) are not "
                                             r"UTF-8, e\.g\. .*latin1\.txt:1: invalid UTF-8 at byte 3"):
        train_sentencepiece([str(tmp_path / "latin1.txt")], str(tmp_path / "sp2"), 40)


def test_positional_arguments_come_from_the_command_line():
    values, rest = parsed(JobsSettings, "finetune", "job.yaml", "--only=a,b", "--dry_run")
    s = cli.settings_from_flags(JobsSettings, values, rest)
    assert (s.command, s.job_file, s.selected, s.dry_run) == ("finetune", "job.yaml", ["a", "b"], True)
    for argv, message in [(["finetune"], "missing argument\\(s\\): JOB_FILE"),
                          (["finetune", "a.yaml", "b.yaml"], "unexpected argument\\(s\\): b.yaml"),
                          (["train", "a.yaml"], "COMMAND='train' must be one of finetune")]:
        with pytest.raises(SettingsError, match=message):  # (jobs run takes several run directories: validate())
            cli.settings_from_flags(JobsSettings, parsed(JobsSettings, *argv)[0], argv).validate()
    with pytest.raises(SettingsError, match="unexpected argument\\(s\\): stray"):  # a tool without arguments
        cli.settings_from_flags(PretrainSettings, parsed(PretrainSettings)[0], ["stray"])


def test_run_squad_keeps_the_original_defaults():
    values, _ = parsed(SquadSettings)
    for name in ("learning_rate", "do_train", "lr_layer_decay_rate", "train_batch_size", "max_seq_length"):
        assert values[name].default == getattr(SquadSettings(), name)
    assert values["do_train"].default is True and values["do_train"].help == "Fine-tune."  # FinetuneSettings' help


def test_settings_errors_are_reported_together():
    settings = PretrainSettings(model_dir="m", model_config_path="/nonexistent.json", data_dir="d", train_batch_size=8,
                                seq_len=32, reuse_len=64, mem_len=16, num_predict=5, train_steps=10, warmup_steps=10,
                                strategy="tpu", input_glob="*.txt")
    with pytest.raises(SettingsError) as e:
        settings.validate()
    for part in ("--model_config_path=/nonexistent.json: file not found", "--reuse_len=64 must be in [1, --seq_len=32)",
                 "--warmup_steps=10 must be below --train_steps=10", "--strategy=tpu (--use_tpu) needs --tpu",
                 "--input_glob needs --spiece_model_file"):
        assert part in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, cli.InputError)


def test_a_shape_no_batch_can_take_is_refused_before_tensorflow_loads():
    """A --reuse_len that --perm_size (by default --reuse_len) cannot split with the rest of --seq_len: refused with
    the other settings, not once the data was written (hours from a large --input_glob) and --model_dir claimed."""
    shape = dict(model_dir="m", model_config_path=os.path.join(REPO, "configs", "tiny.json"), data_dir="d",
                 train_batch_size=8, seq_len=64, num_predict=10, train_steps=10)
    with pytest.raises(SettingsError, match=re.escape(
            "--perm_size=24 must divide --reuse_len=24 and seq_len-reuse_len=40 (--perm_size defaults to "
            "--reuse_len)")):
        PretrainSettings(reuse_len=24, **shape).validate()
    with pytest.raises(SettingsError, match=re.escape("--perm_size=16 must divide --reuse_len=24 and")):
        PretrainSettings(reuse_len=24, perm_size=16, **shape).validate()
    PretrainSettings(reuse_len=24, perm_size=8, **shape).validate()  # 8 divides 24 and 40


def test_the_last_line_says_what_was_done():
    assert cli.summary({"step": 600, "loss": 6.5612}) == "trained to step 600 (loss 6.561)"
    assert cli.summary({"train": {"step": 300, "loss": 0.52, "data": {}}}) == "trained to step 300 (loss 0.52)"
    line = cli.summary({"train": {"step": 300}, "eval": {"split": "dev", "step": 300, "metrics": {"accuracy": 0.785}},
                        "predict": ["p/SST-2.tsv"], "export": "runs/export/1"})
    assert line == ("trained to step 300 (nothing left to train); evaluated dev at step 300: accuracy 0.785; "
                    "predictions in p/SST-2.tsv; exported runs/export/1")
    assert cli.summary({}).startswith("nothing to do")
    # --eval_all_ckpt's best, which is not necessarily the step evaluated last (nor exported)
    best = cli.summary({"eval": {"split": "dev", "step": 300, "metrics": {"accuracy": 0.785}, "main_metric": "accuracy",
                                 "best_checkpoint": "runs/m/model-200", "best_step": 200,
                                 "best_metrics": {"accuracy": 0.79125}}})
    assert best == "evaluated dev at step 300: accuracy 0.785; best accuracy 0.7913 at runs/m/model-200 (step 200)"
    # Counts print as integers (SQuAD's "total 1.8e+04" was 18000 questions), other values to 4 digits.
    squad = cli.summary({"eval": {"split": "sq.json", "step": 2, "metrics": {
        "exact": 0.0, "f1": 1.3889, "total": 18000.0, "HasAns_total": 12961, "loss": 12345.67, "lr": 2e-05}}})
    assert squad == ("evaluated sq.json at step 2: exact 0, f1 1.389, total 18000, HasAns_total 12961, loss 12346, "
                     "lr 2e-05")


def test_tools_check_their_settings_before_tensorflow_loads():
    code = textwrap.dedent("""
        import sys
        from absl import flags
        from xlnet_tf.cli import convert, create_data, export, flags as cli, jobs, predict, train_spm
        from xlnet_tf.tasks.task_settings import ClassifierSettings
        from xlnet_tf.tasks.squad import SquadSettings
        from xlnet_tf.training.settings import PretrainSettings
        for settings_cls in (PretrainSettings, ClassifierSettings, SquadSettings, export.ExportSettings,
                             predict.PredictSettings, jobs.JobsSettings, create_data.CreateDataSettings,
                             convert.ConvertSettings, train_spm.TrainSpmSettings):
            values = flags.FlagValues()
            cli.define_flags(settings_cls, values)
            values(["x"])
            cli.settings_from_flags(settings_cls, values, ["finetune", "j.yaml"][:len(cli.positional_fields(
                settings_cls))]).errors()
        create_data.CreateDataSettings(seq_len=64, reuse_len=32, num_predict=8).errors()  # the writer's checks
        ClassifierSettings(task_name="sst-2").errors(), SquadSettings().errors()
        print("tensorflow" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


@background
def test_a_tool_imports_tensorflow_without_what_keras_imports_only_to_offer():
    """A tool's process loads TensorFlow and Keras without scikit-learn, pandas, matplotlib and jax (~3.5 s of the
    import's ~9 s CPU on 2 cores), and both work; scikit-learn imports afterwards for the fine-tuning metrics."""
    code = textwrap.dedent("""
        import sys
        from xlnet_tf.cli import flags as cli
        cli.import_tensorflow()
        print(sorted(name for name in ("sklearn", "pandas", "matplotlib", "jax") if name in sys.modules))
        import keras, tensorflow as tf
        print(float(keras.layers.Dense(2, kernel_initializer="ones")(tf.ones([1, 3]))[0, 1]))
        from xlnet_tf.finetuning import metrics  # scikit-learn's
        print(sys.modules["sklearn"] is not None)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == ["[]", "3.0", "True"], done.stdout


def test_no_argparse_in_the_package():
    root = pathlib.Path(REPO, "xlnet_tf")
    users = [str(p.relative_to(REPO)) for p in root.rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, (ast.Import, ast.ImportFrom))
             and "argparse" in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module])]
    assert not users


# -- every tool, as users run it (subprocesses: each fails before TensorFlow loads) ------------------------------------

# tool: (command, a bad flag and what the error says, arguments naming a missing input and what the error says,
# a field's help text)
TOOLS = {
    "run_pretrain": (["run_pretrain.py"], ("--seq_len=abc", "flag --seq_len=abc: invalid literal for int()"),
                     ["--model_config_path=/nonexistent/c.json"],
                     "--model_config_path=/nonexistent/c.json: file not found", "Transformer-XL memory length"),
    "run_classifier": (["run_classifier.py"], ("--seed=abc", "flag --seed=abc: invalid literal for int()"),
                       ["--model_config_path=/nonexistent/c.json"],
                       "--model_config_path=/nonexistent/c.json: file not found", "Layer-wise learning rates"),
    "run_squad": (["run_squad.py"], ("--strategy=gpu", "flag --strategy=gpu: value should be one of"),
                  ["--train_file=/nonexistent/train.json"], "--train_file=/nonexistent/train.json: file not found",
                  "Re-encode the data"),
    "export": (["-m", "xlnet_tf.cli.export"], ("--format=zip", "flag --format=zip: value should be one of"),
               ["--model_dir=/nonexistent/run"], "--model_dir=/nonexistent/run: not a directory",
               "saved_model (TF Serving, raw text in)"),
    "predict": (["-m", "xlnet_tf.cli.predict"], ("--batch_size=many", "flag --batch_size=many: invalid literal"),
                ["--saved_model=/nonexistent/export"], "--saved_model=/nonexistent/export: no such directory",
                "Examples per model call"),
    "jobs": (["-m", "xlnet_tf.cli.jobs"], ("--dry_run=maybe", "flag --dry_run=maybe: ('Non-boolean argument"),
             ["finetune", "/nonexistent/job.yaml"], "/nonexistent/job.yaml: job file not found",
             "List the runs and their flags"),
    "create_data": (["-m", "xlnet_tf.cli.create_data"], ("--bi_data=2", "flag --bi_data=2: ('Non-boolean"),
                    ["--spiece_model_file=/nonexistent/s.model"],
                    "--spiece_model_file=/nonexistent/s.model: file not found", "Bidirectional data"),
    "convert": (["-m", "xlnet_tf.cli.convert"], ("--relase_dir=x", "Unknown command line flag 'relase_dir'"),
                ["--release_dir=/nonexistent/release"], "--release_dir=/nonexistent/release: not a directory",
                "Directory of the original release"),
    "train_spm": (["-m", "xlnet_tf.cli.train_spm"], ("--vocab_size=1.5", "flag --vocab_size=1.5: invalid literal"),
                  ["--input=/nonexistent/*.txt"], "--input: '/nonexistent/*.txt' matches no file",
                  "SentencePiece character coverage"),
    "serving_ops": (["-m", "xlnet_tf.cli.serving_ops"], ("--saved_modle=x", "Unknown command line flag 'saved_modle'"),
                    ["--saved_model=/nonexistent/export/1"], "--saved_model=/nonexistent/export/1: no such directory",
                    "an export's version directory"),
}


def _run(command, *args, cwd=REPO):
    return subprocess.run([sys.executable, *command, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_tool_reports_user_errors_the_same_way(tool, tmp_path):
    command, (bad_flag, bad_flag_says), missing_input, missing_input_says, help_text = TOOLS[tool]
    program = command[1] if command[0] == "-m" else command[0]
    arguments = ["finetune", str(tmp_path / "job.yaml")] if tool == "jobs" else []
    assert_usage_error(_run(command, *arguments, bad_flag), program, bad_flag_says)
    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: [1\n")
    assert_usage_error(_run(command, *arguments, f"--config_file={broken}"), program,
                 f"--config_file={broken}: not valid YAML")
    assert_usage_error(_run(command, *missing_input), program, missing_input_says)
    helpfull = _run(command, "--helpfull")  # (absl ends --helpfull with exit status 1)
    assert "Traceback" not in helpfull.stderr
    assert help_text in " ".join(helpfull.stdout.split()), helpfull.stdout[-2000:]


def test_a_library_error_mid_run_is_one_line_and_a_bug_keeps_its_traceback(tmp_path):
    """train_spm: SentencePiece's own error for a vocabulary the text cannot fill (a RuntimeError with a C++
    traceback) is a usage error naming --vocab_size; a tool whose code fails keeps the traceback."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\nthis is a test\n")
    done = _run(["-m", "xlnet_tf.cli.train_spm"], f"--input={corpus}", f"--model_prefix={tmp_path / 'sp'}",
                "--vocab_size=8000")
    assert_usage_error(done, "xlnet_tf.cli.train_spm", f"--vocab_size=8000 does not fit the text of --input={corpus}: "
                                                 "Vocabulary size too high (8000)")
    assert not list(tmp_path.glob("sp*"))

    # input without a line of text: SentencePiece's "[!sentences_.empty()]", named as the flag
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n\t\n")
    glob = f"{tmp_path / 'empty.txt'},{tmp_path / 'blank.txt'}"
    done = _run(["-m", "xlnet_tf.cli.train_spm"], f"--input={glob}", f"--model_prefix={tmp_path / 'sp'}",
                "--vocab_size=100")
    assert_usage_error(done, "xlnet_tf.cli.train_spm", f"--input={glob}: no text to train on (2 file(s), every one "
                                                       "empty or blank)")

    tool = tmp_path / "tool.py"
    tool.write_text(textwrap.dedent('''
        import dataclasses, sys
        from xlnet_tf.cli import flags as cli

        @dataclasses.dataclass
        class ToolSettings(cli.Settings):
            fail: str = cli.setting("bug", "How to fail.", choices=("bug", "input", "none"))
            exit_code: int = cli.setting(0, "Exit status of a finished run.")

        def main(s):
            print("working", flush=True)
            if s.fail == "input":
                raise cli.InputError("data.tsv:3: not a number")
            if s.fail == "bug":
                return {}["missing"]
            return s.exit_code

        cli.run(ToolSettings, main, tensorflow=False)  # its main uses no TensorFlow (and 3 runs load none)
    '''))
    bug = _run([str(tool)], cwd=str(tmp_path))
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "KeyError: 'missing'" in bug.stderr
    assert_usage_error(_run([str(tool)], "--fail=input", cwd=str(tmp_path)), "tool.py", "data.tsv:3: not a number")
    done = _run([str(tool)], "--fail=none", "--exit_code=3", cwd=str(tmp_path))
    assert done.returncode == 3 and done.stdout == "working\n" and "Traceback" not in done.stderr
