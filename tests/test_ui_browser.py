"""``toolexec ui`` end to end: a real host, the real command, headless Chromium (docs/ui.md).

A host process runs an agent tree (``ui_tree.py``) whose write waits for
approval in a SQLite journal; ``toolexec ui`` serves that journal; Playwright
drives Debian's Chromium (``/usr/bin/chromium``: never a downloaded browser)
to approve or deny from the page. The screenshots in docs/img/ are taken
here. Without Playwright or Chromium the tests skip and say which is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from toolexec.durable import SQLiteStore
from ui_tree import write_calls

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import BrowserContext, Page

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent
DOCS_IMG = TESTS.parent / "docs" / "img"


def _shot(page: Any, name: str, tmp: Path, **options: Any) -> None:
    """Take a screenshot: the docs' own (docs/img) with TOOLEXEC_SCREENSHOTS=1
    (tests/README.md), else into the test's temporary folder, so a run of the suite
    leaves the checkout as it found it."""
    folder = DOCS_IMG if os.environ.get("TOOLEXEC_SCREENSHOTS") == "1" else tmp
    folder.mkdir(exist_ok=True)
    page.screenshot(path=folder / name, **options)


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
HANG = 120_000  # ms: a hang guard for anything the page waits for


def chromium() -> str:
    """The system's Chromium, or skip saying what is missing."""
    pytest.importorskip("playwright.sync_api", reason="Playwright (the test extra) is missing")
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found is not None:
            return found
    pytest.skip("no Chromium: install Debian's chromium package (the README's test command does)")


def _prepare(journal: Path) -> None:
    async def run() -> None:
        store = SQLiteStore(journal)
        await write_calls(store, "big", 10_000)
        await store.aclose()

    trio.run(run)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``toolexec ui`` over a journal holding a 10,000-call session; its URL and the journal."""
    browser_path = chromium()
    del browser_path
    root = tmp_path_factory.mktemp("ui")
    journal = root / "journal.db"
    _prepare(journal)
    server = subprocess.Popen(
        [sys.executable, "-m", "toolexec", "ui", "--journal", str(journal), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "USER": "ui-tester"},
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("toolexec ui: open http://127.0.0.1:"), line
        yield line.split("open ", 1)[1].strip(), journal
    finally:
        _end(server)


def _end(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


@pytest.fixture(scope="module")
def browser(served: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=chromium(),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


def start_host(journal: Path, session: str, markers: Path) -> subprocess.Popen[str]:
    markers.mkdir()
    return subprocess.Popen(
        [sys.executable, str(TESTS / "ui_tree.py"), str(journal), session, str(markers)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def host_output(host: subprocess.Popen[str]) -> list[dict[str, Any]]:
    try:
        out, _ = host.communicate(timeout=120)  # a hang guard
    finally:
        _end(host)
    assert host.returncode == 0
    results: list[dict[str, Any]] = json.loads(out)
    return results


def open_page(context: BrowserContext, url: str, requests: list[str] | None = None) -> Page:
    """The page at ``url``, its sessions listed; every URL it requests goes to ``requests``."""
    page = context.new_page()
    page.set_default_timeout(HANG)
    if requests is not None:
        page.on("request", lambda request: requests.append(request.url))
    page.goto(url)
    page.wait_for_selector("#session-list li.session")
    return page


def test_a_click_approves_the_write_and_the_timeline_shows_the_runs(
    served: tuple[str, Path], browser: BrowserContext, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    url, journal = served
    host = start_host(journal, "approve", tmp_path / "markers")
    requests: list[str] = []
    page = open_page(browser, url, requests)
    card = page.locator(".question", has_text="session approve")
    card.wait_for()
    assert "<b>hello</b>" in card.inner_text()  # the arguments, shown as text
    assert page.locator(".question b").count() == 0  # never as markup
    _shot(page, "ui-approval.png", tmp_path)
    card.locator("button.approve").click()
    received = host_output(host)
    assert [r["error_class"] for r in received] == [None, None, None]
    assert (tmp_path / "markers" / "written").read_text() == "<b>hello</b>\n"
    recent = page.locator("#decided-list li", has_text="call w1")
    recent.first.wait_for()
    assert "approved by ui-tester at" in recent.first.inner_text()  # who decided, and when

    session = page.locator("li.session", has_text="approve")
    expect(session.locator("> .badge")).to_have_text("done", timeout=HANG)  # seen live
    session.locator(".name").click()
    page.locator(".batch", has_text="3/3 finished").click()
    expect(page.locator("#timeline .bar:not(.wait)")).to_have_count(3, timeout=HANG)
    drawn = page.evaluate(  # in one go: the page redraws the timeline as it polls
        """() => Object.fromEntries([...document.querySelectorAll('#timeline .bar:not(.wait)')]
            .map((b) => { const box = b.getBoundingClientRect();
                return [b.dataset.call, [Number(b.dataset.lane), Number(b.dataset.start),
                    Number(b.dataset.end), box.top, box.left, box.right]]; }))"""
    )
    r1, r2, w1 = drawn["r1"], drawn["r2"], drawn["w1"]
    assert r1[0] != r2[0]  # the two reads on separate lanes...
    assert r1[3] != r2[3]
    assert max(r1[1], r2[1]) < min(r1[2], r2[2])  # ...because they overlapped
    assert max(r1[4], r2[4]) < min(r1[5], r2[5])  # and are drawn overlapping
    assert w1[1] >= max(r1[2], r2[2])  # the write's run came after the reads' run
    assert w1[4] >= max(r1[5], r2[5]) - 1
    runs = page.locator("#timeline .run")
    assert runs.all_inner_texts() == ["run 1", "run 2"]  # the runs, in order
    page.locator(".row", has_text="w1").click()
    detail = page.locator("#call-detail")
    detail.wait_for()
    decided = detail.inner_text()
    assert "approved by ui-tester at" in decided  # who decided it, and when
    _shot(page, "ui-timeline.png", tmp_path, full_page=True)
    base = url.split("/#")[0] + "/"
    assert requests
    assert [u for u in requests if not u.startswith(base)] == []  # all stay on 127.0.0.1


def test_a_click_denies_and_the_model_receives_user_denied(
    served: tuple[str, Path], browser: BrowserContext, tmp_path: Path
) -> None:
    url, journal = served
    host = start_host(journal, "deny", tmp_path / "markers")
    page = open_page(browser, url)
    page.fill("#answer-reason", "not today")
    card = page.locator(".question", has_text="session deny")
    card.locator("button.deny").click()
    received = {r["call_id"]: r for r in host_output(host)}
    assert received["w1"]["error_class"] == "user_denied"
    assert "not today" in received["w1"]["text"]
    assert not (tmp_path / "markers" / "written").exists()


def test_a_ten_thousand_call_session_opens_in_under_a_second(
    served: tuple[str, Path], browser: BrowserContext, tmp_path: Path
) -> None:
    url, _ = served
    page = open_page(browser, url)
    started = time.perf_counter()
    page.locator("li.session", has_text="big").locator(".name").click()
    page.locator("body[data-load-ms]:not([data-load-ms=''])").wait_for(state="attached")
    took = time.perf_counter() - started
    load_ms = float(page.evaluate("document.body.dataset.loadMs"))
    rendered = page.locator("#calls .row").count()
    assert page.locator("#session-total").inner_text() == "10000 calls"
    assert 0 < rendered < 100  # only the rows in view, never all 10,000
    page.locator("#calls").evaluate("box => { box.scrollTop = 9990 * 24; }")
    page.locator(".row", has_text="c99").last.wait_for()  # the last page, fetched on scroll
    assert page.locator("#calls .row").count() < 100
    _shot(page, "ui-calls.png", tmp_path)
    print(f"10,000-call session: first rows shown {load_ms:.0f} ms after the click (page)")
    print(f"10,000-call session: {took * 1000:.0f} ms from click to rows (test driver)")
    assert took < 60  # a hang guard only; the figure is reported (docs/ui.md)
