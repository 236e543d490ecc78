"""The report's plots, drawn with matplotlib: reward histogram, pass@k curve, reward by group, turns
per rollout, tokens per rollout, latency (each of the last three when rows record it). One colour per run, the same in every plot,
so several runs are compared in each.

Output is deterministic: figures are made without pyplot (no global state, no GUI backend; PNGs go
through Agg), SVGs carry no date and a fixed ``svg.hashsalt`` per plot, and the SVG ids are prefixed
with the plot's name so that several SVGs can live in one HTML page. matplotlib is imported here
only, and this module only when a report is drawn, so ``gym --help`` stays fast."""

from __future__ import annotations

import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot: never a GUI backend, even with $DISPLAY set

from matplotlib.figure import Figure  # noqa: E402

from gym_cli.report.data import LATENCY_FIELD  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

    from gym_cli.report.data import Run

__all__ = ["Plot", "make_plots", "to_svg", "write_png"]

_SIZE = (6.4, 3.4)
_STYLE: dict[RcKeyType, Any] = {
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.axisbelow": True,
    "font.size": 9,
    "legend.frameon": False,
}
# Up to this many distinct values, a distribution is drawn as bars per value (rewards 0/1, turns).
_DISCRETE = 12
_LABEL_CHARS = 40


@dataclass
class Plot:
    """One figure of the report: ``name`` is its id in the page and its ``--png`` file name."""

    name: str
    title: str
    note: str
    figure: Figure


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _short(name: str) -> str:
    return name if len(name) <= _LABEL_CHARS else name[: _LABEL_CHARS - 1] + "…"


def _figure(width: float = _SIZE[0], height: float = _SIZE[1]) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _legend(ax, columns: int) -> None:
    """The legend above the plot, outside it: it never hides a bar or a line."""
    ax.figure.legend(*ax.get_legend_handles_labels(), loc="outside upper center", ncols=min(columns, 4))


def _distribution(ax, runs: list[Run], values: list[list[float]], xlabel: str) -> None:
    """Each run's share of rollouts per value: bars side by side when there are few distinct values,
    else step histograms on shared bins."""
    import numpy as np

    distinct = sorted({v for run_values in values for v in run_values})
    if len(distinct) <= _DISCRETE:
        x = np.arange(len(distinct))
        width = 0.8 / len(runs)
        for i, (run, run_values) in enumerate(zip(runs, values)):
            if run_values:
                counts = Counter(run_values)
                ax.bar(
                    x + (i - (len(runs) - 1) / 2) * width,
                    [counts[v] / len(run_values) for v in distinct],
                    width,
                    label=_short(run.label),
                    color=f"C{i}",
                )
        ax.set_xticks(x, [f"{v:g}" for v in distinct])
    else:
        edges = np.histogram_bin_edges(np.concatenate([v for v in values if v]), bins=20)
        for i, (run, run_values) in enumerate(zip(runs, values)):
            if run_values:
                ax.hist(
                    run_values,
                    bins=edges,
                    weights=np.full(len(run_values), 1 / len(run_values)),
                    histtype="step",
                    linewidth=1.8,
                    label=_short(run.label),
                    color=f"C{i}",
                )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of rollouts")
    if len(runs) > 1:
        _legend(ax, len(runs))


def _reward_histogram(runs: list[Run]) -> Plot:
    figure = _figure()
    _distribution(figure.add_subplot(), runs, [[float(r["reward"]) for r in run.rows] for run in runs], "reward")
    return Plot("reward_histogram", "Reward distribution", "Share of each run's rollouts per reward.", figure)


def _pass_at_k(runs: list[Run], ks: list[int]) -> Plot:
    import numpy as np

    figure = _figure()
    ax = figure.add_subplot()
    for i, run in enumerate(runs):
        overall = run.profile["overall"]
        for metric, marker, style in (("pass", "o", "-"), ("majority", "s", "--")):
            xs = [k for k in ks if f"{metric}@{k}" in overall]
            if xs:
                ax.plot(
                    xs,
                    [overall[f"{metric}@{k}"] for k in xs],
                    marker=marker,
                    linestyle=style,
                    color=f"C{i}",
                    label=f"{_short(run.label)} {metric}@k" if len(runs) > 1 else f"{metric}@k",
                )
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    values = [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]
    top = max((float(v.max()) for v in values if v.size), default=1.0)
    ax.set_ylim(0, 1.02 if top <= 1.0 else None)  # rewards in [0, 1]: the whole scale, runs comparable
    ax.set_xlabel("k")
    ax.set_ylabel("mean over tasks")
    _legend(ax, 2 if len(runs) > 1 else 1)
    return Plot(
        "pass_at_k",
        "pass@k and majority@k",
        "pass@k: the chance that at least one of k rollouts of a task passes (unbiased estimator; the "
        "expected best reward of k for non-binary rewards), averaged over tasks with at least k rollouts. "
        "majority@k (dashed, when rows record an extracted answer): the score of the majority-vote answer "
        "of k rollouts.",
        figure,
    )


def _reward_by_group(runs: list[Run], by: str) -> Plot:
    import numpy as np

    names = sorted({name for run in runs for name in run.profile["groups"]})
    figure = _figure(height=max(2.2, 0.9 + 0.3 * len(names) * max(1, len(runs) / 2)))
    ax = figure.add_subplot()
    y = np.arange(len(names))
    height = 0.8 / len(runs)
    for i, run in enumerate(runs):
        groups = run.profile["groups"]
        means = [groups[n]["fields"]["reward"]["mean"] if n in groups else np.nan for n in names]
        bars = ax.barh(y + (i - (len(runs) - 1) / 2) * height, means, height, label=_short(run.label), color=f"C{i}")
        ax.bar_label(bars, labels=["" if np.isnan(m) else f"{m:.2f}" for m in means], padding=2, fontsize=8)
    ax.set_yticks(y, [_short(n) for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("mean reward")
    ax.margins(x=0.12)
    if len(runs) > 1:
        _legend(ax, len(runs))
    return Plot("reward_by_group", f"Reward by {by}", f"Mean reward of each {by}'s rollouts.", figure)


def _per_rollout(runs: list[Run], name: str, title: str, xlabel: str, note: str, value) -> Plot | None:
    """The distribution of ``value(row)`` (a number or None) over each run's rollouts; None when no
    row has one."""
    values = [[float(v) for v in map(value, run.rows) if _is_number(v)] for run in runs]
    if not any(values):
        return None
    figure = _figure()
    _distribution(figure.add_subplot(), runs, values, xlabel)
    return Plot(name, title, note, figure)


def _turns(runs: list[Run]) -> Plot | None:
    return _per_rollout(
        runs,
        "turns",
        "Turns per rollout",
        "model calls per rollout",
        "Model calls of each rollout (num_model_calls).",
        lambda row: row.get("num_model_calls"),
    )


def _tokens(runs: list[Run]) -> Plot | None:
    return _per_rollout(
        runs,
        "tokens",
        "Tokens per rollout",
        "total tokens per rollout",
        "Tokens of each rollout, input and output (usage.total_tokens).",
        lambda row: row["usage"].get("total_tokens") if isinstance(row.get("usage"), dict) else None,
    )


def _latency(runs: list[Run]) -> Plot | None:
    return _per_rollout(
        runs,
        "latency",
        "Rollout latency",
        f"rollout latency, s ({LATENCY_FIELD})",
        f"Wall time of each rollout, from the rows' {LATENCY_FIELD}.",
        lambda row: row.get(LATENCY_FIELD),
    )


def make_plots(runs: list[Run], ks: list[int], by: str) -> tuple[list[Plot], list[str]]:
    """The report's plots, and a sentence for each plot left out because the rows lack its data."""
    with matplotlib.rc_context(_STYLE):
        plots = [_reward_histogram(runs), _pass_at_k(runs, ks), _reward_by_group(runs, by)]
        missing = []
        for make, why in (
            (_turns, "no turns plot: the rows do not record num_model_calls"),
            (_tokens, "no tokens plot: the rows do not record usage.total_tokens"),
            (_latency, f"no latency plot: the rows do not record {LATENCY_FIELD}"),
        ):
            plot = make(runs)
            if plot is None:
                missing.append(why)
            else:
                plots.append(plot)
    return plots, missing


# Every id an SVG defines or refers to: prefixed per plot, ids being global in an HTML page.
_SVG_IDS = re.compile(r'(\bid="|href="#|url\(#)')


def to_svg(plot: Plot) -> str:
    """The plot as an ``<svg>`` element to inline in HTML (no XML prolog, no date, ids prefixed)."""
    buffer = io.StringIO()
    with matplotlib.rc_context({**_STYLE, "svg.hashsalt": f"gym-report-{plot.name}"}):
        plot.figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    return _SVG_IDS.sub(rf"\g<1>{plot.name}-", svg[svg.index("<svg") :]).strip()


def write_png(plot: Plot, folder: Path, dpi: int = 150) -> Path:
    """Write the plot as ``FOLDER/<name>.png``; its path."""
    path = folder / f"{plot.name}.png"
    with matplotlib.rc_context(_STYLE):
        plot.figure.savefig(path, format="png", dpi=dpi)
    return path
