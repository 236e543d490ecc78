"""gym report's page in a real browser: Debian's Chromium, headless, driven by Playwright. The page
loads with no console or page errors and asks for nothing over the network; its plots are drawn
(checked on a screenshot); the per-task table sorts and filters; a click shows the first failing
rollout's answer as text, never running what it contains.

Chromium comes from the system (``/usr/bin/chromium``, installed by ``.ci/run``); Playwright never
downloads a browser here."""

from __future__ import annotations

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
        """The task ids of the visible rows, top to bottom."""
        return self.page.eval_on_selector_all(
            "#task-table tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.task)"
        )

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
    assert page.task_order() == ["0", "1", "2", "3", "4"]
    page.sort_by(0)  # task, ascending
    assert page.page.locator("#task-table tr.sort th").nth(0).get_attribute("aria-sort") == "ascending"
    page.sort_by(0)  # task, descending
    assert page.task_order() == ["4", "3", "2", "1", "0"]
    # "before" mean, ascending: equal means keep their order (stable); task 3 is not in "before": last.
    page.sort_by(3)
    assert page.task_order() == ["4", "1", "2", "0", "3"]
    page.sort_by(12)  # Δ mean (after - before), ascending, then descending
    page.sort_by(12)
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
    assert page.task_order() == ["0", "1", "2", "3", "4"]
    assert page.problems == []


def test_a_click_shows_the_answer_as_text(page, report, hostile_answer):
    page.page.locator('#task-table tr[data-task="1"]').click()
    detail = page.page.locator("#task-detail")
    assert detail.locator("h3").text_content() == "Task 1"
    assert detail.locator("pre.answer").first.text_content() == hostile_answer  # shown as written...
    assert detail.locator("script, img").count() == 0  # ...never parsed as markup
    assert page.page.evaluate("typeof window.__pwned") == "undefined"
    assert "every one with reward 1" in detail.text_content()  # the "after" run: nothing failed
    assert page.page.locator('#task-table tr[aria-selected="true"]').get_attribute("data-task") == "1"
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
