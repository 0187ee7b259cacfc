"""The command-line layer (xlnet_tf.cli.flags): flags defined once with the settings' defaults, --config_file
with command-line precedence, settings built from flags, aliases."""

import json
import subprocess
import sys

import pytest
from absl import flags

from classifier_helpers import REPO
from xlnet_tf.cli import flags as cli
from xlnet_tf.finetuning.task_settings import ClassifierSettings
from xlnet_tf.tasks.squad import SquadSettings
from xlnet_tf.training.settings import PretrainSettings, SettingsError


def parsed(settings_cls, define, *argv):
    values = flags.FlagValues()
    define(settings_cls, values)
    values(["prog", *argv])
    return values


def test_config_file_sets_flags_and_the_command_line_wins(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("learning_rate: 0.1\nseed: 3\nuncased: true\nmodel_dir: null\n")
    values = parsed(PretrainSettings, cli.define_common_flags, "--learning_rate=0.5")
    assert cli.apply_config_file(values, str(config)) == {"seed": 3, "uncased": True, "model_dir": None}
    assert values.learning_rate == 0.5 and values.seed == 3 and values.uncased


def test_config_file_errors_name_the_file_and_the_key(tmp_path):
    values = parsed(PretrainSettings, cli.define_common_flags)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("seed: 1\nlearning_rte: 0.1\n")
    with pytest.raises(flags.ValidationError, match=f"{unknown}: unknown flag 'learning_rte'"):
        cli.apply_config_file(values, str(unknown))
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: many\n")
    with pytest.raises(flags.ValidationError, match=f"{bad}: bad value for 'seed'"):
        cli.apply_config_file(values, str(bad))
    with pytest.raises(flags.ValidationError, match="--config_file=.*missing.yaml: file not found"):
        cli.apply_config_file(values, str(tmp_path / "missing.yaml"))
    assert cli.apply_config_file(values, None) == {} and cli.apply_config_file(values, "") == {}


def test_flag_defaults_are_the_settings_defaults():
    values = parsed(SquadSettings, cli.define_finetune_flags)
    for name in ("learning_rate", "do_train", "lr_layer_decay_rate", "train_batch_size", "max_seq_length"):
        assert values[name].default == getattr(SquadSettings(), name)
    assert values["config_file"].default is None  # no config file the user did not name


def test_settings_from_flags_needs_a_flag_for_every_field():
    values = parsed(ClassifierSettings, cli.define_finetune_flags, "--learning_rate=2e-5")
    with pytest.raises(KeyError, match="fields without a flag.*task_name"):  # the entry point defines the rest
        cli.settings_from_flags(ClassifierSettings, values)


@pytest.mark.parametrize("script,settings_cls", [("run_pretrain", "xlnet_tf.training.settings.PretrainSettings"),
                                                 ("run_squad", "xlnet_tf.tasks.squad.SquadSettings"),
                                                 ("run_classifier", "xlnet_tf.finetuning.task_settings.ClassifierSettings")])
def test_every_setting_has_a_flag_and_aliases_apply(script, settings_cls):
    """Each entry point defines a flag for every field of its settings, without importing TensorFlow;
    --use_tpu/--use_bfloat16 (fine-tuning) and --record_info_dir (pretraining) set what they stand for."""
    module, name = settings_cls.rsplit(".", 1)
    aliases = ["--record_info_dir=D"] if script == "run_pretrain" else ["--use_tpu", "--use_bfloat16"]
    code = (f"import sys, json, dataclasses; import {script}; from absl import flags; from {module} import {name}; "
            "from xlnet_tf.cli.flags import settings_from_flags; "
            f"flags.FLAGS(['x'] + {aliases!r}); s = settings_from_flags({name}); "
            "print(json.dumps(dict(settings=dataclasses.asdict(s), tf='tensorflow' in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    dumped = json.loads(out.stdout.strip().splitlines()[-1])
    settings = dumped["settings"]
    assert not dumped["tf"]  # flags and settings are checked before TensorFlow loads
    if script == "run_pretrain":
        assert settings["data_dir"] == "D" and settings["train_steps"] is None
    else:
        assert settings["strategy"] == "tpu" and settings["dtype"] == "mixed_bfloat16"


def test_settings_errors_are_reported_together():
    settings = PretrainSettings(model_dir="m", model_config_path="/nonexistent.json", data_dir="d", train_batch_size=8,
                                seq_len=32, reuse_len=64, mem_len=16, num_predict=5, train_steps=10, warmup_steps=10,
                                strategy="tpu", input_glob="*.txt")
    with pytest.raises(SettingsError) as e:
        settings.validate()
    for part in ("--model_config_path=/nonexistent.json: file not found", "--reuse_len=64 exceeds --seq_len=32",
                 "--warmup_steps=10 must be below --train_steps=10", "--strategy=tpu needs --tpu",
                 "--input_glob needs --spiece_model_file"):
        assert part in str(e.value)
    assert isinstance(e.value, ValueError)


def test_the_last_line_says_what_was_done():
    from xlnet_tf.cli.flags import summary

    assert summary({"step": 600, "loss": 6.5612}) == "trained to step 600 (loss 6.561)"
    assert summary({"train": {"step": 300, "loss": 0.52, "data": {}}}) == "trained to step 300 (loss 0.52)"
    line = summary({"train": {"step": 300}, "eval": {"split": "dev", "step": 300, "metrics": {"accuracy": 0.785}},
                    "predict": ["p/SST-2.tsv"], "export": "runs/export/1"})
    assert line == ("trained to step 300 (nothing left to train); evaluated dev at step 300: accuracy 0.785; "
                    "predictions in p/SST-2.tsv; exported runs/export/1")
    assert summary({}).startswith("nothing to do")
