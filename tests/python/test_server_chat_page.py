"""The chat page at / in a real browser: headless Chromium (Debian's `chromium`, driven by
Playwright). Types a message, watches the reply stream in piece by piece, and stops a
long reply with the Stop button (the server must cancel it).

Model: gemma3-270m (or RIDGE_CHAT_PAGE_MODEL, a cached model name), skipped when not cached.
Screenshot: written to the pytest temp dir, or to RIDGE_SCREENSHOT when set
(docs/img/chat-page.png is made that way).
"""

import os
import shutil
import time
from pathlib import Path

import pytest

from test_server_api import RidgeServer, cached_model

CHROMIUM = os.environ.get("RIDGE_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def server():
    name = os.environ.get("RIDGE_CHAT_PAGE_MODEL", "gemma3-270m")
    path = cached_model(name)
    if path is None:
        pytest.skip(f"{name} is not in the model cache")
    with RidgeServer(path, "--parallel", 2, "-c", 2048, "--alias", name) as s:
        yield s


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def set_max_tokens(page, n):
    page.click("#settings summary")
    page.fill("#max-tokens", str(n))
    page.fill("#temperature", "0")
    page.click("#settings summary")


def watch_reply(page, timeout_s):
    """Polls the last assistant bubble until it stops streaming; returns the distinct texts
    seen while it was still streaming, and the final text."""
    seen = []
    deadline = time.monotonic() + timeout_s
    bubble = page.locator(".message.assistant").last
    while time.monotonic() < deadline:
        state = bubble.evaluate("e => [e.classList.contains('streaming'), e.firstChild ? e.firstChild.textContent : '']")
        streaming, text = state
        if streaming and text and (not seen or seen[-1] != text):
            seen.append(text)
        if not streaming:
            return seen, bubble.inner_text()
        time.sleep(0.01)
    raise AssertionError(f"reply still streaming after {timeout_s} s; seen {seen[-1:]}")


def test_chat_page_streams_a_reply(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 900, "height": 640})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.base_url + "/", timeout=30000)
    page.wait_for_function("document.querySelector('#model').textContent.includes('context')", timeout=30000)
    set_max_tokens(page, 48)

    page.fill("#input", "Write a haiku about the sea.")
    page.press("#input", "Enter")
    page.wait_for_selector(".message.user", timeout=10000)
    assert page.locator(".message.user").inner_text() == "Write a haiku about the sea."
    assert page.locator("#stop").is_enabled()

    partial, final = watch_reply(page, timeout_s=120)
    # Streamed: the text grew in several steps before the reply finished.
    assert len(partial) >= 3, partial
    assert all(final.startswith(p) for p in partial)
    assert "tokens" in final  # the stats line under the reply
    assert page.locator(".message.error").count() == 0
    assert page.locator("#send").is_enabled() and not page.locator("#stop").is_enabled()
    assert not errors, errors

    shot = Path(os.environ.get("RIDGE_SCREENSHOT", tmp_path / "chat-page.png"))
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 5000
    page.close()


def test_stop_button_cancels_the_request(server, browser):
    page = browser.new_page()
    page.goto(server.base_url + "/", timeout=30000)
    page.wait_for_function("document.querySelector('#model').textContent.includes('context')", timeout=30000)
    set_max_tokens(page, 1500)
    before = server.metrics()["ridge_generation_tokens_total"]
    page.fill("#input", "Tell me a very long story about a lighthouse keeper.")
    page.press("#input", "Enter")
    bubble = page.locator(".message.assistant").last
    page.wait_for_function(
        "() => { const b = [...document.querySelectorAll('.message.assistant')].pop();"
        " return b && b.firstChild && b.firstChild.textContent.length > 10; }", timeout=60000)
    page.click("#stop")
    page.wait_for_function("() => !document.querySelector('.message.assistant.streaming')", timeout=10000)
    assert "stopped" in bubble.inner_text()
    idle = server.wait_idle(timeout=10)  # the server cancelled it: no sequence is left running
    assert idle["ridge_generation_tokens_total"] - before < 1500
    # The conversation continues after a stop.
    page.fill("#input", "Thanks.")
    page.press("#input", "Enter")
    page.wait_for_function("() => document.querySelectorAll('.message.assistant').length == 2", timeout=10000)
    page.close()
