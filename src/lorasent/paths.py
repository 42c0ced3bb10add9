"""Where each stage reads and writes, relative to the folder that holds params.yaml.

``dvc.yaml`` declares the same paths as each stage's deps and outs.
"""

import os
from pathlib import Path

RAW_DIR = Path("data/raw")                  # fetch: dataset.jsonl + manifest.json
BASE_MODEL_DIR = Path("models/base")        # fetch: HF folder + manifest.json
SPLIT_DIR = Path("data/split")              # split: {train,validation,test}.jsonl
ADAPTER_DIR = Path("models/adapter")        # train: LoRA adapter + lorasent.json, calibration.json
CHECKPOINT_DIR = Path("checkpoints")        # train: resumable checkpoints (git-ignored)

METRICS_DIR = Path("metrics")               # small files kept in git
DATA_REPORT = METRICS_DIR / "data.json"                          # split
BASELINE_METRICS = METRICS_DIR / "baseline.json"                 # baseline
BASELINE_PREDICTIONS = METRICS_DIR / "baseline_predictions.csv"  # baseline
BASELINE_CALIBRATED_PREDICTIONS = METRICS_DIR / "baseline_calibrated_predictions.csv"  # baseline
BASELINE_CONFUSION = METRICS_DIR / "baseline_confusion.json"     # baseline (DVC plot)
BASELINE_REFERENCES = METRICS_DIR / "references"                 # baseline: <reference>/<set>.csv
TRAIN_LIVE_DIR = METRICS_DIR / "train"                           # train (dvclive)
VALIDATION_METRICS = METRICS_DIR / "validation.json"             # train
EVAL_METRICS = METRICS_DIR / "eval.json"                         # evaluate
EVAL_PREDICTIONS = METRICS_DIR / "predictions.csv"               # evaluate
EVAL_CONFUSION = METRICS_DIR / "confusion.json"                  # evaluate (DVC plot)
EVAL_LABEL_ISSUES = METRICS_DIR / "label_issues.csv"            # evaluate
EVAL_RELIABILITY = METRICS_DIR / "reliability.json"             # evaluate (DVC plot)
EVAL_TEST_SETS = METRICS_DIR / "test_sets"                      # evaluate: one folder per set
PROVENANCE_DIR = METRICS_DIR / "provenance"                      # one record per stage

# The checkout this package runs from (src/lorasent/paths.py's grandparents: an editable
# install, as make setup makes): the bench and the device check copy and run it.
CHECKOUT = Path(__file__).resolve().parents[2]

MANIFEST = "manifest.json"
DATASET_FILE = "dataset.jsonl"
ADAPTER_RECORD = "lorasent.json"
CALIBRATION_RECORD = "calibration.json"  # the adapter's temperature scaling (train)


def cache_root() -> Path:
    """Where lorasent keeps what it can rebuild, outside the repo: converted packaged
    models (``lorasent.stages.fetch``) and the hashes of model files (``lorasent.modeling``).
    ``$LORASENT_CACHE``, or ``~/.cache/lorasent``."""
    return Path(os.environ.get("LORASENT_CACHE") or Path.home() / ".cache" / "lorasent")
