"""The train stage's checkpoints: the key of a training (:func:`training_key`, over the
code of :data:`TRAIN_CODE`), and :class:`Checkpoints`, which marks each checkpoint
Trainer writes with it, checks them (:func:`damage`), resumes the last good one, sets
damaged ones aside and removes them once the adapter is saved."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import json
import logging
import shutil
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from lorasent.atomic import read_json, write_json
from lorasent.environment import writing
from lorasent.errors import LorasentError
from lorasent.hashes import sha256_file
from lorasent.launch import barrier, is_main
from lorasent.params import BaseParams, PromptParams, TrainParams

# The train stage's messages: logged under its name, as its log has always shown them
# (docs/troubleshooting.md quotes them).
log = logging.getLogger("lorasent.stages.train")

# The modules whose code the adapter depends on: the train stage's deps in dvc.yaml (its
# import closure, checked by tests/test_dvc_deps.py).
TRAIN_CODE = ("stages.train", "training.callbacks", "training.checkpoints", "training.trainer",
              "addresses", "atomic", "baseline_params", "calibration", "characters",
              "command_errors", "commands.stages", "contracts", "dvc_project", "environment",
              "errors", "experiment_params", "frozen_weights", "git", "hashes", "launch",
              "metrics", "modeling", "modes", "params", "paths", "processes", "provenance",
              "reference_registry", "scoring", "section", "statistics", "subsets", "tables")
CHECKPOINT_RECORD = "lorasent-checkpoint.json"


def training_key(*, base: BaseParams, prompt: PromptParams, train: TrainParams,
                 inputs: dict[str, str], setting: dict[str, Any]) -> str:
    """SHA-256 (64 hex digits) of everything a training's steps depend on; a checkpoint
    is resumed only by a run with the same key.

    It covers the train stage's params (``base``, ``prompt`` and ``train``, as dvc.yaml
    lists them) less ``train.save_steps`` and ``train.resume``, which change when
    checkpoints are written and read, not what is trained; ``inputs``, the SHA-256 of the
    splits, the base model and an accelerate config; the code of :data:`TRAIN_CODE`; the
    versions of torch, transformers, peft and accelerate; and ``setting``: device, dtype
    and processes, which change the numbers and the RNG states a checkpoint holds.
    """
    record = {
        "params": {"base": base.model_dump(mode="json"), "prompt": prompt.model_dump(mode="json"),
                   "train": train.model_dump(mode="json", exclude={"save_steps", "resume"})},
        "inputs": inputs,
        "code": {name: sha256_file(inspect.getfile(importlib.import_module(f"lorasent.{name}")))
                 for name in TRAIN_CODE},
        "packages": {name: metadata.version(name)
                     for name in ("torch", "transformers", "peft", "accelerate")},
        "setting": setting,
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


class Checkpoints(TrainerCallback):
    """One training's checkpoints: Trainer's ``checkpoint-<step>`` folders in ``folder``.

    Trainer writes each (adapter, optimiser, scheduler, every process's RNG state, then
    ``trainer_state.json``) and keeps the last two (``save_total_limit``); this callback
    then adds :data:`CHECKPOINT_RECORD`, ``{"key": training_key, "step": N}``. A folder
    without it (killed while saving) or with another key is removed. One with the
    record whose files are missing or damaged (cut short, corrupt: :func:`damage`) was
    complete once, so it is set aside as ``damaged-checkpoint-<step>`` in ``folder``,
    kept for inspection and never resumed; training goes on from the last good one.
    """

    def __init__(self, folder: Path, key: str, processes: int):
        self.folder, self.key, self.processes = folder, key, processes

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        if state.is_world_process_zero:
            path = self.folder / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            with writing("a checkpoint", path, CHECKPOINT_SPACE_REMEDY):
                write_json(path / CHECKPOINT_RECORD, {"key": self.key, "step": state.global_step})

    def found(self) -> list[Path]:
        """The checkpoint folders, by step."""
        steps = {}
        for path in self.folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
            step = path.name.rsplit("-", 1)[1]
            if step.isdigit() and path.is_dir():
                steps[int(step)] = path
        return [steps[step] for step in sorted(steps)]

    def why_not(self, path: Path) -> str | None:
        """Why the checkpoint at ``path`` cannot be resumed; None when it can. A reason
        starting with :data:`DAMAGED` means its files are damaged (:func:`damage`)."""
        try:
            record = read_json(path / CHECKPOINT_RECORD)
        except (OSError, ValueError):
            return "incomplete: the run was stopped while saving it"
        if not isinstance(record, dict) or record.get("key") != self.key:
            return "from another training: its params, data, base model or code differ"
        with contextlib.suppress(OSError, ValueError, AttributeError):  # else damage() says
            state = read_json(path / "trainer_state.json")
            if 0 < state.get("max_steps", 0) <= state.get("global_step", 0):
                return LAST_STEP
        rng = (["rng_state.pth"] if self.processes == 1
               else [f"rng_state_{i}.pth" for i in range(self.processes)])
        problem = damage(path, rng)
        return None if problem is None else DAMAGED + problem

    def set_aside(self, path: Path) -> Path:
        """Move the checkpoint at ``path`` to ``damaged-<name>`` (``-2``, ``-3``, ... when
        taken) in the same folder, where Trainer neither resumes nor rotates it.

        Raises:
            LorasentError: it could not be moved, saying to delete it.
        """
        target, n = self.folder / f"damaged-{path.name}", 1
        while target.exists():
            n += 1
            target = self.folder / f"damaged-{path.name}-{n}"
        try:
            path.rename(target)
        except OSError as err:
            raise LorasentError(
                f"{path}: damaged and could not be set aside as {target} ({err}); delete "
                "it and run again") from err
        return target

    def prepare(self, resume: bool) -> Path | None:
        """The checkpoint to resume from, or None. The main process first removes every
        checkpoint that cannot be resumed (all of them when not ``resume``) and sets the
        damaged ones aside (:meth:`set_aside`), logging each with why, and logs when
        none is left to resume; the others wait for it."""
        verdicts: dict[Path, str | None] = {}
        if is_main():
            dropped = False
            for path in self.found():
                why = verdicts[path] = self.why_not(path) if resume else "train.resume is never"
                if why and why.startswith(DAMAGED):
                    log.warning("set aside %s as %s (%s); it is never resumed and kept for "
                                "inspection: delete it when done", path, self.set_aside(path),
                                why)
                elif why:
                    shutil.rmtree(path, ignore_errors=True)
                    log.info("removed %s (%s)", path, why)
                dropped = dropped or why is not None
            if resume and dropped and all(verdicts.values()):
                log.warning("no checkpoint in %s can be resumed: training starts at step 0",
                            self.folder)
        barrier()
        usable = [path for path in self.found() if resume and (
            verdicts[path] if path in verdicts else self.why_not(path)) is None]
        return usable[-1] if usable else None

    def remove(self) -> None:
        """Remove the checkpoints: the adapter is saved. Damaged ones set aside stay
        (logged), else the folder goes too."""
        for path in self.found():
            shutil.rmtree(path, ignore_errors=True)
        kept = sorted(p.name for p in self.folder.glob(f"damaged-{PREFIX_CHECKPOINT_DIR}-*"))
        if kept:
            log.warning("kept the damaged checkpoints %s in %s for inspection; delete them "
                        "when done", ", ".join(kept), self.folder)
        else:
            shutil.rmtree(self.folder, ignore_errors=True)


DAMAGED = "damaged: "
# Why the checkpoint of a training's last step is not resumed: Trainer (transformers 5)
# would train one step more from it when that step ends no epoch (it resumes the epoch
# and checks max_steps only after a step), so the checkpoint before it is resumed.
LAST_STEP = ("the training's last step: resumed from it, transformers would train one "
             "step more; the checkpoint before it is resumed instead")
# What a checkpoint must hold besides its RNG states: Trainer resumes without a missing
# optimiser or scheduler state, silently starting them afresh.
_ADAPTER_WEIGHTS = "adapter_model.safetensors"
_SCHEDULER = "scheduler.pt"
_OPTIMIZERS = ("optimizer.pt", "optimizer.bin")  # FSDP: optimizer.bin or optimizer_0/
CHECKPOINT_SPACE_REMEDY = ("make checkpoints/ a link to a folder on a larger disk, or set "
                           "train.save_steps: 0 to save no checkpoints")


def damage(path: Path, rng: list[str]) -> str | None:
    """What is wrong with the files of the checkpoint folder ``path`` (which holds a
    record, so Trainer finished writing it), or None. Checked without loading a tensor:

    - present: ``trainer_state.json``, ``adapter_model.safetensors``, ``scheduler.pt``,
      an optimiser state (``optimizer.pt``, or FSDP's ``optimizer.bin`` or
      ``optimizer*/`` folder) and the ``rng`` files;
    - ``trainer_state.json``: a JSON object whose ``global_step`` is the folder's step
      and whose ``max_steps`` is an integer;
    - every ``*.json``: JSON; every ``*.safetensors``: its header parses and covers the
      file (``safetensors.safe_open``); every ``*.pt``, ``*.pth``, ``*.bin`` (torch's
      zip format): a zip whose members all match their CRC-32 (``zipfile.testzip``).
    """
    from safetensors import SafetensorError, safe_open

    names = {p.name for p in path.iterdir()}
    optimizer = [n for n in names if n in _OPTIMIZERS or (
        n.startswith("optimizer") and (path / n).is_dir())]
    missing = [n for n in ("trainer_state.json", _ADAPTER_WEIGHTS, _SCHEDULER, *rng)
               if n not in names] + ([] if optimizer else ["optimizer.pt"])
    if missing:
        return f"{', '.join(missing)} missing"
    for name in sorted(names):
        file = path / name
        if not file.is_file():
            continue
        try:
            if name.endswith(".json"):
                data = json.loads(file.read_text(encoding="utf-8"))
                if name == "trainer_state.json":
                    step = int(path.name.rsplit("-", 1)[1])
                    if not isinstance(data, dict) or data.get("global_step") != step or (
                            not isinstance(data.get("max_steps"), int)):
                        return (f"{name} does not give global_step {step} and max_steps "
                                f"(it holds {_head(data)})")
            elif name.endswith(".safetensors"):
                with safe_open(str(file), framework="pt") as weights:
                    weights.keys()
            elif name.endswith((".pt", ".pth", ".bin")):
                with zipfile.ZipFile(file) as archive:
                    bad = archive.testzip()
                if bad is not None:
                    return f"{name} is corrupt (its member {bad} fails its CRC-32 check)"
        except (OSError, ValueError, zipfile.BadZipFile, SafetensorError) as err:
            return f"{name} is cut short or corrupt ({type(err).__name__}: {err})"
    return None


def _head(data: Any, chars: int = 60) -> str:
    """``data`` as compact JSON, cut to ``chars`` characters."""
    text = json.dumps(data, separators=(",", ":"))
    return text if len(text) <= chars else text[:chars] + "..."


def checkpoint_step(path: str | Path | None) -> int | None:
    """The step of Trainer's ``.../checkpoint-<step>`` folder, or None."""
    return int(str(path).rsplit("-", 1)[1]) if path else None

