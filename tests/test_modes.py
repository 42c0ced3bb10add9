"""The table of modes (issue 29, item 3): what a mode must define, that the names of the
modes agree wherever a type names them, and that no module but lorasent.modes names a
mode, so that the code looks its mode up in the table instead of branching on the name.
"""

import ast
import dataclasses
from typing import Any, get_args

import pytest
from peft import TaskType

from conftest import REPO
from lorasent.contracts import AdapterRecord, EvalMetrics
from lorasent.modes import DEFAULT_MODE, MODES, Mode, ModeName, no_zero_shot_cell
from lorasent.params import TrainParams
from lorasent.scoring import ENCODERS, PromptEncoder
from lorasent.stages.train import mode_fields
from lorasent.tools.predict import Evaluation, export_readme

SRC = REPO / "src" / "lorasent"
LABELS = ["negative", "neutral", "positive"]


def test_a_mode_defines_these_values():
    assert [(f.name, f.type) for f in dataclasses.fields(Mode)] == [
        ("name", "ModeName"),                    # the train.mode value
        ("peft_task_type", "str"),               # LoraConfig.task_type
        ("head", "bool"),                        # loaded with a new K-way head, or as a causal LM
        ("encoder", "str"),                      # a class of lorasent.scoring.ENCODERS
        ("input_fields", "tuple[str, ...]"),     # record fields the input depends on
        ("record_fields", "tuple[str, ...]"),    # record fields this mode alone writes
        ("no_zero_shot", "str | None"),          # None: a zero-shot baseline; else why not
        ("no_zero_shot_note", "str | None"),     # the same in full, for baseline.json
        ("model_card", "str"),                   # the export's README template
    ]


@pytest.mark.parametrize("name", list(MODES))
def test_each_modes_values_are_ones_the_code_can_use(name):
    mode = MODES[name]
    assert mode.name == name
    assert mode.peft_task_type in {task.value for task in TaskType}
    assert mode.encoder in ENCODERS
    fields = AdapterRecord.model_fields
    assert set(mode.input_fields) <= set(fields) and "max_length" in mode.input_fields
    # the fields a mode alone writes are optional: a record of another mode leaves them out
    assert mode.record_fields and all(not fields[f].is_required() for f in mode.record_fields)
    assert set(mode.input_fields) - {"max_length"} <= set(mode.record_fields)
    assert (mode.no_zero_shot is None) == (mode.no_zero_shot_note is None) == mode.zero_shot


def test_the_modes_write_disjoint_record_fields_that_are_all_the_mode_only_ones():
    written = [f for mode in MODES.values() for f in mode.record_fields]
    assert len(written) == len(set(written))
    optional = {name for name, f in AdapterRecord.model_fields.items() if not f.is_required()}
    assert set(written) == optional - {"exported_from"}


def test_the_mode_names_are_the_tables_keys_wherever_a_type_names_them():
    assert get_args(ModeName) == tuple(MODES)
    assert DEFAULT_MODE in MODES
    for model in (TrainParams, AdapterRecord, EvalMetrics):  # EvalMetrics': or None
        assert _strings(model.model_fields["mode"].annotation) == list(MODES), model


def _strings(annotation: Any) -> list[str]:
    """The strings a Literal (in a union or not) admits, in order."""
    args = get_args(annotation)
    return [a for arg in args for a in ([arg] if isinstance(arg, str) else _strings(arg))]


def _names_of_modes(path) -> list[str]:
    """``file:line: 'name'`` for each string in ``path``'s code that is a mode's name
    (a comparison, a default, a key, a Literal); docstrings and messages that name a mode
    within a sentence are not one."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in MODES]


def test_no_module_but_the_table_names_a_mode():
    sources = sorted(SRC.rglob("*.py"))
    assert SRC / "modes.py" in sources and SRC / "review" / "compare.py" in sources
    found = [hit for path in sources if path != SRC / "modes.py" for hit in _names_of_modes(path)]
    assert found == [], ("look the mode up in lorasent.modes.MODES instead of naming it:\n"
                         + "\n".join(found))
    assert _names_of_modes(SRC / "modes.py")  # the check finds a name where there is one


def test_the_record_fields_of_each_mode_are_made_by_the_train_stage():
    prompt: Any = type("Prompt", (), {"template": "Text: {text}\nSentiment:",
                                      "label_words": {label: f" {label}" for label in LABELS}})
    encoder = PromptEncoder(None, prompt.template, ((1,), (2, 3), (4,)), 64)  # type: ignore[arg-type]
    model: Any = type("Peft", (), {"modules_to_save": {"score", "classifier"}})
    made = {name: mode_fields(mode, prompt=prompt, labels=LABELS, encoder=encoder, model=model)
            for name, mode in MODES.items()}
    assert made == {
        "generative": {"label_words": [" negative", " neutral", " positive"],
                       "label_token_ids": [[1], [2, 3], [4]],
                       "template": "Text: {text}\nSentiment:"},
        "seq_cls": {"head": ["classifier", "score"]}}
    assert {name: list(fields) for name, fields in made.items()} == {
        name: list(mode.record_fields) for name, mode in MODES.items()}


@pytest.mark.parametrize("name", list(MODES))
def test_each_modes_model_card_is_filled_by_the_export(name):
    mode = MODES[name]
    record = AdapterRecord.model_validate({
        "mode": name, "labels": LABELS, "label2id": {label: i for i, label in enumerate(LABELS)},
        "max_length": 128, "base_model": {"source": "hf:x/y", "sha256": "b" * 64},
        "params": {}, **({"template": "Text: {text}", "label_words": LABELS,
                          "label_token_ids": [[1], [2], [3]]}
                         if "template" in mode.record_fields else {"head": ["score"]})})
    card = export_readme(record, "models/adapter", Evaluation(None, REPO, "none given"))
    assert card.startswith("# negative / neutral / positive classifier")
    assert "hf:x/y" in card and "{" + "evaluation}" not in card
    assert ("max_length=128" in card) == (name == "seq_cls")


def test_a_table_names_why_a_mode_has_no_zero_shot_baseline():
    assert no_zero_shot_cell("seq_cls") == "none (seq_cls: a fresh head has no zero-shot answer)"
    assert no_zero_shot_cell("generative") == "none"  # it has one: its scores are missing
    assert no_zero_shot_cell(None) == no_zero_shot_cell("other") == "none"
