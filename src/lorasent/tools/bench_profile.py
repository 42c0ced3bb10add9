"""Where a bench way's step spends its time: the top operators of one step by
``torch.profiler`` (PyTorch's profiler recipe, ``key_averages`` sorted by self time),
for ``make bench``'s train part (:mod:`lorasent.tools.bench`) and its report.

The profiler's own overhead lengthens the step (each operator is recorded), so the table
gives each operator's share of the profiled step's total self time, not seconds to set
beside the timed ways.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Operators that are dense matrix products (what the matmul rate of the bench measures).
MATMUL_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::matmul",
                        "aten::linear", "aten::baddbmm"})
TOP_OPS = 8


def top_ops(step: Callable[[], object], rows: int = TOP_OPS) -> dict[str, Any]:
    """Profile one call of ``step`` (on the CPU) and return its ``rows`` operators of most
    self time: ``{"ops": [{"name", "share", "calls"}], "matmul_share": float}``, shares
    of the step's total self CPU time (0 to 1), ``matmul_share`` that of
    :data:`MATMUL_OPS` together."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return {"ops": [{"name": e.key, "share": e.self_cpu_time_total / total, "calls": e.count}
                    for e in events[:rows]],
            "matmul_share": sum(e.self_cpu_time_total for e in events
                                if e.key in MATMUL_OPS) / total}


def profile_table(profiles: dict[str, dict[str, Any]]) -> list[str]:
    """The profiles of several ways side by side as a Markdown table: each way's top
    operators with their share of its step (:func:`top_ops`)."""
    names = list(profiles)
    lines = ["**Where the step's time goes** (torch.profiler, one step of each way after the "
             "timed ones; each operator's share of that way's self CPU time)", "",
             "| " + " | ".join(f"{n}: operator | share | calls" for n in names) + " |",
             "|---" * (3 * len(names)) + "|"]
    depth = max(len(p["ops"]) for p in profiles.values())
    for i in range(depth):
        cells = []
        for name in names:
            ops = profiles[name]["ops"]
            cells += ([f"`{ops[i]['name']}`", f"{ops[i]['share']:.0%}", str(ops[i]["calls"])]
                      if i < len(ops) else ["", "", ""])
        lines.append("| " + " | ".join(cells) + " |")
    cells = []
    for name in names:
        cells += ["dense matrix products together", f"{profiles[name]['matmul_share']:.0%}", ""]
    lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]
