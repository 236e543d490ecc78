"""``gym report``: rollouts files → one self-contained HTML report (summary, plots, a sortable and
filterable per-task table), several files compared side by side; the plots also as PNG.

- :mod:`gym_cli.report.data`: the numbers (:class:`~gym_cli.report.data.Run`), from
  :func:`gym_cli.reward_profile.build_profile` plus failures, a confidence interval and answers;
- :mod:`gym_cli.report.plots`: the matplotlib figures (imported only when a report is drawn);
- :mod:`gym_cli.report.render`: the HTML, from ``assets/`` (template, style, script).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ReportResult", "write_report"]


@dataclass
class ReportResult:
    """What :func:`write_report` wrote, and what it could not draw."""

    html: Path
    pngs: list[Path]
    missing_plots: list[str]
    runs: int


def write_report(
    rollouts: list[Path],
    output: Path,
    *,
    png_dir: Path | None = None,
    ks: tuple[int, ...] = (),
    by: str = "environment",
    title: str | None = None,
    labels: tuple[str, ...] = (),
) -> ReportResult:
    """Read the rollouts files (one run each, labelled by ``labels`` or their names), write the HTML
    report to ``output`` and, with ``png_dir``, each plot as PNG there. Raises
    :class:`gym_cli.rollouts.InputError` on bad input (naming file and line; nothing written) or an
    output that cannot be written."""
    from gym_cli.report.data import load_runs
    from gym_cli.report.plots import make_plots, to_svg, write_png
    from gym_cli.report.render import render_html
    from gym_cli.rollouts import InputError, check_writable

    check_writable(output, "--output")  # before the work, not after it
    runs, ks_used = load_runs(rollouts, labels, ks, by)
    plots, missing = make_plots(runs, ks_used, by)
    title = title or "gym report: " + " vs ".join(run.label for run in runs)
    html = render_html(runs, ks_used, by, title, [(p.name, p.title, p.note, to_svg(p)) for p in plots], missing)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(html, encoding="utf-8")
    pngs = []
    if png_dir is not None:
        try:
            png_dir.mkdir(parents=True, exist_ok=True)
            pngs = [write_png(plot, png_dir) for plot in plots]
        except OSError as exc:
            raise InputError(f"--png {png_dir}: cannot write the plots there ({exc.strerror or exc})") from None
    return ReportResult(output, pngs, missing, len(runs))
