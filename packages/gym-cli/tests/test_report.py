"""gym report over real collections (counter, simple_agent, scripted model; the ``report_runs``
fixture of conftest.py): the numbers, the per-task table, the first failing answers, the plots as
inline SVG and PNG, one self-contained file, deterministic output, and clear errors on bad input.
The page's behaviour in a browser is tested in test_report_browser.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from gym_cli.report.data import default_ks, load_runs, reward_ci

PLOTS = ["reward_histogram", "pass_at_k", "reward_by_group", "turns", "tokens"]


class Tables(HTMLParser):
    """The text of every table cell, per table id (or class) and row; the ids of the figures."""

    def __init__(self, html: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.figures: list[str] = []
        self.svgs = 0
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = attrs.get("id") or attrs.get("class", "")
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "figure":
            self.figures.append(attrs["id"])
        elif tag == "svg":
            self.svgs += 1

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def old_runs(report_runs, tmp_path_factory) -> dict[str, Path]:
    """``report_runs`` as rows written before gym collect recorded ``latency_s``: the same rows (and
    failures files) without it, so that the plots and figures below do not depend on timing."""
    folder = tmp_path_factory.mktemp("old_runs")
    runs = {}
    for name, path in report_runs.items():
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert all("latency_s" in row for row in rows)  # what a collection writes now
        runs[name] = folder / path.name
        runs[name].write_text(
            "".join(json.dumps({k: v for k, v in row.items() if k != "latency_s"}) + "\n" for row in rows)
        )
        failures = path.with_name(path.stem + ".failures.jsonl")
        if failures.is_file():
            (folder / failures.name).write_bytes(failures.read_bytes())
    return runs


@pytest.fixture(scope="module")
def two_runs(old_runs, tmp_path_factory, gym) -> tuple[Path, Path, str]:
    """The report of both runs (labels before/after) with --png: its path, the PNG folder, its HTML."""
    folder = tmp_path_factory.mktemp("report")
    output, pngs = folder / "report.html", folder / "plots"
    result = gym("report", str(old_runs["before"]), str(old_runs["after"]), "-o", str(output), "--png", str(pngs))
    assert result.exit_code == 0, result.output
    assert f"report of 2 runs written to {output}" in result.output
    assert "no latency plot: the rows do not record latency_s" in result.output
    return output, pngs, output.read_text()


def test_summary_side_by_side(two_runs):
    summary = {row[0]: row[1:] for row in Tables(two_runs[2]).tables["summary"]}
    assert summary[""] == ["before", "after"]
    assert summary["rollouts"] == ["12", "15"]  # before: task 3's three rollouts failed (not rows)
    assert summary["tasks"] == ["4", "5"]
    assert summary["failed rollouts"] == ["3validation_error: 3", "0"]
    assert summary["mean reward"] == ["0.500", "0.800"]
    # k = 1, 2, 4, ... up to the 3 rollouts per task, and 3 itself; binary rewards: tasks pass or not.
    assert [summary[f"pass@{k}"] for k in (1, 2, 3)] == [["0.500", "0.800"]] * 3
    assert "pass@4" not in summary and "majority@1" not in summary  # counter rows record no extracted answer
    assert summary["turns per rollout"] == ["1.5", "1.8"]
    for low_high, mean in zip(summary["95% CI of the mean"], (0.5, 0.8)):
        low, high = map(float, low_high.strip("[]").split(","))
        assert 0.0 <= low < mean < high <= 1.0


def test_task_table_compares_runs(two_runs):
    rows = Tables(two_runs[2]).tables["task-table"]
    assert rows[1] == [
        "task",
        "prompt",
        "Δ mean",  # right after the prompt: in view however many runs and pass@k columns follow
        "n",
        "mean",
        "pass@1",
        "pass@2",
        "pass@3",
        "n",
        "mean",
        "pass@1",
        "pass@2",
        "pass@3",
    ]
    table = {row[0]: row[2:] for row in rows[2:]}
    # "before"'s task 3 has no rows (all its rollouts failed): the "after" task 3, with its own prompt,
    # is another task, listed after the first run's.
    assert list(table) == ["0", "1", "2", "4", "3"]
    assert table["1"] == ["1.000", "3", "0.000", "0.000", "0.000", "0.000", "3", "1.000", "1.000", "1.000", "1.000"]
    assert table["3"] == ["–"] + ["–"] * 5 + ["3", "1.000", "1.000", "1.000", "1.000"]  # not in "before": no Δ
    assert table["4"][0] == "0.000"
    assert rows[3][1] == "Make the counter 2."


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_runs_are_paired_by_task_not_by_index(old_runs, tmp_path, gym):
    """A run of the same tasks in another order, in a dataset with one task more and one less, is
    compared task by task: each task's Δ is its own (by index it would be another task's)."""
    before = _rows(old_runs["before"])
    after = [r for r in _rows(old_runs["after"]) if r["task_index"] != 2]  # task 2: only in "before"
    moved = {0: 3, 1: 0, 3: 4, 4: 1}  # "after" reordered; its index 2 now a new task
    for row in after:
        row["task_index"] = moved[row["task_index"]]
    extra = [r for r in _rows(old_runs["after"]) if r["task_index"] == 0]
    for row in extra:
        row["task_index"] = 2
        row["responses_create_params"] = {**row["responses_create_params"], "input": "A new task."}
    _write(tmp_path / "before.jsonl", before)
    _write(tmp_path / "after.jsonl", after + extra)
    output = tmp_path / "report.html"
    result = gym("report", str(tmp_path / "before.jsonl"), str(tmp_path / "after.jsonl"), "-o", str(output))
    assert result.exit_code == 0, result.output
    html = output.read_text()
    table = {row[1]: [row[0], row[2]] for row in Tables(html).tables["task-table"][2:]}
    # prompt → [task index in each run, Δ mean]
    assert table == {
        "Make the counter 3.": ["0 / 3", "0.000"],
        "Make the counter 2.": ["1 / 0", "1.000"],  # the hostile answer, fixed
        "Make the counter 5.": ["2", "–"],  # only in "before"
        "Make the counter 4.": ["4 / 1", "0.000"],
        "Make the counter 1.": ["4", "–"],  # "after"'s task 3 (before's failed entirely)
        "A new task.": ["2", "–"],
    }
    comparison = Tables(html).tables["summary comparison"]
    assert comparison[0] == [
        "runs",
        "environment",
        "paired tasks",
        "only in the first",
        "only in the other",
        "Δ mean reward",
        "95% CI",
        "significant",
    ]
    # Paired differences 0, 1, 0: mean 1/3; resamples of three tasks give 0 to 1, so not significant.
    assert comparison[1] == ["after − before", "counter", "3", "1", "2", "0.333", "[0.000, 1.000]", "no"]
    assert comparison[2] == ["after − before", "all environments", "3", "1", "2", "0.333", "[0.000, 1.000]", "no"]


def test_paired_difference_and_task_identity():
    from gym_cli.report.data import paired_difference, task_identity

    better = paired_difference([(0.0, 1.0)] * 4 + [(0.5, 1.0)])
    assert better["tasks"] == 5 and better["delta"] == pytest.approx(0.9) and better["significant"]
    assert 0.5 <= better["ci"][0] <= 0.9 <= better["ci"][1] <= 1.0
    mixed = paired_difference([(0.0, 1.0), (1.0, 0.0), (0.0, 0.0), (1.0, 1.0)])
    assert mixed["delta"] == 0.0 and mixed["ci"][0] < 0 < mixed["ci"][1] and not mixed["significant"]
    assert paired_difference([(0.0, 1.0)]) == {"tasks": 1, "delta": 1.0, "ci": None, "significant": False}
    assert paired_difference([])["delta"] is None
    assert paired_difference([(0.0, 1.0)] * 4 + [(0.5, 1.0)]) == better  # seeded: the same every time
    row = {
        "task_index": 0,
        "environment": "math",
        "reward": 1.0,
        "responses_create_params": {"input": [{"role": "user", "content": "2+2?"}], "temperature": 0.7},
    }
    same = {
        **row,
        "task_index": 9,
        "reward": 0.0,
        "extracted_answer": "4",
        "model": "other",
        "responses_create_params": {"input": [{"role": "user", "content": "2+2?"}], "metadata": {"x": "y"}},
    }
    assert task_identity(row) == task_identity(same)  # index, sampling, metadata, verdict: not the task
    assert task_identity(row) != task_identity({**row, "environment": "code"})
    assert task_identity(row) != task_identity({**row, "responses_create_params": {"input": "2+3?"}})
    assert task_identity({"task_index": 4, "reward": 1.0}) == "index-4"  # no model input: its index


def test_first_failing_answer_is_data_never_markup(two_runs, report_runs, hostile_answer):
    html = two_runs[2]
    runs, _ = load_runs([report_runs["before"], report_runs["after"]])
    before, after = runs
    assert before.first_failing[1] == {"rollout_index": 0, "reward": 0.0, "answer": hostile_answer}
    assert before.first_failing[4]["answer"] == "added 2" and 0 not in before.first_failing
    assert sorted(after.first_failing) == [4]
    # The answer travels in the JSON with <, > and & escaped: it cannot end the data's <script> element.
    data = json.loads(
        re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1)
    )
    task = before.identity[1]
    assert data["tasks"][task]["runs"][0]["first_failing"]["answer"] == hostile_answer
    assert "window.__pwned" in html and "<script>window.__pwned" not in html and '<img src="x"' not in html
    assert html.count("<script") == 2  # the data and the report's own script
    # Only the report's own script may run: the policy allows it by hash and no network at all.
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp


def _data(html: str) -> dict:
    return json.loads(
        re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1)
    )


def test_viewer_holds_every_rollout_transcript(two_runs):
    """The rollout viewer's data: every rollout of both runs (failed ones too, with their typed reason),
    each with its transcript (input, messages, tool calls and outputs) and its row's fields."""
    rollouts = _data(two_runs[2])["rollouts"]
    assert len(rollouts) == 12 + 3 + 15  # "before": 12 rows and 3 failures; "after": 15 rows
    failed = [r for r in rollouts if r.get("failed")]
    assert [(r["run"], r["task_index"], r["reward"], r["reason"]) for r in failed] == [
        (0, "3", None, "validation_error")
    ] * 3
    assert "expected_count" in failed[0]["fields"]["message"]
    first = rollouts[0]
    assert (first["run"], first["task_index"], first["rollout"], first["reward"]) == (0, "0", 0, 1.0)
    assert first["items"][0] == {"kind": "message", "role": "user", "text": "Make the counter 3."}
    kinds = [(i["kind"], i.get("name")) for i in first["items"]]
    assert kinds == [("message", None), ("call", "increment_counter"), ("output", None), ("message", None)]
    assert json.loads(first["items"][1]["text"]) == {"count": 3}
    assert "3" in first["items"][2]["text"] and first["items"][3]["text"] == "added 3"
    assert first["fields"]["expected_count"] == "3" and first["fields"]["final_count"] == "3"
    assert "response" not in first["fields"] and "responses_create_params" not in first["fields"]
    assert [r["rollout"] for r in rollouts if r["run"] == 1 and r["task_index"] == "4"] == [0, 1, 2]  # sorted


def test_viewer_cuts_long_texts_and_many_rollouts(tmp_path, monkeypatch):
    """A huge tool output is cut with a marker; beyond MAX_VIEWER_ROLLOUTS the page embeds the first
    ones and says so."""
    from gym_cli.report import data, write_report

    monkeypatch.setattr(data, "MAX_VIEWER_ROLLOUTS", 5)
    monkeypatch.setattr("gym_cli.report.render.MAX_VIEWER_ROLLOUTS", 5)
    output = [{"type": "function_call_output", "call_id": "c", "output": "x" * 10_000}]
    rows = [{"task_index": t, "rollout_index": 0, "reward": 0.0, "response": {"output": output}} for t in range(8)]
    path = _write(tmp_path / "big.jsonl", rows)
    html = write_report([path], tmp_path / "big.html").html.read_text()
    rollouts = _data(html)["rollouts"]
    assert len(rollouts) == 5
    assert rollouts[0]["items"][0]["text"] == "x" * data.MAX_TEXT + f"… ({10_000 - data.MAX_TEXT} more characters)"
    assert "Only big: the first 5 of its 8 rollouts (the rest are in its file)." in html


def test_plots_inline_and_as_png(two_runs):
    output, pngs, html = two_runs
    page = Tables(html)
    assert page.figures == [f"plot-{name}" for name in PLOTS]
    assert page.svgs == len(PLOTS)
    # Self-contained: nothing to fetch (the SVG namespace URIs are names, not requests).
    assert not re.search(r'<link|@import|\b(src|href)="(https?:)?//', html)
    # Several SVGs in one page: every id is prefixed with its plot's name, so none collides.
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    assert sorted(p.name for p in pngs.iterdir()) == sorted(f"{name}.png" for name in PLOTS)
    for name in PLOTS:
        with Image.open(pngs / f"{name}.png") as image:
            assert image.format == "PNG" and image.width > 300 and image.height > 200


def test_output_is_deterministic(two_runs, old_runs, tmp_path, gym):
    again = tmp_path / "again.html"
    assert (
        gym(
            "report", str(old_runs["before"]), str(old_runs["after"]), "-o", str(again), "--png", str(tmp_path)
        ).exit_code
        == 0
    )
    assert again.read_text() == two_runs[2]
    assert all((tmp_path / f"{name}.png").read_bytes() == (two_runs[1] / f"{name}.png").read_bytes() for name in PLOTS)


def test_labels_title_and_grouping(report_runs, tmp_path, gym):
    output = tmp_path / "by_model.html"
    result = gym(
        "report",
        str(report_runs["before"]),
        str(report_runs["after"]),
        "--label",
        "step 0",
        "--label",
        "step 100",
        "--title",
        "Counter <before/after>",
        "--by",
        "model",
        "-o",
        str(output),
        "-k",
        "2",
    )
    assert result.exit_code == 0, result.output
    html = output.read_text()
    assert "<title>Counter &lt;before/after&gt;</title>" in html
    tables = Tables(html).tables
    assert tables["summary"][0] == ["", "step 0", "step 100"]
    assert {row[0] for row in tables["summary"]} >= {"pass@2"} and "pass@1" not in {row[0] for row in tables["summary"]}
    assert tables["summary groups"][1:] == [["scripted-policy", "12 · 0.500", "15 · 0.800"]]
    assert "Reward by model" in html


def test_collected_rows_get_a_latency_plot(report_runs, tmp_path, gym):
    """gym collect records each rollout's latency_s: a report of a fresh collection plots it."""
    result = gym("report", str(report_runs["after"]), "-o", str(tmp_path / "report.html"))
    assert result.exit_code == 0, result.output
    assert "no latency plot" not in result.output
    page = Tables((tmp_path / "report.html").read_text())
    assert page.figures[-1] == "plot-latency"
    summary = {row[0]: row[1:] for row in page.tables["summary"]}
    p50, p99 = (float(x) for x in summary["latency p50 / p99, s"][0].split(" / "))
    assert 0 <= p50 <= p99  # shown to 10 ms: a fast in-thread rollout may show as 0.00


def test_majority_and_latency_when_rows_record_them(report_runs, tmp_path, gym):
    """Rows with an extracted answer get majority@k; rows with latency_s a latency plot and p50/p99."""
    rows = [json.loads(line) for line in report_runs["after"].read_text().splitlines()]
    for row in rows:
        row["extracted_answer"] = "right" if row["reward"] == 1.0 else "wrong"
        row["latency_s"] = 0.5 + row["rollout_index"]
    path = tmp_path / "timed.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = gym("report", str(path), "--png", str(tmp_path / "plots"))
    assert result.exit_code == 0, result.output
    assert "no latency plot" not in result.output
    html = (tmp_path / "timed.report.html").read_text()  # the default output: beside the rollouts
    summary = {row[0]: row[1:] for row in Tables(html).tables["summary"]}
    assert summary["majority@3"] == ["0.800"]
    assert summary["latency p50 / p99, s"] == ["1.50 / 2.50"]
    assert Tables(html).figures[-1] == "plot-latency"
    assert (tmp_path / "plots" / "latency.png").is_file()


def test_default_ks_and_confidence_interval():
    assert default_ks(1) == [1] and default_ks(4) == [1, 2, 4] and default_ks(6) == [1, 2, 4, 6]
    same = [{"task_index": t, "reward": r} for t in range(5) for r in (0.0, 1.0)]
    assert reward_ci(same) == (0.5, 0.5)  # every task has the same mean: resampling tasks changes nothing
    one_task = [{"task_index": 0, "reward": r} for r in (0.0, 1.0, 1.0)]
    assert reward_ci(one_task) == pytest.approx((2 / 3, 2 / 3))


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "rollouts file not found: {path}"),
        ("", "{path}: no rollouts"),
        ('{"task_index": 0, "reward": 1.0}\nnot json\n', "{path}:2: not valid JSON"),
        ('{"task_index": 0}\n', "{path}:1: not a rollout row (needs task_index and reward)"),
        (
            '{"task_index": 0, "reward": "high"}\n',
            "{path}: cannot profile its rows (row 0 has no numeric reward: 'high')",
        ),
    ],
)
def test_bad_rollouts_file(tmp_path, content, message, gym):
    path = tmp_path / "rollouts.jsonl"
    if content is not None:
        path.write_text(content)
    result = gym("report", str(path), "-o", str(tmp_path / "out.html"))
    assert result.exit_code == 2
    assert message.format(path=path) in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out.html").exists()


def test_bad_failures_file_and_labels(report_runs, tmp_path, gym):
    path = tmp_path / "run.jsonl"
    path.write_text(report_runs["before"].read_text())
    (tmp_path / "run.failures.jsonl").write_text('{"task_index": 3, "reason": "timeout"}\n[1, 2]\n')
    result = gym("report", str(path), "-o", str(tmp_path / "out.html"))
    assert result.exit_code == 2 and f"{tmp_path / 'run.failures.jsonl'}:2: not a failure row" in result.output
    result = gym("report", str(report_runs["before"]), str(report_runs["after"]), "--label", "only one")
    assert result.exit_code == 2 and "1 --label for 2 rollouts files" in result.output
    result = gym("report", str(report_runs["before"]), str(report_runs["after"]), "--label", "x", "--label", "x")
    assert result.exit_code == 2 and "same label" in result.output
    assert gym("report").exit_code == 2  # no rollouts file: a usage error
    result = gym("report", str(report_runs["before"]), "-o", str(tmp_path))
    assert result.exit_code == 2 and "is a directory" in result.output
    (tmp_path / "taken").write_text("")
    result = gym(
        "report", str(report_runs["before"]), "-o", str(tmp_path / "out.html"), "--png", str(tmp_path / "taken" / "x")
    )
    assert result.exit_code == 2 and f"--png {tmp_path / 'taken' / 'x'}: cannot write the plots there" in result.output


def test_gym_help_does_not_import_plotting():
    code = (
        "import sys\nfrom gym_cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'numpy') or m.startswith('gym_cli.report')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "report" in result.stdout  # the subcommand is listed...
    assert result.stdout.strip().splitlines()[-1] == "[]"  # ...and nothing of it or matplotlib was imported
