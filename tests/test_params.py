"""The params contract: every key known, typed, and errors that name the key."""

import pytest
import yaml

from conftest import REPO
from lorasent.params import ParamsError, load_params, merge, parse_params


def test_repo_params_load():
    params = load_params(REPO / "params.yaml")
    assert params.base.labels == ("negative", "neutral", "positive")
    assert params.train.lora.r == 8
    assert isinstance(params.train.learning_rate, float)


def test_every_key_in_params_yaml_is_commented():
    """Each key line carries a comment, or follows a comment line (the template)."""
    lines = (REPO / "params.yaml").read_text(encoding="utf-8").splitlines()
    bare = [ln for prev, ln in zip([""] + lines[:-1], lines, strict=True)
            if ":" in ln and not ln.lstrip().startswith(("#", "-")) and "#" not in ln
            and not prev.lstrip().startswith("#") and not ln.rstrip().endswith(":")
            and not ln.startswith("    ")]  # entries of a commented mapping (label words)
    assert bare == []


def test_scientific_notation_is_a_float(params_raw, tmp_path):
    text = yaml.safe_dump(params_raw).replace("learning_rate: 0.0002", "learning_rate: 1e-5")
    assert "learning_rate: 1e-5" in text
    (tmp_path / "p.yaml").write_text(text)
    assert load_params(tmp_path / "p.yaml").train.learning_rate == 1e-5


def test_unknown_key_names_its_path(params_raw):
    params_raw["train"]["lora"]["rank"] = 16
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert ("train.lora.rank: unknown key (known: r, lora_alpha, lora_dropout, target_modules, "
            "modules_to_save)") in str(err.value)


def test_missing_key_and_wrong_type_are_named(params_raw):
    del params_raw["evaluate"]["reference"]
    params_raw["train"]["per_device_train_batch_size"] = "eight"
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert "evaluate.reference: missing key" in str(err.value)
    assert "train.per_device_train_batch_size:" in str(err.value)


@pytest.mark.parametrize("section,key,value,message", [
    ("prompt", "template", "no slot here", "prompt.template: must contain {text} exactly once"),
    ("train", "class_weighting", "sometimes", "train.class_weighting"),
    ("base", "precision", "fp8", "base.precision"),
    ("split", "test_size", 1.5, "split.test_size"),
    ("train", "lora", {"r": 0, "lora_alpha": 16, "lora_dropout": 0.1,
                       "target_modules": ["q_proj"]}, "train.lora.r"),
])
def test_bad_values_are_named(params_raw, section, key, value, message):
    params_raw[section][key] = value
    with pytest.raises(ParamsError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse_params(params_raw)


def test_label_words_must_match_labels(params_raw):
    params_raw["prompt"]["label_words"].pop("neutral")
    with pytest.raises(ParamsError, match=r"missing \['neutral'\]"):
        parse_params(params_raw)


def test_alias_to_unknown_label_is_refused(params_raw):
    params_raw["base"]["label_aliases"] = {"POS": "positve"}
    with pytest.raises(ParamsError, match="base.label_aliases"):
        parse_params(params_raw)


def test_split_sizes_take_counts_and_fractions(params_raw):
    params_raw["split"].update(train_size=0.8, test_size=100)
    split = parse_params(params_raw).split
    assert split.train_size == 0.8 and isinstance(split.test_size, int)


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(ParamsError, match="--params"):
        load_params(tmp_path / "params.yaml")


def test_merge_is_deep():
    assert merge({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 5}}) == {"a": {"b": 5, "c": 2},
                                                                        "d": 3}


def test_unquoted_no_is_the_string_no(params_raw):
    params_raw["train"]["eval_strategy"] = False  # what PyYAML makes of `eval_strategy: no`
    assert parse_params(params_raw).train.eval_strategy == "no"


def test_validation_each_epoch_needs_a_validation_split(params_raw):
    params_raw["train"]["eval_strategy"] = "epoch"
    with pytest.raises(ParamsError, match="train.eval_strategy: 'epoch' scores the validation "
                                          "split, but split.validation_size is 0"):
        parse_params(params_raw)
    params_raw["split"]["validation_size"] = 0.1
    assert parse_params(params_raw).train.eval_strategy == "epoch"


def test_keeping_the_best_needs_evaluation(params_raw):
    params_raw["train"]["load_best_model_at_end"] = True
    with pytest.raises(ParamsError, match="train.load_best_model_at_end: needs "
                                          "train.eval_strategy: epoch"):
        parse_params(params_raw)


def test_seq_cls_needs_no_label_words(params_raw):
    params_raw["train"]["mode"] = "seq_cls"
    params_raw["base"]["labels"] = ["negative", "positive"]
    assert parse_params(params_raw).train.mode == "seq_cls"
    params_raw["train"]["mode"] = "generative"
    with pytest.raises(ParamsError, match=r"not a label \['neutral'\]"):
        parse_params(params_raw)


def test_merge_replaces_label_keyed_maps_whole():
    base = {"prompt": {"label_words": {"a": "x", "b": "y"}, "max_length": 8},
            "base": {"label_aliases": {"n": "a"}}}
    merged = merge(base, {"prompt": {"label_words": {"a": "z"}}, "base": {"label_aliases": {}}})
    assert merged == {"prompt": {"label_words": {"a": "z"}, "max_length": 8},
                      "base": {"label_aliases": {}}}
    assert base["prompt"]["label_words"] == {"a": "x", "b": "y"}  # the input is not changed
