"""The numbers README.md and docs/ give of the committed run and of the last bench are the
committed files' own: each is computed here from ``metrics/``, ``bench/results.json``,
``dvc.lock`` and ``params.yaml`` as committed (``conftest.committed``: git's index, never
the files a ``make run`` or ``make bench`` left in the workspace) and looked for, as the
docs word it, in the page (line breaks do not matter). A number measured once and kept in
no committed file (a wall time) is stamped with the commit it was measured at,
``(measured at commit abc1234)``, and the stamp must name a commit of this history. No
page presents a result "measured before" something: such a table is rerun or removed.

A rerun that commits new metrics or bench results changes these numbers: the failing
test names the page and the sentence to update.
"""

import json
import re
import subprocess
from functools import cache
from typing import Any

import pytest

from conftest import REPO, committed
from lorasent.contracts import REFERENCE_NAMES
from lorasent.metrics import read_predictions
from lorasent.params import read_yaml
from lorasent.review.verdict import measured_text, paired_verdict
from lorasent.statistics import paired_comparison, with_interval

PAGES = ["README.md", *sorted(str(page.relative_to(REPO)) for page in (REPO / "docs").glob("*.md"))]
# Stamps are for the few numbers no committed file holds; more than this means numbers
# that should come from metrics/ or bench/ instead. The committed run's stage times are one
# (since issue 41 they live in the git-ignored machine records); the push and pull times
# over SSH and S3 of docs/sharing.md another (issue 53: tests/test_cloud_remotes.py prints
# them, no file keeps them).
MAX_STAMPS = 10
STAMP = re.compile(r"(?:measured|written) at commit ([0-9a-f]{7,40})")
COMPARE = re.compile(r"`A=([0-9a-f]{7,40}) B=([0-9a-f]{7,40})`")


def load(path: str) -> Any:
    return json.loads(committed(path))


EVAL = load("metrics/eval.json")
BASELINE = load("metrics/baseline.json")
DATA = load("metrics/data.json")
TRAIN = load("metrics/train/metrics.json")
PROVENANCE = {stage: load(f"metrics/provenance/{stage}.json")
              for stage in ("baseline", "train", "evaluate")}
BENCH = load("bench/results.json")
PARAMS = read_yaml(committed("params.yaml"), "params.yaml")
LOCK = read_yaml(committed("dvc.lock"), "dvc.lock")


def page(name: str) -> str:
    """The page's text with every run of whitespace (line breaks too) made one space."""
    return " ".join((REPO / name).read_text(encoding="utf-8").split())


def n3(value: float) -> str:
    return f"{value:.3f}"


def interval(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]"


def ci(values: dict[str, Any], key: str) -> str:
    return f"{n3(values[key])} {interval(values[f'{key}_ci95_low'], values[f'{key}_ci95_high'])}"


def duration(seconds: float) -> str:
    """``4 min 33 s``, or ``54 s`` under a minute."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def gib(size: float) -> str:
    return f"{size / 2**30:.1f} GiB"


def out_size(stage: str, path: str) -> int:
    return next(out["size"] for out in LOCK["stages"][stage]["outs"] if out["path"] == path)


# ------------------------------------------------------------------ the committed run


def run_machine() -> str:
    """The machine of the committed run as the README and performance.md say it: what
    provenance tracks (no memory: a machine fact, issue 50)."""
    device = PROVENANCE["train"]["device"]
    gpu = "no GPU" if device["cuda"] is None and device["hip"] is None else "a GPU"
    return (f"{device['cpu_count']} cores ({device['cpu']}, torch's "
            f"{device['kernels']['torch_cpu_capability']} kernels), {gpu}, torch "
            f"{device['torch'].split('+')[0]} CPU build")


def reduction(ref: dict[str, Any]) -> str:
    """``0.551 [0.489, 0.610]``: a relative error reduction of ``references`` with its
    interval."""
    low, high = (ref[f"relative_error_reduction_ci95_{end}"] for end in ("low", "high"))
    return f"{n3(ref['relative_error_reduction'])} {interval(low, high)}"


def headline() -> list[str]:
    """The sentences of the relative error reduction against each reference and the
    per-class F1."""
    reference = EVAL["reference_accuracy"]
    name = REFERENCE_NAMES[EVAL["reference"]]
    low, high = (EVAL[f"relative_error_reduction_ci95_{end}"] for end in ("low", "high"))
    # in test rows answered right, so that the arithmetic checks by hand (the rounded
    # accuracies give another third decimal)
    rows = EVAL["test_rows"]
    right, ref_right = (round(accuracy * rows) for accuracy in (EVAL["accuracy"], reference))
    others = "; ".join(f"against the {REFERENCE_NAMES[other]} baseline, {reduction(ref)}"
                       for other, ref in EVAL["references"].items()
                       if ref is not None and other != EVAL["reference"])
    return [
        f"Relative error reduction against the {name} baseline",
        f"({right} − {ref_right}) / ({rows} − {ref_right}) = "
        f"**{n3(EVAL['relative_error_reduction'])}** {interval(low, high)}; {others}.",
        "Per class (F1): " + ", ".join(f"{label} {n3(EVAL['per_class'][label]['f1'])}"
                                       for label in EVAL["labels"]) + ".",
        f"95% percentile-bootstrap intervals over the {EVAL['test_rows']} test tweets",
    ]


def calibration_numbers() -> list[str]:
    """The calibrated zero-shot row of the README's table; performance.md's sentences of
    the calibration, the second test set and the audit."""
    c, scaled = EVAL["calibration"], EVAL["calibration"]["scaled"]
    extra = EVAL["test_sets"]["reviews-zh"]
    issues = EVAL["label_issues"]
    zero_shot = BASELINE["zero_shot_calibrated"]
    return [
        f"| zero-shot with contextual calibration (Zhao et al. 2021) | "
        f"{ci(zero_shot, 'accuracy')} | {ci(zero_shot, 'macro_f1')} |",
        f"ECE {ci(c, 'ece')} of the raw probabilities, {ci(scaled, 'ece')} after temperature "
        f"scaling (T = {c['temperature']:.2f}, fitted on the "
        f"{DATA['split_rows']['validation']} validation tweets); NLL {n3(c['nll'])} → "
        f"{n3(scaled['nll'])}, Brier score {n3(c['brier'])} → {n3(scaled['brier'])}.",
        f"{extra['test_rows']} packaged Chinese shopping reviews (`reviews-zh`",
        f"accuracy {ci(extra, 'accuracy')}, macro-F1 {ci(extra, 'macro_f1')}; the "
        f"majority-class baseline {n3(extra['baseline']['majority_accuracy'])}, the zero-shot "
        f"{n3(extra['baseline']['zero_shot_accuracy'])}, the calibrated zero-shot "
        f"{n3(extra['baseline']['zero_shot_calibrated_accuracy'])}; relative error "
        f"reduction {ci(extra, 'relative_error_reduction')} against the "
        f"{REFERENCE_NAMES[extra['reference']]} baseline.",
        f"flags {issues['rows']} of the {EVAL['test_rows']} test tweets ({issues['share']:.1%})",
    ]


def paired_cell(name: str) -> str:
    """The README table's cell of the adapter minus reference ``name`` on the same rows."""
    p = EVAL["references"][name]["paired"]
    delta = with_interval(p["delta_accuracy"], p["delta_accuracy_ci95_low"],
                          p["delta_accuracy_ci95_high"], digits=3, signed=True, minus="−")
    return f"{delta}, McNemar p {p['mcnemar_p']:.2g}: {p['verdict']}"


def readme_numbers() -> list[str]:
    zero_shot = BASELINE["zero_shot"]
    epochs = PARAMS["train"]["num_train_epochs"]
    train_rows = DATA["split_rows"]["train"]
    tfidf = EVAL["references"]["tfidf_lr"]
    return [
        f"LoRA on {train_rows:,} real English tweets ({len(EVAL['labels'])} classes",
        f"then scores {DATA['split_rows']['test']} held-out tweets",
        run_machine(),
        f"| majority-class baseline (always `{BASELINE['majority_class']}`) | "
        f"{n3(BASELINE['majority_accuracy'])} | – | {paired_cell('majority')} | none |",
        f"| zero-shot Gemma 3 270M (same prompt and scoring) | {ci(zero_shot, 'accuracy')} | "
        f"{ci(zero_shot, 'macro_f1')} | {paired_cell('zero_shot')} | none |",
        calibration_numbers()[0] + f" {paired_cell('zero_shot_calibrated')} | none |",
        f"| TF-IDF + logistic regression on the same {train_rows:,} tweets "
        f"(`baseline.tfidf_lr`) | {ci(tfidf, 'accuracy')} | {ci(tfidf, 'macro_f1')} | "
        f"{paired_cell('tfidf_lr')} | {tfidf['cost']['trainable_parameters']:,} |",
        f"| **LoRA adapter** (r {PARAMS['train']['lora']['r']}, {epochs} "
        f"epoch{'s' if epochs != 1 else ''} over {train_rows:,} tweets, {TRAIN['step']} steps) "
        f"| **{n3(EVAL['accuracy'])}** "
        f"{interval(EVAL['accuracy_ci95_low'], EVAL['accuracy_ci95_high'])} | "
        f"**{n3(EVAL['macro_f1'])}** "
        f"{interval(EVAL['macro_f1_ci95_low'], EVAL['macro_f1_ci95_high'])} | – | "
        f"{EVAL['cost']['trainable_parameters']:,} of {EVAL['cost']['total_parameters']:,} |",
        EVAL["verdict"],
        *headline(),
    ]


def seeds_numbers() -> list[str]:
    """The README's verdict over seeds: the committed seeds record's (metrics/seeds.json,
    ``lorasent seeds``), whose params must be the committed ones (less ``base.seed``)."""
    from lorasent.review.seeds_record import params_sha256

    record = load("metrics/seeds.json")
    assert record["params_sha256"] == params_sha256(PARAMS), (
        "metrics/seeds.json is a record of other params: rerun `make seeds N=3` and commit it")
    refs = {ref["name"]: ref for ref in record["references"]}
    strongest = refs[record["strongest"][0]]

    def spread(s: dict[str, Any]) -> str:
        return f"{n3(s['mean'])} ± {n3(s['sd'])}"

    return [f"the adapter {spread(strongest['adapter'])} (mean ± sd), MiniLM-L6 fine-tuned "
            f"{spread(strongest['reference'])}, {strongest['verdict']}",
            f"TF-IDF + LR (p = {refs['tfidf_lr']['p_value']:.2g})",
            f"frozen encoder + LR (p = {refs['encoder']['p_value']:.2g})",
            f"Seeds {' and '.join(str(r['seed']) for r in record['runs'][1:])} ran"]


def seeds_range_numbers() -> list[str]:
    """performance.md's range of the test accuracy over the committed seeds record's runs."""
    runs = load("metrics/seeds.json")["runs"]
    accuracy = [r["test_accuracy"] for r in runs]
    return [f"{n3(min(accuracy))} to {n3(max(accuracy))} over seeds {runs[0]['seed']} to "
            f"{runs[-1]['seed']}"]


def study_numbers() -> list[str]:
    """The default-recipe study's table: each row as ``collect.py report`` computes it from
    the committed record (docs/default-recipe-study/runs.json)."""
    import importlib.util

    path = REPO / "docs/default-recipe-study/collect.py"
    spec = importlib.util.spec_from_file_location("recipe_study_collect", path)
    assert spec is not None and spec.loader is not None
    collect = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collect)
    lines = collect.report(load("docs/default-recipe-study/runs.json"))
    return [line for line in lines if line.startswith("| ") and "---" not in line]


def stage_times() -> tuple[str, ...]:
    """performance.md's sentence of the committed run's stage times, from the committed
    records where they hold the times (a run made before they went to the git-ignored
    machine record, ``lorasent.provenance.MACHINE_FACTS``); else the facts of it that
    git keeps: the steps and the trainable parameters (the times are then stamped with
    the commit they were measured at)."""
    train = PROVENANCE["train"]
    if "wall_time_s" not in train:
        return (f"({TRAIN['step']} steps, ", f"{train['trainable_parameters']:,} trainable "
                "parameters), evaluate")

    def busy(stage: str, *more: str) -> str:
        said = ["busy"] if PROVENANCE[stage]["machine_load"]["busy"] else []
        return f" ({'; '.join([*said, *more])})" if said or more else ""

    steps = TRAIN["step"]
    return (f"baseline {duration(PROVENANCE['baseline']['wall_time_s'])}{busy('baseline')}, "
            f"train {duration(train['wall_time_s'])}"
            + busy("train", f"{steps} steps, {TRAIN['train']['runtime'] / steps:.2f} s a step "
                            f"in Trainer's runtime, {train['trainable_parameters']:,} "
                            "trainable parameters")
            + f", evaluate {duration(PROVENANCE['evaluate']['wall_time_s'])}"
            + busy("evaluate"),)


def performance_run_numbers() -> list[str]:
    return [run_machine(), *headline(), *calibration_numbers()[1:],
            f"({EVAL['intervals']['resamples']:,} resamples",
            *stage_times(),
            f"`INFO lorasent.stages.train: train.share_prefix: the "
            f"{PROVENANCE['train']['shared_start_tokens']} tokens every prompt starts with",
            f"(the {PROVENANCE['train']['shared_start_tokens']} tokens every default prompt "
            "starts with)"]


# ------------------------------------------------------------------------- the bench

TRAIN_WAYS = [("project", "**project** (shared start once, label-word loss)"),
              ("project_unshared", "project without sharing (`share_prefix: false`)"),
              ("seed002", "seed 002's way (padded to 256, full-vocabulary loss)"),
              ("plain_trainer", "plain Trainer way (dynamic padding, full-vocabulary loss)"),
              ("floor", "floor (bare forward + backward of every example, no head)")]
LONG_WAYS = [("project_unshared", "project without sharing"), ("floor", "floor")]
MODEL = "gemma-3-270m"


def bench_part(part: str) -> dict[str, Any]:
    results: dict[str, Any] = BENCH["results"][part][MODEL]
    return results


def step(part: str, way: str) -> float:
    seconds: float = bench_part(part)["ways"][way]["seconds_per_step"]
    return seconds


def train_rows(part: str, ways: list[tuple[str, str]], project: str) -> list[str]:
    """The rows of one training table: the project first, then each way against it."""
    found = bench_part(part)
    tokens = {way: found["ways"][way]["tokens_in_batch"] for way in found["ways"]}
    rows = [f"| {project} | **{step(part, 'project'):.2f}** | {tokens['project']} | – |"]
    for way, name in ways:
        ratio = (f"**{step(part, 'project') / step(part, way):.2f}× the floor's time**"
                 if way == "floor" else f"{step(part, way) / step(part, 'project'):.2f}× faster")
        rows.append(f"| {name} | {step(part, way):.2f} | {tokens[way]} | {ratio} |")
    return rows


def time_of(part: str, way: str, than: str) -> str:
    """``0.86×``: ``way``'s step time over ``than``'s, in one bench part."""
    return f"{step(part, way) / step(part, than):.2f}×"


# the bf16 ways: (way, its fp32 counterpart, the row's name)
BF16_WAYS = [("project_bf16", "project",
              "**project**, the frozen weights held in bf16 (`base.precision: bf16`)"),
             ("project_autocast_bf16", "project",
              "project under autocast alone (each frozen weight cast at each product)"),
             ("floor_bf16", "floor", "floor, the frozen weights held in bf16")]


def mfu(part: str, way: str, busy: bool) -> str:
    """``43.4%`` (``≥43.4%`` on a busy machine): a way's model FLOP utilisation."""
    return f"{'≥' if busy else ''}{100 * bench_part(part)['ways'][way]['mfu']:.1f}%"


def share(way: str, op: str) -> str:
    """``71%``: an operator's share of a way's profiled step."""
    ops = {o["name"]: o for o in bench_part("train")["profile"][way]["ops"]}
    return f"{ops[op]['share']:.0%}"


def calls(way: str, op: str) -> int:
    """How often an operator ran in a way's profiled step."""
    found: int = next(o["calls"] for o in bench_part("train")["profile"][way]["ops"]
                      if o["name"] == op)
    return found


def bench_limit_numbers() -> list[str]:
    """The sentences of the machine's limit: the matrix-product rates, each way's model
    FLOP utilisation, the bf16 ways and the profile (issue 61)."""
    machine, summary = BENCH["machine"], BENCH["summary"]
    busy = machine["load_average_1min_before"] >= machine["cores"] / 2
    train = bench_part("train")
    rates = train["matmul"]["flop_per_s"]
    checks, ratios, targets = (summary["checks"][MODEL], summary["ratios"][MODEL],
                               summary["targets"])
    flag = "amx_bf16" if "amx_bf16" in train["bf16_flags"] else "avx512_bf16"
    bf16_target = targets["train_bf16_vs_fp32_amx" if flag == "amx_bf16" else "train_bf16_vs_fp32"]
    bf16_check = f"bf16 train step >= {bf16_target:g}x faster than fp32 ({flag})"
    mfu_check = f"fp32 train step >= {targets['train_mfu_fp32_min']:.0%} of the fp32 matmul rate"
    return [
        f"the train part measured {rates['fp32'] / 1e9:.0f} GFLOP/s in fp32 and "
        f"{rates['bf16'] / 1e9:.0f} in bf16",
        f"the project's fp32 step at {mfu('train', 'project', busy)}, the floor at "
        f"{mfu('train', 'floor', busy)}, the project's bf16 step at "
        f"{mfu('train', 'project_bf16', busy)}; label scoring at "
        f"{mfu('eval', 'project', busy)} (seed 000's way {mfu('eval', 'seed000', busy)})",
        f"| training step, batch {train['batch_size']}, bf16 | s / step | fp32's step over "
        "it | MFU |",
        *(f"| {name} | {step('train', way):.2f} | "
          f"{step('train', fp32) / step('train', way):.2f}× | {mfu('train', way, busy)} |"
          for way, fp32, name in BF16_WAYS),
        f"bf16 step ≥ {bf16_target:g}× the fp32 step ({flag}): **{met(checks[bf16_check])}** "
        f"({ratios['train_bf16_speedup_vs_fp32']:.2f}×)",
        f"fp32 step ≥ {targets['train_mfu_fp32_min']:.0%} of the fp32 "
        f"matrix-product rate: **{met(checks[mfu_check])}** "
        f"({mfu('train', 'project', busy)})",
        f"`aten::mm` {share('project', 'aten::mm')} of the fp32 step's time and "
        f"{share('project_bf16', 'aten::mm')} of the bf16 step's",
        f"`aten::bernoulli_`, {calls('project', 'aten::bernoulli_')} calls a step) "
        f"{share('project', 'aten::bernoulli_')} and {share('project_bf16', 'aten::bernoulli_')}",
        f"frozen weights in bf16 makes the step "
        f"{ratios['train_bf16_held_speedup_vs_autocast']:.2f}× faster than autocast alone",
    ]


def scale_numbers() -> list[str]:
    """The rows of performance.md's table of the review statistics, from the bench's
    scale part: the whole review's seconds and the RSS it added."""
    return [f"| {r['rows']:,} | {r.get('classes', 3)} | {r['evaluate_s'] + r['compare_s']:.2f} "
            f"| {r['added_rss_bytes'] / 2**20:,.0f} MiB |" for r in BENCH["results"]["scale"]]


def bf16_run_numbers() -> list[str]:
    """performance.md's sentences of the bf16 default run against the committed one, from
    the verdict kept in ``bench/bf16-run.md``."""
    text = committed("bench/bf16-run.md")
    tier = re.search(r"^reproduce: (\w+):", text, re.M)
    split = re.search(r"no detectable difference in accuracy: (accuracy [^;]+); (macro-F1 "
                      r"[^.]+)\.", text)
    reviews = re.search(r"reviews-zh/predictions.csv: \d+ of \d+ predictions differ; (this "
                        r"run is worse than HEAD: accuracy [^;]+);", text)
    runtimes = re.search(r"Trainer's runtime: bf16 ([\d.]+) s, fp32 ([\d.]+) s", text)
    assert tier and split and reviews and runtimes, "bench/bf16-run.md: not a verdict"
    bf16, fp32 = (float(s) for s in runtimes.groups())
    return [f"as another platform's run: **{tier[1]}**",
            f"no detectable difference in accuracy: {split[1]}; but {split[2]}",
            f"On reviews-zh {reviews[1]}",
            f"Training took {bf16:.1f} s of Trainer's runtime against fp32's {fp32:.1f} s "
            f"({fp32 / bf16:.2f}×"]


def outputs_scale_numbers() -> list[str]:
    """docs/outputs.md's sentence of the review at the bench's largest size."""
    largest = max(r["rows"] for r in BENCH["results"]["scale"])
    three, hundred = ([r for r in BENCH["results"]["scale"]
                       if r["rows"] == largest and r.get("classes", 3) == k][0] for k in (3, 100))
    seconds = [f"{r['evaluate_s'] + r['compare_s']:.2f} s" for r in (three, hundred)]
    added = [f"{r['added_rss_bytes'] / 2**20:,.0f} MiB" for r in (three, hundred)]
    return [f"the whole review {seconds[0]} and {added[0]} added with 3 classes, "
            f"{seconds[1]} and {added[1]} with 100"]


def performance_bench_numbers() -> list[str]:
    machine, summary = BENCH["machine"], BENCH["summary"]
    ratios, targets = summary["ratios"][MODEL], summary["targets"]
    checks = summary["checks"][MODEL]
    long_ok = checks["long template: train step <= 0.6x the floor's time"]
    floor_ok = checks["train step <= 0.75x the floor's time"]
    noop_ok = summary["checks"]["pipeline"]["no-op dvc repro < 5 s"]
    train, long = bench_part("train"), bench_part("train_long_template")
    scoring = bench_part("eval")
    cpu = re.sub(r"\((R|TM)\)", "", machine["cpu"]).replace(" Processor", "")
    idle = machine["load_average_1min_before"] < machine["cores"] / 2
    ways = train["ways"]
    pipeline = BENCH["results"]["pipeline"]
    project, seed000 = scoring["ways"]["project"], scoring["ways"]["seed000"]
    shared, unshared = (ways[way]["tokens_in_batch"] for way in ("project", "project_unshared"))
    return [
        f"`make bench` ({duration(BENCH['wall_time_s'])} here)",
        f"the same {train['batch_size']} tweets per batch",
        f"an instruction of {long['shared_prefix_tokens']} tokens in seed 000's style",
        f"({machine['cores']} cores, {cpu}, {'idle' if idle else 'busy'}, torch "
        f"{machine['torch'].split('+')[0]} {machine['device'].upper()} build)",
        f"| training step, batch {train['batch_size']} | s / step | positions computed | "
        "project is |",
        *train_rows("train", TRAIN_WAYS[1:], TRAIN_WAYS[0][1]),
        f"| training step, batch {long['batch_size']}, long template | s / step | "
        "positions computed | project is |",
        *train_rows("train_long_template", LONG_WAYS,
                    f"**project** ({long['shared_prefix_tokens']} of {long['width']} "
                    "positions shared)"),
        f"| scoring {scoring['examples']} tweets (zero-shot) | tweets / s | accuracy |",
        f"| **project** (label scoring, batches of {scoring['batch_size']}) | "
        f"**{project['examples_per_s']:.2f}** | **{project['accuracy']:.3f}** |",
        f"| seed 000's way (generate one token, match strings) | "
        f"{seed000['examples_per_s']:.2f} | {seed000['accuracy']:.3f} |",
        f"Peak RSS: {gib(ways['project']['peak_rss_bytes'])} for the project's training step "
        f"and {gib(scoring['peak_rss_bytes'])} for scoring, but the bench's training part "
        f"peaks at {gib(max(way['peak_rss_bytes'] for way in ways.values()))}",
        f"do not lower the {gib(ways['seed002']['peak_rss_bytes'])} that seed 002's way needs",
        f"A no-op `dvc repro` takes {pipeline['noop_repro_s']:.1f} s; the rerun after "
        f"changing `evaluate.reference` {pipeline['evaluate_param_rerun_s']:.1f} s",
        f"the floor itself is only {step('train', 'plain_trainer') / step('train', 'floor'):.2f}× "
        "faster than that way here",
        f"step ≥ {targets['train_vs_seed002']:g}× seed 002's way: "
        f"**{met(checks['train >= 10x seed 002'])}** ({ratios['train_speedup_vs_seed002']:.2f}×)",
        f"long template, step ≤ {targets['train_long_template_vs_floor_max']:g}× the floor: "
        f"**{met(long_ok)}** "
        f"({ratios['train_long_template_time_vs_floor']:.2f}×)",
        f"step ≤ {targets['train_vs_floor_max']:g}× the floor on the default prompt: "
        f"**{met(floor_ok)}** "
        f"({ratios['train_time_vs_floor']:.2f}×)",
        f"The shared start is {train['shared_prefix_tokens']} of {train['width']} positions, so "
        f"the step computes {shared} positions instead of {unshared} "
        f"({shared / unshared:.2f}×)",
        f"scoring ≥ {targets['eval_vs_seed000_cpu']:g}× seed 000's way: "
        f"**{met(checks['eval >= 2.5x seed 000'])}** in this run "
        f"({ratios['eval_speedup_vs_seed000']:.2f}×)",
        f"scoring loses no accuracy ({ratios['eval_accuracy_project_minus_seed000']:.3f} more",
        f"and a no-op `dvc repro` < {targets['noop_repro_s_max']:g} s: "
        f"**{met(checks['eval loses no accuracy'] and noop_ok)}**",
        f"The step is {time_of('train', 'project_unshared', 'project')} faster on the "
        f"default prompt, {time_of('train_long_template', 'project_unshared', 'project')} "
        f"on the {long['shared_prefix_tokens']}-token instruction",
    ]


# ------------------------------------------------------------------------ the model sizes


def size_numbers() -> dict[str, list[str]]:
    base = f"{out_size('fetch', 'models/base') / 1e9:.1f} GB"
    adapter = f"{out_size('train', 'models/adapter') / 1e6:.1f} MB"
    return {"docs/sharing.md": [f"the push is {base}", f"the adapter is {adapter}"],
            "docs/experiments.md": [f"`models/base` ({base} for the packaged Gemma)"],
            "docs/predict.md": [f"the packaged Gemma's {base}"]}


EXPECTED = {"README.md": readme_numbers() + seeds_numbers(),
            "docs/performance.md": performance_run_numbers() + performance_bench_numbers()
            + bench_limit_numbers() + scale_numbers() + bf16_run_numbers()
            + seeds_range_numbers(),
            "docs/outputs.md": outputs_scale_numbers(),
            "docs/default-recipe-study.md": study_numbers(),
            **size_numbers()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_docs_give_the_committed_numbers(name):
    text = page(name)
    missing = [number for number in EXPECTED[name] if " ".join(number.split()) not in text]
    assert not missing, (f"{name} does not say what the committed metrics/, bench/ and "
                         "dvc.lock say; update these (or the sentence that words them):\n"
                         + "\n".join(missing))


def test_no_page_presents_a_result_measured_before_something():
    stale = [name for name in PAGES if "measured before" in page(name).lower()]
    assert not stale, f"'measured before' in {stale}: rerun the table or remove it"


# ---------------------------------------------------------------------- git's history


@cache
def history() -> bool:
    """Whether this checkout has its git history (not a shallow clone, not an archive)."""
    done = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO,
                          capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "false"


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


def stamps() -> list[tuple[str, str]]:
    return [(name, commit) for name in PAGES for commit in STAMP.findall(page(name))]


def test_stamps_are_few():
    assert len(stamps()) <= MAX_STAMPS, (
        f"{len(stamps())} numbers stamped with a commit (at most {MAX_STAMPS}): give the "
        f"others from committed files: {stamps()}")


def test_every_stamp_names_a_commit_of_this_history():
    if not history():
        pytest.skip("no git history here (a shallow clone or an archive)")
    wrong = [f"{name}: {commit}" for name, commit in stamps()
             if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0
             or git("merge-base", "--is-ancestor", commit, "HEAD").returncode != 0]
    assert not wrong, f"stamps that name no commit of HEAD's history: {wrong}"


def compare_rows() -> list[tuple[str, str, str, str]]:
    """``(page, A, B, row)`` of each table row that gives a ``make compare`` of two
    commits."""
    found = []
    for name in PAGES:
        for line in (REPO / name).read_text(encoding="utf-8").splitlines():
            match = COMPARE.search(line)
            if line.startswith("|") and match:
                found.append((name, match[1], match[2], line))
    return found


def test_the_comparisons_of_committed_runs_are_what_compare_finds():
    if not history():
        pytest.skip("no git history here (a shallow clone or an archive)")
    rows = compare_rows()
    assert rows, "docs/performance.md lists no comparison of committed runs"
    for name, rev_a, rev_b, row in rows:
        a, b = (read_predictions(git("show", f"{rev}:metrics/predictions.csv").stdout,
                                 f"{rev}:metrics/predictions.csv") for rev in (rev_a, rev_b))
        order = {row_id: i for i, row_id in enumerate(b.ids)}
        at = [order[row_id] for row_id in a.ids]
        assert a.labels == b.labels and (b.actual[at] == a.actual).all()
        paired = paired_comparison(a.actual, a.predicted, b.predicted[at], a.labels)
        verdict = paired_verdict(paired).split(":")[0]
        said = f"{n3(paired.accuracy[0])} → {n3(paired.accuracy[1])}"
        result = f"{verdict}: {measured_text(paired)}"
        assert said in row and result in row, (
            f"{name}: make compare A={rev_a} B={rev_b} gives {said}, {result}; the row "
            f"says: {row}")
