"""gym report's page in a real browser: Debian's Chromium, headless, driven by Playwright. The page
loads with no console or page errors and asks for nothing over the network; its plots are drawn
(checked on a screenshot); the per-task table sorts and filters; a click shows the first failing
rollout's answer as text, never running what it contains; the rollout viewer filters by reward,
failure reason, task and text, and shows a transcript (messages, tool calls and outputs) as text,
however hostile.

Chromium comes from the system (``/usr/bin/chromium``, installed by ``.ci/run``); Playwright never
downloads a browser here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image, ImageStat

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PLOTS = ["reward_histogram", "pass_at_k", "reward_by_group", "turns", "tokens", "latency"]
# matplotlib's first two colours: the "before" and "after" runs in every plot.
RUN_COLOURS = [(0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)]


@pytest.fixture(scope="module")
def report(report_runs, tmp_path_factory, gym) -> Path:
    output = tmp_path_factory.mktemp("browser") / "report.html"
    result = gym("report", str(report_runs["before"]), str(report_runs["after"]), "-o", str(output))
    assert result.exit_code == 0, result.output
    return output


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator:
    """One Chromium for the module, with a fresh profile."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium package, which .ci/run "
            "installs (apt-get install chromium); install it the same way"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
            timeout=60_000,
        )
        try:
            yield context
        finally:
            context.close()


class Page:
    """The report opened in a new tab, with what it logged and every request it made."""

    def __init__(self, context, report: Path):
        self.page = context.new_page()
        self.page.set_default_timeout(15_000)
        self.problems: list[str] = []
        self.requests: list[str] = []
        self.page.on(
            "console", lambda m: m.type in ("error", "warning") and self.problems.append(f"{m.type}: {m.text}")
        )
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(report.as_uri())

    def task_order(self) -> list[str]:
        """The task indices of the visible rows, top to bottom."""
        return self.page.eval_on_selector_all(
            "#task-table tbody tr:not([hidden])", "rows => rows.map(r => r.cells[0].textContent)"
        )

    def task_row(self, index: str):
        return self.page.locator("#task-table tbody tr").filter(
            has=self.page.locator("td:first-child", has_text=re.compile(f"^{index}$"))
        )

    def rollouts_shown(self) -> list[tuple[str, str, str, str, str]]:
        """The visible rows of the rollout viewer: (run, task, rollout, reward, reason)."""
        return [
            tuple(row)
            for row in self.page.eval_on_selector_all(
                "#rollout-table tbody tr:not([hidden])", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
            )
        ]

    def sort_by(self, column: int) -> None:
        self.page.locator("#task-table tr.sort th").nth(column).click()


@pytest.fixture
def page(browser, report) -> Iterator[Page]:
    opened = Page(browser, report)
    yield opened
    opened.page.close()


def test_renders_with_no_errors_and_no_requests(page, report):
    assert page.page.title() == "gym report: before vs after"
    assert page.page.locator("figure.plot svg").count() == len(PLOTS)
    for name in PLOTS:
        box = page.page.locator(f"#plot-{name} svg").bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 150, name
    assert page.page.locator("#task-count").text_content() == "5 of 5 tasks"
    assert page.problems == []
    assert page.requests == [report.as_uri()]  # self-contained: nothing else was fetched


def test_sorting_by_a_column(page):
    assert page.task_order() == ["0", "1", "2", "4", "3"]  # "after"'s task 3 is not "before"'s: last
    page.sort_by(0)  # task, ascending
    assert page.page.locator("#task-table tr.sort th").nth(0).get_attribute("aria-sort") == "ascending"
    assert page.task_order() == ["0", "1", "2", "3", "4"]
    page.sort_by(0)  # task, descending
    assert page.task_order() == ["4", "3", "2", "1", "0"]
    # "before" mean, ascending: equal means keep their order (stable); task 3 is not in "before": last.
    page.sort_by(4)
    assert page.task_order() == ["4", "1", "2", "0", "3"]
    page.sort_by(2)  # Δ mean (after - before), ascending, then descending
    page.sort_by(2)
    assert page.task_order() == ["1", "4", "2", "0", "3"]
    assert page.problems == []


def test_filtering(page):
    page.page.fill("#task-filter", "counter 4")
    assert page.task_order() == ["4"]
    assert page.page.locator("#task-count").text_content() == "1 of 5 tasks"
    page.page.fill("#task-filter", "")
    page.page.check("#failing-only")  # tasks with a rollout below reward 1 in some run
    assert page.task_order() == ["1", "4"]
    page.page.uncheck("#failing-only")
    assert page.task_order() == ["0", "1", "2", "4", "3"]
    assert page.problems == []


def test_delta_column_stays_in_view(page):
    """The Δ column is on screen without scrolling the table sideways, however many columns follow."""
    header = page.page.locator("#task-table tr.sort th").nth(2)
    assert header.text_content() == "Δ mean"
    box, wrap = header.bounding_box(), page.page.locator("#tasks .table-wrap").bounding_box()
    assert box is not None and wrap is not None
    assert wrap["x"] <= box["x"] and box["x"] + box["width"] <= wrap["x"] + wrap["width"] <= 1280
    assert page.task_row("1").locator("td").nth(2).text_content() == "1.000"


def test_a_click_shows_the_answer_as_text(page, report, hostile_answer):
    page.task_row("1").click()
    detail = page.page.locator("#task-detail")
    assert detail.locator("h3").text_content() == "Task 1"
    assert detail.locator("pre.answer").first.text_content() == hostile_answer  # shown as written...
    assert detail.locator("script, img").count() == 0  # ...never parsed as markup
    assert page.page.evaluate("typeof window.__pwned") == "undefined"
    assert "every one with reward 1" in detail.text_content()  # the "after" run: nothing failed
    assert page.page.locator('#task-table tr[aria-selected="true"] td').first.text_content() == "1"
    assert page.problems == [] and page.requests == [report.as_uri()]


def test_screenshot_shows_the_plots(page, tmp_path):
    page.page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / "report.png"
    page.page.screenshot(path=str(shot), full_page=True)
    with Image.open(shot) as image:
        screenshot = image.convert("RGB")
    for name in PLOTS:
        box = page.page.locator(f"#plot-{name} svg").bounding_box()
        area = screenshot.crop(
            (int(box["x"]), int(box["y"]), int(box["x"] + box["width"]), int(box["y"] + box["height"]))
        )
        # A drawn plot is far from uniform, and shows both runs in their colours.
        assert ImageStat.Stat(area.convert("L")).var[0] > 200, f"{name}: the plot area is blank"
        colours = {colour for _, colour in area.getcolors(maxcolors=1 << 20)}
        for run, colour in zip(("before", "after"), RUN_COLOURS):
            assert any(sum(abs(a - b) for a, b in zip(colour, c)) < 30 for c in colours), f"{name}: no {run} colour"
    # The check can fail: a blank stretch of the same screenshot (the header's right side) is uniform.
    header = page.page.locator("header").bounding_box()
    blank = screenshot.crop(
        (
            int(header["x"] + header["width"] - 200),
            int(header["y"]),
            int(header["x"] + header["width"]),
            int(header["y"] + 20),
        )
    )
    assert ImageStat.Stat(blank.convert("L")).var[0] < 1


def test_rollout_viewer_filters(page):
    """Every rollout is listed; the reward, failure reason, task and text filters each find the right ones."""
    count = page.page.locator("#rollout-count")
    assert count.text_content() == "30 of 30 rollouts"  # before: 12 rows and 3 failures; after: 15 rows
    page.page.select_option("#rollout-reward", "below1")
    below = page.rollouts_shown()
    assert sorted({(run, task) for run, task, *_ in below}) == [("after", "4"), ("before", "1"), ("before", "4")]
    assert len(below) == 9 and all(reward == "0" for *_, reward, _ in below)
    page.page.select_option("#rollout-reward", "")
    page.page.select_option("#rollout-reason", "=validation_error")
    failed = [("before", "3", str(i), "failed", "validation_error") for i in range(3)]
    assert sorted(page.rollouts_shown()) == failed  # the failures file's rows, in its order
    page.page.select_option("#rollout-reason", "")
    page.page.select_option("#rollout-reward", "none")  # no reward: the same three
    assert len(page.rollouts_shown()) == 3
    page.page.select_option("#rollout-reward", "")
    page.page.fill("#rollout-search", "__pwned")  # text anywhere in the transcript
    assert [(run, task) for run, task, *_ in page.rollouts_shown()] == [("before", "1")] * 3
    page.page.fill("#rollout-search", "")
    page.page.fill("#rollout-task", "4")
    assert sorted({(run, task) for run, task, *_ in page.rollouts_shown()}) == [("after", "4"), ("before", "4")]
    page.page.select_option("#rollout-run", "1")
    assert len(page.rollouts_shown()) == 3 and count.text_content() == "3 of 30 rollouts"
    assert page.problems == []


def test_rollout_viewer_shows_the_transcript(page):
    """A click shows the rollout's messages, its tool call with arguments, the tool's output and the fields."""
    page.page.fill("#rollout-task", "0")
    page.page.select_option("#rollout-run", "0")
    page.page.locator("#rollout-table tbody tr:not([hidden])").first.click()
    detail = page.page.locator("#rollout-detail")
    assert detail.locator("h3").text_content() == "before: task 0, rollout 0"
    items = detail.locator(".item")
    labels = [items.nth(i).locator(".label").text_content() for i in range(items.count())]
    assert labels == ["user", "tool call: increment_counter", "tool output", "assistant"]
    assert items.nth(0).locator("pre").text_content() == "Make the counter 3."
    assert json.loads(items.nth(1).locator("pre").text_content()) == {"count": 3}
    assert "3" in items.nth(2).locator("pre").text_content()
    assert items.nth(3).locator("pre").text_content() == "added 3"
    fields = dict(zip(detail.locator("dt").all_text_contents(), detail.locator("dd").all_text_contents()))
    assert fields["reward"] == "1.0" and fields["expected_count"] == "3" and fields["environment"] == "counter"
    assert page.problems == []


HOSTILE = {
    "name": '<img src="x" onerror="window.__pwned = 10">',
    "arguments": '{"q": "<script>window.__pwned = 11</script>"}',
    "output": '<svg onload="window.__pwned = 12"></svg><iframe srcdoc="<script>parent.__pwned = 13</script>">',
    "reason": "<script>window.__pwned = 14</script>",
    "field": '<b onmouseover="window.__pwned = 15">x</b>',
}


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory) -> Path:
    """A report of one rollout whose every text (tool call, output, reason, field names) is markup."""
    from gym_cli.report import write_report

    folder = tmp_path_factory.mktemp("hostile")
    row = {
        "task_index": 0,
        "rollout_index": 0,
        "reward": 0.0,
        "reason": HOSTILE["reason"],
        HOSTILE["field"]: HOSTILE["field"],
        "responses_create_params": {"input": [{"role": "user", "content": HOSTILE["field"]}]},
        "response": {
            "output": [
                {"type": "function_call", "call_id": "c", "name": HOSTILE["name"], "arguments": HOSTILE["arguments"]},
                {"type": "function_call_output", "call_id": "c", "output": HOSTILE["output"]},
            ]
        },
    }
    (folder / "hostile.jsonl").write_text(json.dumps(row) + "\n")
    return write_report([folder / "hostile.jsonl"], folder / "hostile.html").html


def test_a_hostile_transcript_runs_nothing(browser, hostile_report):
    page = Page(browser, hostile_report)
    try:
        page.page.select_option("#rollout-reason", "=" + HOSTILE["reason"])  # the option is text too
        assert len(page.rollouts_shown()) == 1
        page.page.locator("#rollout-table tbody tr").first.click()
        detail = page.page.locator("#rollout-detail")
        pres = detail.locator(".item pre").all_text_contents()
        assert pres == [HOSTILE["field"], HOSTILE["arguments"], HOSTILE["output"]]
        assert detail.locator(".item .label").nth(1).text_content() == "tool call: " + HOSTILE["name"]
        assert HOSTILE["field"] in detail.locator("dt").all_text_contents()
        page.page.locator("#rollout-detail dd").last.hover()
        markup = "#rollouts script, #rollouts img, #rollouts svg, #rollouts iframe, #rollouts b"
        assert page.page.locator(markup).count() == 0  # every text shown as text, none parsed
        assert page.page.evaluate("typeof window.__pwned") == "undefined"
        assert page.problems == [] and page.requests == [hostile_report.as_uri()]
    finally:
        page.page.close()


def test_a_task_opens_its_rollouts(page):
    """ "Show its rollouts" in a task's details lists that task's rollouts in both runs (paired by identity)."""
    page.page.select_option("#rollout-reward", "none")  # whatever the filters were, they are cleared
    page.task_row("1").click()
    page.page.click("#task-rollouts")
    shown = page.rollouts_shown()
    assert sorted((run, task, rollout) for run, task, rollout, *_ in shown) == [
        (run, "1", str(i)) for run in ("after", "before") for i in range(3)
    ]
    task_id = page.task_row("1").get_attribute("data-task")
    assert page.page.input_value("#rollout-task") == task_id and len(task_id) == 12
    assert page.problems == []
