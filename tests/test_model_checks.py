"""The base model is checked by its files' bytes; label words that cannot win are refused.

Issue 27, items 4 and 5: a ``models/base`` whose ``config.json`` (weights, tokenizer)
was edited after fetch, its manifest left as it was, is refused when an adapter is
loaded on it (predict, export, evaluate), naming the file; label words whose tokens
start another's (``' 1'`` and ``' 10'``) fail before any weights load.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from lorasent import modeling
from lorasent.atomic import jsonl_text
from lorasent.cli import main
from lorasent.hashes import combined_sha256, sha256_file, sha256_tree
from lorasent.modeling import (
    BaseModelChangedError,
    check_base_files,
    load_model_and_prompt,
    load_tokenizer,
    load_trained_model,
    model_file_hashes,
)
from lorasent.params import merge, parse_params
from lorasent.paths import cache_root
from lorasent.scoring import PromptError, label_token_ids
from lorasent.stages.fetch import fetch_model

ADAPTER = "models/adapter"


def fix(base: Path, adapter: str = ADAPTER) -> str:
    return (f"{adapter} was trained on the fetched files: run `dvc checkout {base}` to "
            "restore them, or, to use a changed model, copy it to a folder of its own, set "
            "base.model to that folder and run `dvc repro` to retrain")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh LORASENT_CACHE, where the model files' hashes are kept."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("LORASENT_CACHE", str(folder))
    return folder


@pytest.fixture
def base(tmp_path: Path, cache: Path) -> Path:
    """A small model folder fetched as fetch writes models/base (bytes, never loaded)."""
    source = tmp_path / "source"
    source.mkdir()
    for name, text in {"config.json": '{"layer_norm_eps": 1e-12}\n',
                       "model.safetensors": "weights", "tokenizer.json": '{"vocab": []}\n',
                       "tokenizer_config.json": "{}\n"}.items():
        (source / name).write_text(text, encoding="utf-8")
    fetch_model(str(source), tmp_path / "base")
    return tmp_path / "base"


def counting_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files :func:`model_file_hashes` reads, in order."""
    read: list[str] = []

    def counting(path: Path) -> str:
        read.append(Path(path).name)
        return sha256_file(path)

    monkeypatch.setattr(modeling, "sha256_file", counting)
    return read


# ------------------------------------------------------------------ item 4: base files

def test_fetched_base_passes(base: Path) -> None:
    check_base_files(base, adapter_dir=ADAPTER)
    manifest = json.loads((base / "manifest.json").read_text())
    assert model_file_hashes(base) == manifest["files"]


def test_edited_config_is_refused_naming_the_file(base: Path) -> None:
    (base / "config.json").write_text('{"layer_norm_eps": 1e-3}\n', encoding="utf-8")
    with pytest.raises(BaseModelChangedError) as err:
        check_base_files(base, adapter_dir=ADAPTER)
    assert str(err.value) == (
        f"{base}: its files are not those {base / 'manifest.json'} lists (changed: "
        "config.json; compared by SHA-256), so it is not the model it was fetched as; "
        + fix(base))


def test_baseline_and_train_check_a_fetched_base_too(base: Path, params: Any) -> None:
    """load_model_and_prompt (baseline, train): the same check, before the tokenizer."""
    (base / "tokenizer.json").write_text('{"vocab": ["x"]}\n', encoding="utf-8")
    with pytest.raises(BaseModelChangedError) as err:
        load_model_and_prompt(base, base=params.base, prompt=params.prompt)
    assert str(err.value) == (
        f"{base}: its files are not those {base / 'manifest.json'} lists (changed: "
        "tokenizer.json; compared by SHA-256), so it is not the model it was fetched as; "
        f"run `dvc checkout {base}` to restore the fetched files, or, to use a changed model, "
        "copy it to a folder of its own, set base.model to that folder and run `dvc repro`")


def test_changed_missing_and_added_files_are_all_named(base: Path) -> None:
    (base / "model.safetensors").write_text("weightz", encoding="utf-8")
    (base / "tokenizer.json").unlink()
    (base / "added_tokens.json").write_text("{}\n", encoding="utf-8")
    with pytest.raises(BaseModelChangedError) as err:
        check_base_files(base, adapter_dir="other/adapter")
    assert str(err.value) == (
        f"{base}: its files are not those {base / 'manifest.json'} lists (changed: "
        "model.safetensors; missing: tokenizer.json; not in the manifest: added_tokens.json; "
        "compared by SHA-256), so it is not the model it was fetched as; "
        + fix(base, "other/adapter"))


def test_manifest_edited_to_match_the_files_is_refused(base: Path) -> None:
    """config.json edited and its hash in the list too, the total left as the record has."""
    (base / "config.json").write_text('{"layer_norm_eps": 1e-3}\n', encoding="utf-8")
    manifest = json.loads((base / "manifest.json").read_text())
    manifest["files"] = model_file_hashes(base)
    assert combined_sha256(manifest["files"]) != manifest["sha256"]
    (base / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(BaseModelChangedError) as err:
        check_base_files(base, adapter_dir=ADAPTER)
    assert str(err.value) == (f"{base / 'manifest.json'}: its file list does not add up to "
                              f"its sha256 (the manifest was edited); {fix(base)}")


@pytest.mark.parametrize(("text", "expected"), [
    ("{", "not valid JSON (Expecting property name enclosed in double quotes: line 1 column "
          "2 (char 1)); run `dvc checkout {base}` to restore the fetched model, or "
          "`lorasent fetch` to fetch it again"),
    ("[]", "not a JSON object; run `dvc checkout {base}` to restore the fetched model"),
    ('{"sha256": "ab"}', "lists no files (key 'files'), so {base} cannot be checked; {fix}"),
])
def test_damaged_manifest_is_named(base: Path, text: str, expected: str) -> None:
    (base / "manifest.json").write_text(text, encoding="utf-8")
    with pytest.raises(BaseModelChangedError) as err:
        check_base_files(base, adapter_dir=ADAPTER)
    assert str(err.value) == (f"{base / 'manifest.json'}: "
                              + expected.format(base=base, fix=fix(base)))


def test_hashes_are_kept_outside_the_model_and_reused_until_a_file_changes(
        base: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(modeling, "RACY_NS", 0)
    before = sorted(p.name for p in base.iterdir())
    read = counting_hashes(monkeypatch)
    check_base_files(base, adapter_dir=ADAPTER)
    assert read == ["config.json", "model.safetensors", "tokenizer.json",
                    "tokenizer_config.json"]
    kept = json.loads((modeling.hash_cache_path()).read_text())
    assert sorted(kept) == sorted(str((base / name).resolve()) for name in read)
    assert sorted(p.name for p in base.iterdir()) == before  # nothing written into it

    read.clear()
    check_base_files(base, adapter_dir=ADAPTER)
    assert read == []  # all four reused

    # the same size and mtime put back: ctime still moves, so the file is read again
    config = base / "config.json"
    stat = config.stat()
    while config.stat().st_ctime_ns == stat.st_ctime_ns:  # a new tick of the fs clock
        config.write_text('{"layer_norm_eps": 1e-13}\n', encoding="utf-8")
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (config.stat().st_size, config.stat().st_mtime_ns) == (stat.st_size,
                                                                   stat.st_mtime_ns)
    with pytest.raises(BaseModelChangedError, match=r"\(changed: config\.json; "):
        check_base_files(base, adapter_dir=ADAPTER)
    assert read == ["config.json"]


@pytest.mark.parametrize("env", ["", "elsewhere"])
def test_hashes_are_kept_in_the_cache_of_converted_models(
        env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LORASENT_CACHE", str(tmp_path / env) if env else "")
    expected = tmp_path / env if env else Path.home() / ".cache" / "lorasent"
    assert modeling.hash_cache_path() == cache_root() / "file-hashes.json"
    assert modeling.hash_cache_path() == expected / "file-hashes.json"


def test_a_file_changed_just_now_is_not_kept(base: Path, cache: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Within RACY_NS of a write, a second write may leave the same coarse timestamps."""
    monkeypatch.setattr(modeling, "RACY_NS", 3600 * 10**9)
    read = counting_hashes(monkeypatch)
    check_base_files(base, adapter_dir=ADAPTER)
    check_base_files(base, adapter_dir=ADAPTER)
    assert len(read) == 8  # both calls read all four files
    assert not (modeling.hash_cache_path()).exists()


def test_an_unusable_hash_cache_only_costs_the_hashing(base: Path, cache: Path) -> None:
    cache.mkdir()
    (modeling.hash_cache_path()).write_text("[not json", encoding="utf-8")
    check_base_files(base, adapter_dir=ADAPTER)
    (base / "config.json").write_text("{}\n", encoding="utf-8")
    with pytest.raises(BaseModelChangedError, match=r"\(changed: config\.json; "):
        check_base_files(base, adapter_dir=ADAPTER)


@pytest.fixture(scope="module")
def minilm_adapter(tmp_path_factory: pytest.TempPathFactory, minilm_run_params: Any,
                   minilm_dir: Path, split_dir: Path) -> Path:
    """A MiniLM seq_cls adapter of 2 steps, trained on ``minilm_dir``."""
    from conftest import train_in

    folder = tmp_path_factory.mktemp("minilm-adapter")
    train_in(folder, minilm_run_params, minilm_dir, split_dir)
    return folder / "adapter"


@pytest.fixture(scope="module")
def minilm_run_params(repo_params_raw: dict[str, Any]) -> Any:
    """conftest's ``minilm_params()``, for a module-wide adapter."""
    from conftest import LABELS

    preset = {"base": {"model": "packaged:minilm-l6", "labels": LABELS},
              "prompt": {"max_length": 32},
              "train": {"mode": "seq_cls", "max_steps": 2, "per_device_train_batch_size": 4,
                        "learning_rate": 1e-3, "logging_steps": 1,
                        "lora": {"target_modules": ["query", "value"]}}}
    return parse_params(merge(repo_params_raw, preset))


@pytest.mark.integration
def test_predict_refuses_a_base_whose_config_was_edited(
        minilm_adapter: Path, minilm_dir: Path, tmp_path: Path, cache: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    edited = tmp_path / "base"
    shutil.copytree(minilm_dir, edited)
    load_trained_model(minilm_adapter, edited, device="cpu")  # the copy passes
    config = json.loads((edited / "config.json").read_text())
    config["layer_norm_eps"] = 1e-3  # changes every prediction
    (edited / "config.json").write_text(json.dumps(config), encoding="utf-8")

    message = (f"{edited}: its files are not those {edited / 'manifest.json'} lists (changed: "
               "config.json; compared by SHA-256), so it is not the model it was fetched as; "
               + fix(edited, str(minilm_adapter)))
    with pytest.raises(BaseModelChangedError) as err:
        load_trained_model(minilm_adapter, edited, device="cpu")
    assert str(err.value) == message

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["predict", "--adapter", str(minilm_adapter), "--base",
                                       str(edited), "--output", "out.csv", "a text"])
    assert result.exit_code == 1
    assert result.stderr == f"lorasent predict: error: {message}\n"
    assert not (tmp_path / "out.csv").exists()


# ------------------------------------------------------- item 5: label words that never win

@pytest.fixture(scope="module")
def tokenizer(packaged_model_dir: Path) -> Any:
    """The packaged Gemma 3 270M's tokenizer (no weights loaded)."""
    return load_tokenizer(packaged_model_dir)


ONE_TEN = ("prompt.label_words: ' 1' (tokens ['▁', '1'] ids [236743, 236770]) is the start "
           "of ' 10' (tokens ['▁', '1', '0'] ids [236743, 236770, 236771]), so ' 10' can never "
           "be predicted (a word's score sums the log-probabilities of its tokens, and each "
           "token after the shorter word's lowers it). Give each label word a distinct first "
           "token, or end every label word with a delimiter such as a full stop or newline "
           "(e.g. ' 1.' and ' 10.')")


@pytest.mark.integration
def test_a_label_word_that_starts_another_is_refused(tokenizer: Any) -> None:
    with pytest.raises(PromptError) as err:
        label_token_ids(tokenizer, [" 1", " 2", " 10"])
    assert str(err.value) == ONE_TEN


@pytest.mark.integration
def test_every_prefix_pair_is_named(tokenizer: Any) -> None:
    with pytest.raises(PromptError) as err:
        label_token_ids(tokenizer, ["时政", "时", "时差"])
    assert str(err.value) == (
        "prompt.label_words: '时' (tokens ['时'] ids [237298]) is the start of '时政' (tokens "
        "['时', '政'] ids [237298, 238079]); '时' (tokens ['时'] ids [237298]) is the start of "
        "'时差' (tokens ['时', '差'] ids [237298, 238575]), so '时政' and '时差' can never be "
        "predicted (a word's score sums the log-probabilities of its tokens, and each token "
        "after the shorter word's lowers it). Give each label word a distinct first token, or "
        "end every label word with a delimiter such as a full stop or newline (e.g. '时.' and "
        "'时政.')")


@pytest.mark.integration
def test_words_that_share_first_tokens_only_are_kept(tokenizer: Any) -> None:
    assert label_token_ids(tokenizer, ["时政", "时差"]) == [(237298, 238079), (237298, 238575)]
    # the advice works: a full stop after each word ends the shared start
    assert label_token_ids(tokenizer, [" 1.", " 10.", " 2."]) == [
        (236743, 236770, 236761), (236743, 236770, 236771, 236761), (236743, 236778, 236761)]


@pytest.mark.integration
def test_words_with_the_same_tokens_are_refused(tokenizer: Any) -> None:
    with pytest.raises(PromptError) as err:
        label_token_ids(tokenizer, [" good", " bad", " good"])
    assert str(err.value) == ("prompt.label_words: ' good' and ' good' encode to the same "
                              "tokens (tokens ['▁good'] ids [1535]); choose words that differ")


def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loading a model's weights fail the test: the check comes before them."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the weights were loaded before the label words were checked")

    monkeypatch.setattr(modeling, "load_causal_lm", refuse)
    monkeypatch.setattr(modeling, "load_seq_cls", refuse)


RATINGS = {"negative": " 1", "neutral": " 2", "positive": " 10"}


@pytest.mark.integration
def test_baseline_fails_before_loading_weights(
        tmp_path: Path, repo_params_raw: dict[str, Any], packaged_model_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`lorasent baseline`, the first stage with a tokenizer: one line, no traceback."""
    no_weights(monkeypatch)
    raw = merge(repo_params_raw, {"prompt": {"label_words": RATINGS}})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True),
                                          encoding="utf-8")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "base").symlink_to(packaged_model_dir)
    (tmp_path / "data" / "split").mkdir(parents=True)
    rows = [{"id": i, "text": f"text {i}", "label": label, "label_id": i}
            for i, label in enumerate(raw["base"]["labels"])]
    for name in ("train", "test"):
        (tmp_path / "data" / "split" / f"{name}.jsonl").write_text(jsonl_text(rows))
    result = CliRunner().invoke(main, ["baseline", "--params", str(tmp_path / "params.yaml")])
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == f"lorasent baseline: error: {ONE_TEN}"
    assert not (tmp_path / "metrics" / "baseline.json").exists()


@pytest.mark.integration
def test_train_and_baseline_share_the_check(packaged_model_dir: Path,
                                            repo_params_raw: dict[str, Any],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    no_weights(monkeypatch)
    params = parse_params(merge(repo_params_raw, {"prompt": {"label_words": RATINGS}}))
    with pytest.raises(PromptError) as err:
        load_model_and_prompt(packaged_model_dir, base=params.base, prompt=params.prompt)
    assert str(err.value) == ONE_TEN


@pytest.mark.integration
def test_predict_refuses_a_recorded_prefix_before_loading_weights(
        tmp_path: Path, packaged_model_dir: Path, repo_params_raw: dict[str, Any],
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An adapter record from before the check (predict, export, evaluate load it)."""
    no_weights(monkeypatch)
    base = tmp_path / "base"
    base.mkdir()
    for path in packaged_model_dir.iterdir():
        (base / path.name).symlink_to(path)
    files = sha256_tree(base)
    (base / "manifest.json").write_text(json.dumps(
        {"source": "packaged:gemma-3-270m", "files": files, "sha256": combined_sha256(files)}))
    params = parse_params(repo_params_raw)
    labels = list(params.base.labels)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "lorasent.json").write_text(json.dumps({
        "mode": "generative", "labels": labels,
        "label2id": {label: i for i, label in enumerate(labels)},
        "max_length": params.prompt.max_length,
        "base_model": {"source": "packaged:gemma-3-270m", "sha256": combined_sha256(files)},
        "params": params.model_dump(mode="json"), "template": params.prompt.template,
        "label_words": [RATINGS[label] for label in labels]}))
    result = CliRunner().invoke(main, ["predict", "--adapter", str(adapter), "--base",
                                       str(base), "a text"])
    assert result.exit_code == 1, result.output
    assert result.stderr == f"lorasent predict: error: {ONE_TEN}\n"
