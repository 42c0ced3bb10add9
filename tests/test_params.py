"""The params contract: every key known, typed, and errors that name the key."""

import difflib
import shutil
from typing import Any

import pytest

from conftest import CASES, REPO, committed
from lorasent.params import (
    ParamsError,
    apply_preset,
    load_params,
    merge,
    parse_params,
    read_yaml,
)


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


def test_scientific_notation_is_a_float(tmp_path):
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    assert "learning_rate: 2.0e-4 " in text
    assert load_params(REPO / "params.yaml").train.learning_rate == 2e-4
    for spelling, value in [("1e-5", 1e-5), ("1e-05", 1e-5), ("1.0E-3", 1e-3), ("3e+2", 300.0)]:
        (tmp_path / "p.yaml").write_text(
            text.replace("learning_rate: 2.0e-4", f"learning_rate: {spelling}"), encoding="utf-8")
        learning_rate = load_params(tmp_path / "p.yaml").train.learning_rate
        assert learning_rate == value and isinstance(learning_rate, float)


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

@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_float_key_refuses_a_non_finite_value(params_raw, value):
    """``train.max_grad_norm: .inf`` (or ``-S train.max_grad_norm=inf``) was taken: only
    a bound refused nan, and inf is above every lower bound (issue 62)."""
    params_raw["train"]["max_grad_norm"] = value
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert f"train.max_grad_norm: input should be a finite number (got {value})" in \
        str(err.value)



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


def test_yaml_1_2_reads_yes_and_no_as_strings_like_dvc():
    from dvc.utils.serialize import parse_yaml

    text = "a: [no, yes, on, off, y, n, No, YES]\nb: true\nc: null\nd:\ne: 8\nf: 2.0e-4\n"
    expected = {"a": ["no", "yes", "on", "off", "y", "n", "No", "YES"], "b": True, "c": None,
                "d": None, "e": 8, "f": 2e-4}
    assert read_yaml(text, "t.yaml") == expected
    assert parse_yaml(text, "t.yaml") == expected  # what DVC reads


def test_unquoted_no_is_the_string_no(params_raw):
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    assert "  eval_strategy: no " in text  # unquoted, as DVC writes it back
    assert load_params(REPO / "params.yaml").train.eval_strategy == "no"
    params_raw["train"]["eval_strategy"] = False  # `false` is a boolean, not "no"
    with pytest.raises(ParamsError, match=r"train.eval_strategy: input should be 'no' or "
                                          r"'epoch' \(got False\)"):
        parse_params(params_raw)


def test_not_yaml_names_the_file_and_line(tmp_path):
    (tmp_path / "params.yaml").write_text("base:\n  seed: 1\n  seed: 2\n", encoding="utf-8")
    with pytest.raises(ParamsError) as err:
        load_params(tmp_path / "params.yaml")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'params.yaml'}: not valid YAML: ")
    assert 'found duplicate key "seed"' in message and "line 3" in message
    assert "To suppress" not in message


def test_validation_each_epoch_needs_a_validation_split(params_raw):
    params_raw["train"]["eval_strategy"] = "epoch"
    params_raw["split"]["validation_size"] = 0
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
    base: dict[str, Any] = {"prompt": {"label_words": {"a": "x", "b": "y"}, "max_length": 8},
            "base": {"label_aliases": {"n": "a"}}}
    merged = merge(base, {"prompt": {"label_words": {"a": "z"}}, "base": {"label_aliases": {}}})
    assert merged == {"prompt": {"label_words": {"a": "z"}, "max_length": 8},
                      "base": {"label_aliases": {}}}
    assert base["prompt"]["label_words"] == {"a": "x", "b": "y"}  # the input is not changed


def test_yes_no_class_names_unquoted_mean_what_dvc_reads(repo_params_raw, tmp_path):
    """The bad-input case params_yesno.yaml: class names no, maybe, yes and aliases n, y,
    unquoted. YAML 1.2 (DVC's reading) makes strings of them; so does lorasent."""
    from dvc.utils.serialize import parse_yaml

    case = CASES / "params_yesno.yaml"
    text = case.read_text(encoding="utf-8")
    assert "labels: [no, maybe, yes]" in text and "    n: no" in text  # unquoted
    for raw in (read_yaml(text, case), parse_yaml(text, case)):
        params = parse_params(merge(repo_params_raw, raw), case)
        assert params.base.labels == ("no", "maybe", "yes")
        assert params.base.label_aliases == {"n": "no", "y": "yes"}
        assert params.prompt.label_words == {"no": " no", "maybe": " maybe", "yes": " yes"}
        assert all(type(key) is str for key in params.prompt.label_words)
    # merged into a params file and read back from it
    path = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", path)
    assert apply_preset(case, path) == load_params(path)
    assert load_params(path).base.labels == ("no", "maybe", "yes")
    assert load_params(path).base.label_aliases == {"n": "no", "y": "yes"}


@pytest.mark.parametrize("override,message", [
    ("base: {labels: [0, 1]}",
     'base.labels: label 0 is read as a number (int), not a string; quote it: "0"\n'
     '  base.labels: label 1 is read as a number (int), not a string; quote it: "1"'),
    ("base: {labels: [neg, 2024-01-31]}",
     'base.labels: label 2024-01-31 is read as a date (date), not a string; quote it: '
     '"2024-01-31"'),
    ("base: {labels: [neg, null, pos]}", "base.labels: a label is empty (null), not a string"),
    ("base: {label_aliases: {1: positive}}",
     'base.label_aliases: key 1 is read as a number (int), not a string; quote it: "1"'),
    ("base: {label_aliases: {pos: 1}}",
     'base.label_aliases.pos: value 1 is read as a number (int), not a string; quote it: "1"'),
    ("base: {label_aliases: {neg: }}",
     "base.label_aliases.neg: the value is empty (null), not a string"),
    ("prompt: {label_words: {negative: ' negative', neutral: ' neutral', positive: ' positive',"
     " true: ' yes'}}",
     'prompt.label_words: key true is read as a boolean (bool), not a string; quote it: "true"'),
    ("prompt: {label_words: {negative: 0.5, neutral: ' neutral', positive: ' positive'}}",
     'prompt.label_words.negative: value 0.5 is read as a number (float), not a string; '
     'quote it: "0.5"'),
    ("prompt: {label_words: {negative: [a, b], neutral: ' neutral', positive: ' positive'}}",
     "prompt.label_words.negative: value ['a', 'b'] is read as a list, not a string"),
    # issue 40: no output can show a NUL or a lone surrogate
    ('prompt: {template: "a\\0b {text}"}',
     "prompt.template: holds U+0000 at character 2, which no output can show; remove it"),
    ('data: {source: "x\\ud800"}',
     "data.source: holds U+D800 at character 2, which no output can show; remove it"),
])
def test_a_class_name_that_is_not_a_string_says_to_quote_it(params_raw, override, message):
    raw = merge(params_raw, read_yaml(override, "override"))
    with pytest.raises(ParamsError) as err:
        parse_params(raw)
    assert str(err.value) == f"params.yaml: invalid params\n  {message}"


def test_every_class_name_that_is_not_a_string_is_named(tmp_path):
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    text = text.replace("    neg: negative\n", "    1: negative\n").replace(
        "    positive: ' positive'\n", "    positive: ' positive'\n    false: ' no'\n")
    (tmp_path / "params.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ParamsError) as err:
        load_params(tmp_path / "params.yaml")
    assert str(err.value) == "\n".join([
        f"{tmp_path / 'params.yaml'}: invalid params",
        '  base.label_aliases: key 1 is read as a number (int), not a string; quote it: "1"',
        '  prompt.label_words: key false is read as a boolean (bool), not a string; quote it: '
        '"false"'])


@pytest.mark.parametrize("value,expected", [("auto", "auto"), (";", ";"), ("|", "|"),
                                            ("\t", "\t"), ("\\t", "\t"), (",", ",")])
def test_separator_is_auto_or_one_character(params_raw, value, expected):
    params_raw["data"]["separator"] = value
    assert parse_params(params_raw).data.separator == expected


@pytest.mark.parametrize("value,message", [
    (";;", "data.separator: ';;' is neither auto nor one character (e.g. ';', or \"\\t\" for "
           "a tab)"),
    ("", "data.separator: '' is neither auto nor one character"),
    ("Auto", "data.separator: 'Auto' is neither auto nor one character"),
    ('"', "data.separator: '\"' cannot separate columns (it quotes fields or ends lines); use "
          "auto or another character"),
    ("\n", "data.separator: '\\n' cannot separate columns"),
    (1, "data.separator: input should be a valid string (got 1)"),
])
def test_bad_separator_is_named(params_raw, value, message):
    params_raw["data"]["separator"] = value
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert message in str(err.value)


def test_separator_is_in_params_yaml_after_label_column():
    lines = (REPO / "params.yaml").read_text(encoding="utf-8").splitlines()
    at = lines.index("  separator: auto               # auto: detected from a .csv header "
                     "(csv.Sniffer: , ; tab |) | one character, e.g. ';'")
    assert lines[at - 1].startswith("  label_column: label ")
    assert load_params(REPO / "params.yaml").data.separator == "auto"


def _changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """The removed and the added lines between two texts."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), n=0,
                                     lineterm=""))[2:]
    return ([ln[1:] for ln in diff if ln.startswith("-")],
            [ln[1:] for ln in diff if ln.startswith("+")])


# `dvc exp run -S KEY=VALUE` rewrites params.yaml with dvc.utils.hydra.apply_overrides
# (Hydra's override syntax). The file is committed in the layout that round trip writes,
# so each override changes only its key's lines.
@pytest.mark.parametrize("override,key,value", [
    ("train.lora.r=16", ("train", "lora", "r"), 16),
    ("base.seed=7", ("base", "seed"), 7),
    ("prompt.max_length=64", ("prompt", "max_length"), 64),
    ("train.eval_strategy=epoch", ("train", "eval_strategy"), "epoch"),
    ("evaluate.reference=majority", ("evaluate", "reference"), "majority"),
    ("evaluate.test_sets.reviews-zh.size=100", ("evaluate", "test_sets", "reviews-zh", "size"),
     100),
    ("data.separator=';'", ("data", "separator"), ";"),
    ("train.learning_rate=1e-5", ("train", "learning_rate"), 1e-5),
    ("train.accelerate_config=configs/accelerate/fsdp.yaml", ("train", "accelerate_config"),
     "configs/accelerate/fsdp.yaml"),
    ("train.lora.target_modules=[q_proj,v_proj]", ("train", "lora", "target_modules"),
     ["q_proj", "v_proj"]),
    ("base.labels=[no,maybe,yes]", ("base", "labels"), ["no", "maybe", "yes"]),
])
def test_dvc_set_param_changes_only_its_key(tmp_path, repo_params_raw, override, key, value):
    from dvc.utils.hydra import apply_overrides

    path = tmp_path / "params.yaml"
    path.write_text(committed("params.yaml"), encoding="utf-8")  # as repo_params_raw
    before = path.read_text(encoding="utf-8")
    apply_overrides(path, [override])
    after = path.read_text(encoding="utf-8")
    removed, added = _changed_lines(before, after)
    name = f"{'  ' * (len(key) - 1)}{key[-1]}:"
    if isinstance(value, list):  # the key's items, in block style, and nothing else
        lines = before.splitlines(keepends=True)
        at = next(i for i, ln in enumerate(lines) if ln.startswith(f"{name} ")
                  or ln == f"{name}\n")
        end = next(i for i in range(at + 1, len(lines))
                   if not lines[i].startswith(f"{'  ' * (len(key) - 1)}- "))
        items = [f"{'  ' * (len(key) - 1)}- {item}\n" for item in value]
        assert after == "".join(lines[:at + 1] + items + lines[end:])
    else:
        assert len(removed) == 1 and removed[0].startswith(f"{name} ")
        assert len(added) == 1 and added[0].startswith(f"{name} ")
        # the comment stays (a test set's keys have none: a preset replaces the sets)
        assert added[0].partition("#")[2] == removed[0].partition("#")[2]
    expected = merge(repo_params_raw, {})
    node = expected
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    assert read_yaml(after, path) == expected


def test_dvc_round_trip_of_params_yaml_changes_nothing(tmp_path):
    from dvc.utils.hydra import apply_overrides

    path = tmp_path / "params.yaml"
    shutil.copy(REPO / "params.yaml", path)
    for overrides in ([], ["train.lora.r=8"], ["train.eval_strategy=no"],
                      ["base.labels=[negative,neutral,positive]"]):
        apply_overrides(path, overrides)
        assert path.read_bytes() == (REPO / "params.yaml").read_bytes(), overrides


@pytest.mark.parametrize("label", [
    "<img src=x onerror=alert(1)>@user|#3`", "1.0", "pos.", "a|b", "@user", "#12",
    " negative", "negative ", "_neg", "x" * 51, "new\nline", "</details>",
])
def test_a_label_no_output_can_carry_is_refused_in_one_line(params_raw, label):
    params_raw["base"]["labels"] = ["negative", label]
    params_raw["prompt"]["label_words"] = {"negative": " negative", label: " other"}
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert str(err.value) == (
        f"params.yaml: invalid params\n  base.labels: label {label[:60]!r} breaks the rule for "
        "class names: 1 to 50 letters, digits, spaces, '_' or '-', starting and ending with a "
        "letter or digit (no '.', which splits DVC's metric keys, and no markup); rename it "
        "and map the data's name to it in base.label_aliases")


@pytest.mark.parametrize("labels", [["消极", "中性", "积极"], ["very negative", "so-so", "x_1"],
                                    ["0", "1"], ["no", "maybe", "yes"]])
def test_class_names_of_any_script_with_spaces_and_dashes_pass(params_raw, labels):
    params_raw["base"].update(labels=labels, label_aliases={})
    params_raw["prompt"]["label_words"] = {label: f" {label}" for label in labels}
    assert parse_params(params_raw).base.labels == tuple(labels)


# --------------------------------------- issue 51: names that do not show what they are

def _invalid(params_raw, labels, aliases=None):
    params_raw["base"].update(labels=labels, label_aliases=aliases or {})
    params_raw["prompt"]["label_words"] = {label: f" w{i}" for i, label in enumerate(labels)}
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert str(err.value).startswith("params.yaml: invalid params\n  ")
    assert "\n" not in str(err.value).removeprefix("params.yaml: invalid params\n")
    return str(err.value).removeprefix("params.yaml: invalid params\n  ")


@pytest.mark.parametrize(("label", "named"), [
    ("neg\u200bative", "U+200B ZERO WIDTH SPACE at character 4"),
    ("neg\u00adative", "U+00AD SOFT HYPHEN at character 4"),
    ("\ufeffnegative", "U+FEFF ZERO WIDTH NO-BREAK SPACE at character 1"),
    ("neg\u2060ative", "U+2060 WORD JOINER at character 4"),
    ("neg\u3164ative", "U+3164 HANGUL FILLER at character 4"),  # a letter to \w
    ("neg\u0600ative", "U+0600 ARABIC NUMBER SIGN at character 4"),  # Cf
])
def test_a_label_with_an_invisible_character_is_refused_naming_it(params_raw, label, named):
    assert _invalid(params_raw, ["positive", label]) == (
        f"base.labels: label {label!r} holds {named}, an invisible character (Unicode "
        "default-ignorable or format) that would make two names look the same; remove it")


def test_an_alias_with_an_invisible_character_is_refused_naming_it(params_raw):
    assert _invalid(params_raw, ["positive", "negative"], {"pos\u200b": "positive"}) == (
        "base.label_aliases: key 'pos\\u200b' holds U+200B ZERO WIDTH SPACE at character 4, "
        "an invisible character (Unicode default-ignorable or format) that would make two "
        "names look the same; remove it")


def test_a_decomposed_label_names_its_combining_mark_and_the_way_out(params_raw):
    assert _invalid(params_raw, ["cafe\u0301", "thé"]) == (
        "base.labels: label 'cafe\u0301' is written decomposed: U+0301 COMBINING ACUTE ACCENT "
        "at character 5 is a combining mark on the 'e' before it; write the label composed "
        "(Unicode NFC: 'caf\u00e9', with U+00E9 LATIN SMALL LETTER E WITH ACUTE), here and in "
        "prompt.label_words")


@pytest.mark.parametrize(("labels", "aliases", "message"), [
    (["positive", "ｐｏｓｉｔｉｖｅ"], {},
     "base.labels: 'positive' and 'ｐｏｓｉｔｉｖｅ' are one label"),
    (["Positive", "negative", "positive"], {}, "base.labels: 'Positive' and 'positive' are "
     "one label"),
    (["ﬁne", "fine"], {}, "base.labels: 'ﬁne' and 'fine' are one label"),
    (["pos", "neg"], {"ＮＥＧ": "pos"},
     "base.label_aliases: 'ＮＥＧ' maps to 'pos' but is the label 'neg'"),
    (["pos", "neg"], {"a": "pos", "Ａ": "neg"},
     "base.label_aliases: 'a' and 'Ａ' are one name"),
])
def test_names_equal_after_nfkc_are_refused_naming_both(params_raw, labels, aliases, message):
    found = _invalid(params_raw, labels, aliases)
    assert found.startswith(message)
    assert "once compared as the data's labels are (Unicode NFKC, trimmed, case folded)" \
        in found


def test_an_alias_equal_to_its_own_label_is_fine(params_raw):
    params_raw["base"].update(labels=["pos", "neg"], label_aliases={"POS": "pos",
                                                                     "Ｎｅｇ": "neg"})
    params_raw["prompt"]["label_words"] = {"pos": " p", "neg": " n"}
    assert parse_params(params_raw).base.label_aliases == {"POS": "pos", "Ｎｅｇ": "neg"}


LOOK = "; a reader could not tell them apart: rename one"


@pytest.mark.parametrize(("labels", "aliases", "message"), [
    (["negative", "neutral", "p\u043esitive"], {},
     "base.labels: label 'p\u043esitive' mixes scripts: U+043E CYRILLIC SMALL LETTER O at "
     "character 2 is Cyrillic in a Latin name, a look-alike of the Latin 'o'; write it in one "
     "script (lorasent.tables.mixed_script)"),
    (["negative", "positive", "\u0440\u043esitive"], {},
     "base.labels: label '\u0440\u043esitive' mixes scripts: U+0440 CYRILLIC SMALL LETTER ER "
     "at character 1 is Cyrillic in a Latin name, a look-alike of the Latin 'p'; write it in "
     "one script"),
    (["OA", "\u041e\u0410", "x"], {},
     "base.labels: 'OA' and '\u041e\u0410' look alike (all ASCII and U+041E CYRILLIC CAPITAL "
     "LETTER O, U+0410 CYRILLIC CAPITAL LETTER A)" + LOOK),
    (["negative", "neutral", "positive"], {"p\u043es": "positive"},
     "base.label_aliases: key 'p\u043es' mixes scripts: U+043E CYRILLIC SMALL LETTER O at "
     "character 2 is Cyrillic in a Latin name, a look-alike of the Latin 'o'"),
    (["no", "yes", "maybe"], {"\u043e\u0430": "yes", "oa": "no"},
     "base.label_aliases: 'oa' (all ASCII) maps to 'no' but looks like the alias "
     "'\u043e\u0430' (U+043E CYRILLIC SMALL LETTER O, U+0430 CYRILLIC SMALL LETTER A), which "
     "maps to 'yes'" + LOOK.replace("rename", "keep")),
    (["no", "yes", "maybe"], {"\u043e\u0430": "yes", "oa": "yes"}, None),
    (["OA", "yes", "maybe"], {"\u041e\u0410": "yes"},
     "base.label_aliases: '\u041e\u0410' (U+041E CYRILLIC CAPITAL LETTER O, U+0410 CYRILLIC "
     "CAPITAL LETTER A) maps to 'yes' but looks like the label 'OA'; remove the alias or map "
     "it to 'OA'"),
])
def test_a_label_of_mixed_scripts_or_like_another_is_refused_naming_the_look_alike(
        params_raw, labels, aliases, message):
    """Issue 62: a label with a Cyrillic `о` beside the Latin `positive` was accepted."""
    params_raw["base"]["labels"] = labels
    params_raw["base"]["label_aliases"] = aliases
    params_raw["prompt"]["label_words"] = {label: label for label in labels}
    if message is None:  # two spellings of one label's alias: a reader loses nothing
        assert parse_params(params_raw).base.labels == tuple(labels)
        return
    with pytest.raises(ParamsError) as err:
        parse_params(params_raw)
    assert message in str(err.value)


# Cyrillic and Greek letters each of which looks like the Latin letter beside it (UTS #39
# confusables.txt), typed here apart from lorasent.tables' own table.
LOOK_ALIKES = {
    "Cyrillic": dict(zip("aceijopsxyABCEHIJKMOPSTXY", "асеіјорѕхуАВСЕНІЈКМОРЅТХУ",
                         strict=True)),
    "Greek": dict(zip("aiovABEHIKMNOPTXYZ", "αιονΑΒΕΗΙΚΜΝΟΡΤΧΥΖ", strict=True)),
}


def _disguised(script):
    """Labels of Latin letters, each written wholly in ``script``'s look-alikes: every
    letter alone (doubled), and words of several."""
    table = LOOK_ALIKES[script]
    words = [c * 2 for c in table] + ["".join(table), "".join(reversed(table))]
    words += [w for w in ("cope", "hope", "pay", "spy", "OK", "TAXI", "BOX", "ox", "ape")
              if set(w) <= set(table)]
    return [(w, "".join(table[c] for c in w)) for w in words]


@pytest.mark.parametrize("script", list(LOOK_ALIKES))
def test_a_label_wholly_of_look_alikes_beside_other_scripts_is_refused(params_raw, script):
    """Issue 70: a label written wholly in Cyrillic or Greek letters that look like Latin
    ones (each label alone single-script) was taken beside Latin labels."""
    for latin, disguised in _disguised(script):
        for others in (["negative", "neutral"], ["积极", "消极"]):
            labels = [*others, disguised]
            message = _invalid(params_raw, labels)
            assert message.startswith(
                f"base.labels: label {disguised!r} is written wholly in {script} letters "
                f"that look like Latin ones (it reads as {latin.casefold()!r}; "), (latin, message)
            assert message.endswith(f"beside the label {others[0]!r}: write it in Latin "
                                    f"letters, or every label in {script}")
        # beside the Latin word it imitates: the two look alike
        assert _invalid(params_raw, [latin, disguised, "other"]).startswith(
            f"base.labels: {latin!r} and {disguised!r} look alike")


@pytest.mark.parametrize("labels", [
    ["\u043f\u043e\u0437\u0438\u0442\u0438\u0432", "negative"],  # Russian позитив: its own letters
    ["\u0440\u043e\u0435", "\u0441\u043e\u0445"],  # Cyrillic рое and сох: one script, read as such
    ["\u03b1\u03bd\u03bf", "\u03ba\u03b1\u03c4\u03c9"],  # Greek ανο and κατω
    ["积极", "消极"], ["positive", "negative"]])
def test_labels_of_their_scripts_own_letters_or_one_script_are_taken(params_raw, labels):
    params_raw["base"]["labels"] = labels
    params_raw["base"]["label_aliases"] = {}
    params_raw["prompt"]["label_words"] = {label: f" w{i}" for i, label in enumerate(labels)}
    assert parse_params(params_raw).base.labels == tuple(labels)


@pytest.mark.parametrize("labels", [["积极", "消极", "中性"], ["AI生成", "人工"],
                                    ["日本語", "テキスト", "ひらがな"], ["한국어", "中文"],
                                    ["négatif", "positif", "neutre"], ["neutral-2", "b_1"]])
def test_labels_of_one_script_or_an_allowed_mix_are_taken(params_raw, labels):
    params_raw["base"]["labels"] = labels
    params_raw["base"]["label_aliases"] = {}
    params_raw["prompt"]["label_words"] = {label: label for label in labels}
    assert parse_params(params_raw).base.labels == tuple(labels)
