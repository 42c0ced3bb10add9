"""configs/: every preset is valid params, names known sources, and merges as documented."""

import subprocess

import pytest
from click.testing import CliRunner

from conftest import REPO
from lorasent.cli import main
from lorasent.params import (
    ParamsError,
    apply_preset,
    load_params,
    merge,
    parse_params,
    read_yaml,
)
from lorasent.stages.fetch import dataset_source_kind, model_source_kind

PRESETS = sorted((REPO / "configs").glob("*.yaml"))
CPU_PRESETS = {"cpu-gemma270m-seqcls-tweets", "cpu-minilm-seqcls-tweets",
               "cpu-gemma270m-reviews-zh", "smoke"}


def test_the_seed_recipes_and_the_cpu_presets_are_there():
    assert {p.stem for p in PRESETS} == CPU_PRESETS | {"seed000-gemma-emotion-zh",
                                                       "seed002-gemma2b-imdb-seqcls"}


def test_smoke_is_the_default_run_made_tiny(repo_params_raw):
    """configs/smoke.yaml: the committed default (model, data, mode, prompt, LoRA) on a
    tiny split for a few steps, so a first run takes about two minutes on 2 cores."""
    path = REPO / "configs" / "smoke.yaml"
    default = parse_params(repo_params_raw)
    smoke = parse_params(merge(repo_params_raw, read_yaml(path.read_text("utf-8"), path)))
    assert (smoke.base, smoke.data, smoke.prompt, smoke.train.mode, smoke.train.lora) == (
        default.base, default.data, default.prompt, default.train.mode, default.train.lora)
    assert smoke.split.train_size <= 64 and smoke.split.test_size <= 64
    assert smoke.split.validation_size == 0 and smoke.train.eval_strategy == "no"
    steps = smoke.train.max_steps * smoke.train.per_device_train_batch_size
    assert 0 < smoke.train.max_steps <= 8 and steps <= smoke.split.train_size


def test_make_smoke_applies_the_smoke_preset_and_says_how_to_go_back():
    out = subprocess.run(["make", "-n", "smoke", "LORASENT_SYSTEM_PYTHON=1"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    preset = next(i for i, line in enumerate(lines)
                  if line.endswith("lorasent preset configs/smoke.yaml"))
    repro = next(i for i, line in enumerate(lines) if line.endswith("dvc repro"))
    assert preset < repro
    back = out.split("dvc repro", 1)[1]
    assert "git checkout params.yaml dvc.lock metrics, then make run" in back
    assert "dvc checkout" in back  # the adapter and splits too, where built before


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_preset_is_valid_and_names_known_sources(preset, repo_params_raw):
    text = preset.read_text(encoding="utf-8")
    opening = text.split("\nbase:")[0]
    assert text.startswith("# ") and "Hardware:" in opening and "Run: make run CONFIG=" in opening
    params = parse_params(merge(repo_params_raw, read_yaml(text, preset)), preset)
    data_kind = dataset_source_kind(params.data.source)
    model_kind = model_source_kind(params.base.model)
    if preset.stem in CPU_PRESETS:  # runs here offline
        assert (data_kind, model_kind) == ("packaged", "packaged")
    else:
        assert model_kind == "hub"


def test_seed_recipes_carry_the_seeds_hyperparameters(repo_params_raw):
    def load(name):
        path = REPO / "configs" / f"{name}.yaml"
        return parse_params(merge(repo_params_raw, read_yaml(path.read_text("utf-8"), path)))

    s0 = load("seed000-gemma-emotion-zh")
    assert s0.train.mode == "generative" and s0.base.labels == ("消极", "中性", "积极")
    assert (s0.train.lora.r, s0.train.lora.lora_alpha, s0.train.lora.lora_dropout) == (8, 16, 0.1)
    assert len(s0.train.lora.target_modules) == 7 and s0.train.learning_rate == 2e-4
    assert (s0.train.per_device_train_batch_size, s0.train.gradient_accumulation_steps,
            s0.train.num_train_epochs, s0.train.warmup_ratio) == (8, 2, 3, 0.03)
    assert (s0.prompt.max_length, s0.base.precision, s0.base.attn_implementation) == (
        512, "bf16", "sdpa")
    assert s0.prompt.template.startswith("判断下面这段话的情绪类别")
    s2 = load("seed002-gemma2b-imdb-seqcls")
    assert (s2.train.mode, s2.base.model, s2.data.source) == ("seq_cls", "google/gemma-2b",
                                                              "hf:imdb")
    assert (s2.train.lora.r, s2.train.lora.lora_alpha) == (8, 32)
    assert s2.train.lora.target_modules == ("q_proj", "v_proj")
    assert (s2.train.per_device_train_batch_size, s2.train.gradient_accumulation_steps,
            s2.train.num_train_epochs, s2.train.weight_decay) == (4, 4, 3, 0.01)
    assert (s2.prompt.max_length, s2.train.eval_strategy, s2.train.load_best_model_at_end) == (
        256, "epoch", True)


def test_apply_preset_keeps_comments_and_replaces_label_words_whole(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    result = apply_preset(REPO / "configs" / "cpu-gemma270m-reviews-zh.yaml", params)
    assert result.base.labels == ("negative", "positive")
    assert dict(result.prompt.label_words) == {"negative": "差评", "positive": "好评"}
    assert result.base.label_aliases == {}
    text = params.read_text(encoding="utf-8")
    assert "# LoRA rank (seed 000)" in text and "好评" in text
    assert load_params(params) == result
    # untouched keys keep their values
    assert result.train.lora.r == 8 and result.split.test_size == 600


def test_a_bad_preset_leaves_params_untouched(tmp_path):
    params = tmp_path / "params.yaml"
    original = (REPO / "params.yaml").read_text(encoding="utf-8")
    params.write_text(original, encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  lora:\n    rank: 4\n", encoding="utf-8")
    with pytest.raises(ParamsError,
                       match=r"bad.yaml: invalid params\n  train.lora.rank: unknown key"):
        apply_preset(bad, params)
    assert params.read_text(encoding="utf-8") == original
    result = CliRunner().invoke(main, ["preset", str(bad), "--params", str(params)])
    assert result.exit_code == 1 and "train.lora.rank: unknown key" in result.output


def test_make_run_config_applies_the_preset_before_dvc_repro():
    out = subprocess.run(["make", "-n", "run", "CONFIG=configs/cpu-minilm-seqcls-tweets.yaml",
                          "LORASENT_SYSTEM_PYTHON=1"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    preset = next(i for i, line in enumerate(out)
                  if line.endswith("lorasent preset configs/cpu-minilm-seqcls-tweets.yaml"))
    repro = next(i for i, line in enumerate(out) if "lorasent.run_pipeline" in line)  # dvc repro
    assert preset < repro


def _comments(text: str) -> list[str]:
    return [line[line.index("#"):] for line in text.splitlines() if "#" in line]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_apply_preset_writes_params_as_dvc_writes_them(preset, tmp_path):
    """After a preset, `dvc exp run -S` (DVC's ruamel round trip) changes no line but its
    key's: the preset wrote params.yaml in DVC's own layout, every comment kept."""
    from dvc.utils.hydra import apply_overrides

    params = tmp_path / "params.yaml"
    original = (REPO / "params.yaml").read_text(encoding="utf-8")
    params.write_text(original, encoding="utf-8")
    result = apply_preset(preset, params)
    applied = params.read_text(encoding="utf-8")
    assert _comments(applied) == _comments(original)
    assert load_params(params) == result
    apply_overrides(params, [])  # DVC's no-op round trip
    assert params.read_text(encoding="utf-8") == applied
    apply_overrides(params, ["base.seed=7"])
    changed = [(a, b) for a, b in zip(applied.splitlines(), params.read_text("utf-8").splitlines(),
                                      strict=True) if a != b]
    assert [(a.split("#")[0].strip(), b.split("#")[0].strip()) for a, b in changed] == [
        ("seed: 42", "seed: 7")]


def test_apply_preset_keeps_the_spelling_of_unchanged_values(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    apply_preset(REPO / "configs" / "seed000-gemma-emotion-zh.yaml", params)
    text = params.read_text(encoding="utf-8")
    assert "  learning_rate: 2.0e-4         # peak learning rate" in text  # not 0.0002
    assert "  template: |-\n    判断下面这段话的情绪类别" in text  # a block, as DVC keeps it
    assert "  - 消极\n  - 中性\n  - 积极\n" in text
