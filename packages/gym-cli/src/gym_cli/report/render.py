"""The report as one self-contained HTML file: the template, style and script of this package
inlined, the plots as inline SVG, the per-task details as JSON that the script shows on a click.

Rollout text is untrusted: every string goes into the HTML through :func:`html.escape`, the JSON
cannot close its ``<script>`` element (``<``, ``>`` and ``&`` are written as ``\\u`` escapes) and the
script puts it in the page as text, never as HTML. A Content-Security-Policy lets only the report's
own script run (by its hash) and forbids every network request."""

from __future__ import annotations

import base64
import hashlib
import json
from html import escape
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from string import Template
from typing import Any

from gym_cli.report.data import (
    CI_LEVEL,
    CI_METHOD,
    LATENCY_FIELD,
    MAX_TEXT,
    MAX_VIEWER_ROLLOUTS,
    PAIRED_METHOD,
    Run,
    compare_runs,
    prompt_text,
)

__all__ = ["render_html", "task_table_columns"]


def _asset(name: str) -> str:
    return resources.files("gym_cli.report").joinpath("assets", name).read_text(encoding="utf-8")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _cell(value: Any, digits: int = 3) -> str:
    """A table cell whose sort key is the value itself (empty: sorted last)."""
    key = "" if value is None else repr(float(value)) if isinstance(value, (int, float)) else escape(str(value))
    return f'<td data-sort="{key}">{escape(_fmt(value, digits))}</td>'


def _quantile(values: list[float], q: float) -> float:
    """The one percentile definition of gym's numbers (:func:`gym_core.metrics.quantile`, interpolated; p50 is the median)."""
    from gym_core.metrics import quantile

    value = quantile(values, q)
    assert value is not None  # called with values only
    return value


def _summary(runs: list[Run], ks: list[int]) -> str:
    head = "".join(f"<th>{escape(run.label)}</th>" for run in runs)
    lines: list[tuple[str, list[str]]] = [
        ("file", [escape(str(run.path)) for run in runs]),
        ("rollouts", [str(run.profile["overall"]["num_rollouts"]) for run in runs]),
        ("tasks", [str(run.profile["overall"]["num_tasks"]) for run in runs]),
        (
            "failed rollouts",
            [
                str(len(run.failures))
                + "".join(
                    f'<br><span class="reason">{escape(reason)}: {count}</span>'
                    for reason, count in run.failure_reasons.items()
                )
                for run in runs
            ],
        ),
        ("mean reward", [_fmt(run.profile["overall"]["fields"]["reward"]["mean"]) for run in runs]),
        (f"{CI_LEVEL:.0%} CI of the mean", [f"[{run.ci[0]:.3f}, {run.ci[1]:.3f}]" for run in runs]),
    ]
    for metric in ("pass", "majority"):
        for k in ks:
            if any(f"{metric}@{k}" in run.profile["overall"] for run in runs):
                lines.append((f"{metric}@{k}", [_fmt(run.profile["overall"].get(f"{metric}@{k}")) for run in runs]))
    costs = (
        ("turns per rollout", lambda o: o.get("turns_per_rollout")),
        ("tool calls per rollout", lambda o: o.get("tool_calls_per_rollout")),
        ("tokens per rollout", lambda o: (o.get("tokens_per_rollout") or {}).get("total")),
    )
    for name, get in costs:
        values = [get(run.profile["overall"]) for run in runs]
        if any(v is not None for v in values):
            lines.append((name, [_fmt(v, 1) for v in values]))
    latencies = [
        [float(r[LATENCY_FIELD]) for r in run.rows if isinstance(r.get(LATENCY_FIELD), (int, float))] for run in runs
    ]
    if any(latencies):
        lines.append(
            (
                "latency p50 / p99, s",
                [f"{_quantile(v, 0.5):.2f} / {_quantile(v, 0.99):.2f}" if v else "–" for v in latencies],
            )
        )
    body = "".join(
        f"<tr><th>{escape(name)}</th>{''.join(f'<td>{c}</td>' for c in cells)}</tr>" for name, cells in lines
    )
    return (
        f'<table class="summary"><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>'
        f'<p class="note">Mean reward over all rollouts; its {CI_LEVEL:.0%} confidence interval is a {CI_METHOD}. '
        "pass@k and majority@k are means over the tasks with at least k rollouts (in majority@k, a task "
        "whose rollouts gave no answer scores 0). Latency percentiles interpolate between ranks (p50 is the median), as in gym profile and "
        "gym collect. Failed rollouts are the rows of the "
        "<code>.failures.jsonl</code> beside each rollouts file: rollouts that got no reward (an infrastructure "
        "failure, say); they are not in the other numbers.</p>"
    )


def _groups(runs: list[Run], by: str) -> str:
    names = sorted({name for run in runs for name in run.profile["groups"]})
    head = "".join(f'<th>{escape(run.label)}<br><span class="sub">rollouts · mean reward</span></th>' for run in runs)
    rows = []
    for name in names:
        cells = []
        for run in runs:
            block = run.profile["groups"].get(name)
            cells.append(
                "<td>–</td>"
                if block is None
                else f"<td>{block['num_rollouts']} · {_fmt(block['fields']['reward']['mean'])}</td>"
            )
        rows.append(f"<tr><th>{escape(name)}</th>{''.join(cells)}</tr>")
    return (
        f'<table class="summary groups"><thead><tr><th>{escape(by)}</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


DELTA_CLASS = ' class="delta"'


def task_table_columns(runs: list[Run], ks: list[int]) -> list[tuple[int | None, str]]:
    """The per-task table's metric columns after ``task`` and ``prompt``: with several runs, first
    ``(None, "Δ mean")`` (last run minus first, on the tasks both have: where it stays in view), then
    per run ``(run index, metric)``, metric ``n``, ``mean`` or ``pass@k``."""
    columns: list[tuple[int | None, str]] = [(None, "Δ mean")] if len(runs) > 1 else []
    for i, run in enumerate(runs):
        keys = [f"pass@{k}" for k in ks if f"pass@{k}" in run.profile["overall"]]
        columns += [(i, "n"), (i, "mean"), *((i, key) for key in keys)]
    return columns


def _task_ids(runs: list[Run]) -> list[str]:
    """Every task identity of the runs: the first run's in its task order, then each later run's new ones."""
    ordered: dict[str, None] = {}
    for run in runs:
        for task in sorted(run.identity, key=lambda t: (0, t, "") if isinstance(t, int) else (1, 0, str(t))):
            ordered.setdefault(run.identity[task], None)
    return list(ordered)


def _tasks(runs: list[Run], ks: list[int]) -> tuple[str, dict[str, Any]]:
    """The per-task table, one row per task identity (tasks are paired across runs by what they
    are, not by their index), and the details its rows open (JSON)."""
    columns = task_table_columns(runs, ks)
    task_ids = _task_ids(runs)
    index_of = [run.task_of for run in runs]
    prompts: dict[str, str] = {}
    for run in runs:
        for row in run.rows:
            prompts.setdefault(run.identity[row["task_index"]], prompt_text(row))
    group_head = (
        '<th colspan="2"></th>'
        + ("<th></th>" if len(runs) > 1 else "")
        + "".join(
            f'<th colspan="{sum(1 for c in columns if c[0] == i)}" class="run">{escape(run.label)}</th>'
            for i, run in enumerate(runs)
        )
    )
    headers = ["task", "prompt"] + [name for _, name in columns]
    sort_head = "".join(
        f'<th data-col="{n}" aria-sort="none" title="sort by {escape(title)}"'
        f"{DELTA_CLASS if title == 'Δ mean' else ''}>{escape(title)}</th>"
        for n, title in enumerate(headers)
    )
    body, details = [], {}
    for task in task_ids:
        indices = [of.get(task) for of in index_of]
        blocks = [run.profile["tasks"].get(i) if i is not None else None for run, i in zip(runs, indices)]
        failing = [run.first_failing.get(i) if i is not None else None for run, i in zip(runs, indices)]
        shown = list(dict.fromkeys(str(i) for i in indices if i is not None))
        first = next(i for i in indices if i is not None)
        key = repr(float(first)) if isinstance(first, (int, float)) else escape(str(first))
        cells = [
            f'<td data-sort="{key}" title="task {escape(task)}">{escape(" / ".join(shown))}</td>',
            f'<td class="prompt">{escape(_one_line(prompts.get(task, "")))}</td>',
        ]
        for i, metric in columns:
            if i is None:
                a, b = blocks[0], blocks[-1]
                delta = (
                    None if a is None or b is None else b["fields"]["reward"]["mean"] - a["fields"]["reward"]["mean"]
                )
                cells.append(_cell(delta).replace("<td ", '<td class="delta" ', 1))
                continue
            block = blocks[i]
            value = (
                None
                if block is None
                else block["num_rollouts"]
                if metric == "n"
                else block["fields"]["reward"]["mean"]
                if metric == "mean"
                else block.get(metric)
            )
            cells.append(_cell(value))
        is_failing = any(f is not None for f in failing)
        body.append(
            f'<tr data-task="{escape(task)}" data-failing="{int(is_failing)}" tabindex="0">{"".join(cells)}</tr>'
        )
        details[task] = {
            "prompt": prompts.get(task, ""),
            "indices": [None if i is None else str(i) for i in indices],
            "runs": [
                None
                if block is None
                else {"n": block["num_rollouts"], "mean": block["fields"]["reward"]["mean"], "first_failing": f}
                for block, f in zip(blocks, failing)
            ],
        }
    table = (
        f'<table id="task-table"><thead><tr class="runs">{group_head}</tr><tr class="sort">{sort_head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )
    return table, details


def _comparison(runs: list[Run]) -> str:
    """Each later run against the first, per environment and over all: the paired difference of
    per-task mean reward over the tasks both ran, its interval, whether it is significant, and the
    tasks only one of them ran."""
    if len(runs) < 2:
        return ""
    base = runs[0]
    rows = []
    for other in runs[1:]:
        for line in compare_runs(base, other):
            ci = line["ci"]
            significant = "–" if ci is None else "yes" if line["significant"] else "no"
            env = "all environments" if line["environment"] is None else line["environment"]
            rows.append(
                f'<tr data-significant="{int(line["significant"])}"><th>{escape(other.label)} − {escape(base.label)}</th>'
                f"<th>{escape(env)}</th><td>{line['tasks']}</td>"
                f"<td>{line['only_base']}</td><td>{line['only_other']}</td>"
                f'<td class="delta">{escape(_fmt(line["delta"]))}</td>'
                f"<td>{'–' if ci is None else f'[{ci[0]:.3f}, {ci[1]:.3f}]'}</td><td>{significant}</td></tr>"
            )
    head = (
        "<tr><th>runs</th><th>environment</th><th>paired tasks</th><th>only in the first</th>"
        f"<th>only in the other</th><th>Δ mean reward</th><th>{CI_LEVEL:.0%} CI</th><th>significant</th></tr>"
    )
    return (
        '<section id="comparison"><h2>Paired comparison</h2>'
        f'<table class="summary comparison"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
        '<p class="note">Tasks are paired by what they are, not by their index: a hash of the environment and '
        "of what the model is given (<code>responses_create_params</code>' input, instructions and tools; not "
        "the sampling parameters). Δ is the mean over the paired tasks of the difference of their mean reward "
        f"(the other run minus the first); its {CI_LEVEL:.0%} interval is a {escape(PAIRED_METHOD)}, and the "
        "difference is significant when the interval excludes 0 (fewer than 2 paired tasks: no interval). "
        "Tasks only one run has are counted, not compared.</p></section>"
    )


def _viewer(runs: list[Run]) -> tuple[str, list[dict[str, Any]]]:
    """The rollout viewer's controls and the rollouts it shows (JSON; the script draws them as text)."""
    rollouts = []
    notes = []
    for i, run in enumerate(runs):
        for shown in run.rollouts:
            rollouts.append({"run": i, **shown})
        if run.total_rollouts > MAX_VIEWER_ROLLOUTS:
            notes.append(
                f"{run.label}: the first {MAX_VIEWER_ROLLOUTS} of its {run.total_rollouts} rollouts "
                "(the rest are in its file)"
            )
    reasons = sorted({r["reason"] for r in rollouts if r["reason"] is not None})
    rewards = sorted({r["reward"] for r in rollouts if r["reward"] is not None})
    options = ['<option value="">any reward</option>', '<option value="below1">below 1</option>']
    options += [f'<option value="={r!r}">{escape(_fmt(r))}</option>' for r in rewards[:20]]
    options.append('<option value="none">no reward (failed)</option>')
    reason_options = ['<option value="">any reason</option>', '<option value="-">no reason</option>']
    reason_options += [f'<option value="={escape(r)}">{escape(_one_line(r, 60))}</option>' for r in reasons[:50]]
    run_options = "".join(f'<option value="{i}">{escape(run.label)}</option>' for i, run in enumerate(runs))
    limit = f'<p class="note" id="viewer-limit">Only {escape("; ".join(notes))}.</p>' if notes else ""
    html = (
        '<section id="rollouts"><h2>Rollouts</h2>'
        '<div class="controls">'
        '<input type="search" id="rollout-search" placeholder="search the transcripts" aria-label="search rollouts"> '
        '<input type="search" id="rollout-task" placeholder="task" aria-label="filter by task" size="14"> '
        f'<select id="rollout-run" aria-label="filter by run"><option value="">every run</option>{run_options}</select> '
        f'<select id="rollout-reward" aria-label="filter by reward">{"".join(options)}</select> '
        f'<select id="rollout-reason" aria-label="filter by failure reason">{"".join(reason_options)}</select> '
        '<span id="rollout-count"></span></div>'
        '<p class="note">Every rollout of the runs, failed ones (no reward, from the failures file) last; '
        "click one to read its transcript: the model's input, each message, tool call and tool output, then the "
        f"row's other fields (the verifier's among them). Texts longer than {MAX_TEXT} characters are cut, with "
        "a marker saying how much; the task filter takes a task index or id.</p>"
        f"{limit}"
        '<div class="task-layout"><div class="table-wrap"><table id="rollout-table"><thead><tr>'
        "<th>run</th><th>task</th><th>rollout</th><th>reward</th><th>reason</th></tr></thead><tbody></tbody></table>"
        '</div><aside id="rollout-detail" aria-live="polite"><p class="note">No rollout selected.</p></aside></div>'
        "</section>"
    )
    return html, rollouts


def _one_line(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_for_script(value: Any) -> str:
    # No "<", ">" or "&" in the text: nothing in it can end the <script> element or start markup.
    text = json.dumps(value, ensure_ascii=False, sort_keys=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _gym_version() -> str:
    try:
        return version("gym-cli")
    except PackageNotFoundError:
        return "unknown"


def render_html(
    runs: list[Run],
    ks: list[int],
    by: str,
    title: str,
    plots: list[tuple[str, str, str, str]],
    missing_plots: list[str],
) -> str:
    """The whole report. ``plots`` are ``(name, title, note, svg)``; ``missing_plots`` the sentences
    saying which plots were left out and why."""
    figures = "".join(
        f'<figure class="plot" id="plot-{escape(name)}"><figcaption>{escape(plot_title)}</figcaption>{svg}'
        f'<p class="note">{escape(note)}</p></figure>'
        for name, plot_title, note, svg in plots
    )
    missing = "".join(f'<p class="note">{escape(line)}.</p>' for line in missing_plots)
    table, details = _tasks(runs, ks)
    viewer, rollouts = _viewer(runs)
    inputs = ", ".join(f"{escape(run.label)} ({run.profile['overall']['num_rollouts']} rollouts)" for run in runs)
    body = (
        f'<header><h1>{escape(title)}</h1><p class="meta">{inputs} · made by gym-cli {escape(_gym_version())}</p></header>'
        f'<section id="summary"><h2>Summary</h2>{_summary(runs, ks)}</section>'
        f'<section id="plots"><h2>Plots</h2><div class="plots">{figures}</div>{missing}</section>'
        f"{_comparison(runs)}"
        f'<section id="groups"><h2>By {escape(by)}</h2>{_groups(runs, by)}</section>'
        '<section id="tasks"><h2>Tasks</h2>'
        '<div class="controls"><input type="search" id="task-filter" placeholder="filter by task or prompt text" '
        'aria-label="filter tasks"> <label><input type="checkbox" id="failing-only"> only tasks with a failing rollout'
        '</label> <span id="task-count"></span></div>'
        '<p class="note">Click a column to sort; click a task to see its first failing rollout (the lowest '
        "rollout index with reward below 1) and its final answer.</p>"
        f'<div class="task-layout"><div class="table-wrap">{table}</div>'
        '<aside id="task-detail" aria-live="polite"><p class="note">No task selected.</p></aside></div></section>'
        f"{viewer}"
    )
    script = _asset("report.js")
    script_hash = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'"
    return Template(_asset("template.html")).substitute(
        title=escape(title),
        csp=csp,
        style=_asset("report.css"),
        body=body,
        data=_json_for_script({"runs": [run.label for run in runs], "tasks": details, "rollouts": rollouts}),
        script=script,
    )
