"""The chat page at / in a real browser: headless Chromium (Debian's `chromium`, driven by
Playwright) against a real `ridge serve` on loopback.

- The Markdown renderer (web/markdown.js), called in the served page with fixed text:
  code blocks, lists, headings, tables, inline marks, links; hostile text (<script>,
  <img onerror>, javascript: links) stays text; streamed rendering equals whole rendering.
- A hostile answer streamed through the page's own fetch/SSE path (the completions
  request answered by a canned stream), and the speculative-decoding line it shows.
- End to end with the model: a reply streams in piece by piece and renders its code block
  and list; Stop cancels a long reply; with --spec ngram the acceptance the page shows is
  what /metrics counted.

Renderer tests serve the page from stories260K (a fixture, always there). Model tests use
gemma3-270m (or RIDGE_CHAT_PAGE_MODEL) and, for the Markdown answer, qwen2.5-coder-0.5b
(or RIDGE_CHAT_PAGE_MARKDOWN_MODEL): cached model names, skipped when not cached
(scripts/test fetches them).
Screenshot: written to the pytest temp dir, or to RIDGE_SCREENSHOT when set
(docs/img/chat-page.png is made that way).
"""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from test_server_api import STORIES, RidgeServer, cached_model

CHROMIUM = os.environ.get("RIDGE_CHROMIUM", "/usr/bin/chromium")
MODEL = os.environ.get("RIDGE_CHAT_PAGE_MODEL", "gemma3-270m")
# An instruction-tuned model, for an answer in Markdown (gemma3-270m is a base model).
MARKDOWN_MODEL = os.environ.get("RIDGE_CHAT_PAGE_MARKDOWN_MODEL", "qwen2.5-coder-0.5b")


def model_path(name=MODEL):
    path = cached_model(name)
    if path is None:
        pytest.skip(f"{name} is not in the model cache (scripts/fetch-models)")
    return path


@pytest.fixture(scope="module")
def server():
    with RidgeServer(model_path(), "--parallel", 2, "-c", 2048, "--alias", MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def page_server():
    """Serves the page only (the renderer tests need no model that can chat)."""
    with RidgeServer(STORIES, "--parallel", 1, "-c", 256, "--alias", "stories") as s:
        yield s


@pytest.fixture(scope="module")
def browser():
    # scripts/install-deps installs both; only a machine without Chromium skips.
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium; scripts/install-deps does)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


class Watched:
    """A page with every dialog (alert, confirm, prompt), page error, popup and
    Content-Security-Policy violation recorded.

    The page's CSP is bypassed unless enforce_csp: the renderer must be safe by itself
    (the CSP is a second line), and Playwright's wait_for_function needs eval."""

    def __init__(self, browser, base_url, enforce_csp=False, **kwargs):
        self.page = browser.new_page(bypass_csp=not enforce_csp, **kwargs)
        self.dialogs, self.errors, self.popups, self.csp = [], [], [], []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("popup", lambda p: self.popups.append(p.url))
        self.page.on("console", lambda m: "Content Security Policy" in m.text and self.csp.append(m.text))
        self.page.goto(base_url + "/", timeout=30000)
        self.page.locator("#model", has_text="context").wait_for(timeout=30000)

    def render(self, text):
        """Renders text with the page's renderer into a new element in the page; returns a
        description of what was built."""
        return self.page.evaluate(DESCRIBE_RENDER, text)

    def close(self):
        self.page.close()


# Renders into a fresh element under <main> and reports the tree: tags in document order,
# the text, the links and the attributes every element carries.
DESCRIBE_RENDER = """text => {
  const host = document.createElement('div');
  host.className = 'render-test';
  document.querySelector('main').appendChild(host);
  host.appendChild(window.ridgeChat.markdown.render(text));
  const all = [...host.querySelectorAll('*')];
  return {
    tags: all.map(e => e.tagName.toLowerCase()),
    text: host.textContent,
    attributes: all.flatMap(e => [...e.attributes].map(a => e.tagName.toLowerCase() + ' ' + a.name + '=' + a.value)),
    links: [...host.querySelectorAll('a')].map(a => [a.textContent, a.getAttribute('href'), a.protocol]),
    unsafe: [...host.querySelectorAll('.unsafe-link')].map(e => e.textContent),
    code: [...host.querySelectorAll('pre > code')].map(c => [c.className, c.textContent]),
    items: [...host.querySelectorAll('ul > li, ol > li')].map(li => li.parentElement.tagName.toLowerCase() + ':' +
                                                                    li.firstChild.textContent),
  };
}"""


def set_settings(page, max_tokens, temperature=0):
    page.click("#settings summary")
    page.fill("#max-tokens", str(max_tokens))
    page.fill("#temperature", str(temperature))
    page.click("#settings summary")


def send_and_wait(page, text, timeout_ms):
    """Sends a message; returns the contents of the reply bubble seen while it streamed
    (distinct, in order) and the bubble once done."""
    n = page.locator(".message.assistant").count()
    page.fill("#input", text)
    page.press("#input", "Enter")
    page.locator(".message.assistant").nth(n).wait_for(timeout=10000)
    # Records every distinct text of the reply in the page itself, so no poll misses one.
    page.evaluate("""() => {
      const bubble = [...document.querySelectorAll('.message.assistant')].pop();
      window.__seen = [];
      const note = () => { const t = bubble.querySelector('.content').textContent;
                           if (t && window.__seen[window.__seen.length - 1] !== t) window.__seen.push(t); };
      note();
      new MutationObserver(note).observe(bubble, { subtree: true, childList: true, characterData: true });
    }""")
    page.locator(".message.assistant.streaming").wait_for(state="detached", timeout=timeout_ms)
    return page.evaluate("window.__seen"), page.locator(".message.assistant").last


def last_reply(page):
    conversation = page.evaluate("window.ridgeChat.conversation.map(m => [m.role, m.content])")
    assert conversation[-1][0] == "assistant"
    return conversation[-1][1]


# ---- the renderer, with fixed text ----------------------------------------------------

MARKDOWN = """# Sorting

Use `sorted()` for a **new** list and *list.sort()* in place:

```python
def by_length(words):
    return sorted(words, key=len)  # <shortest first>
```

- stable: equal keys keep their order
- `key=` takes a function
  - nested: `reverse=True`

1. first
2. second

| name | kind |
|------|:----:|
| sort | method |

See [the docs](https://docs.python.org/3/howto/sorting.html) or https://example.org/a_(b).
"""


def test_renderer_builds_code_blocks_lists_and_inline_marks(page_server, browser):
    w = Watched(browser, page_server.base_url)
    r = w.render(MARKDOWN)
    assert r["code"] == [["language-python",
                          "def by_length(words):\n    return sorted(words, key=len)  # <shortest first>"]]
    assert r["items"] == ["ul:stable: equal keys keep their order", "ul:key=", "ul:nested: ", "ol:first", "ol:second"]
    tags = r["tags"]
    assert tags[0] == "h1" and tags.count("pre") == 1 and tags.count("table") == 1
    assert tags.count("strong") == 1 and tags.count("em") == 1 and tags.count("code") == 4  # 3 inline + 1 block
    assert ["the docs", "https://docs.python.org/3/howto/sorting.html", "https:"] in r["links"]
    assert ["https://example.org/a_(b)", "https://example.org/a_(b)", "https:"] in r["links"]
    assert "<shortest first>" in r["text"] and "**" not in r["text"]
    assert not w.errors, w.errors
    w.close()


def test_streamed_rendering_equals_whole_rendering_and_keeps_finished_blocks(page_server, browser):
    """The view re-renders as each piece arrives: at every prefix its DOM is what a whole
    render of that prefix gives, and blocks above the one being written keep their nodes."""
    w = Watched(browser, page_server.base_url)
    out = w.page.evaluate("""text => {
      const md = window.ridgeChat.markdown;
      const box = document.createElement('div');
      const view = new md.View(box);
      let mismatches = [];
      let firstNode = null, kept = true;
      for (let i = 1; i <= text.length; i += 3) {
        view.update(text.slice(0, i));
        const whole = document.createElement('div');
        whole.appendChild(md.render(text.slice(0, i)));
        if (whole.innerHTML !== box.innerHTML) mismatches.push(i);
        if (firstNode === null && box.children.length > 1) firstNode = box.firstChild;
        if (firstNode !== null && box.firstChild !== firstNode) kept = false;
      }
      view.update(text);
      const whole = document.createElement('div');
      whole.appendChild(md.render(text));
      return {mismatches, kept, same: whole.innerHTML === box.innerHTML, rebuilt: view.rebuilt,
              updates: Math.ceil(text.length / 3), blocks: box.children.length};
    }""", MARKDOWN)
    assert out["mismatches"] == [] and out["same"]
    assert out["kept"]
    # Mostly the last block is rebuilt per update, not the whole reply.
    assert out["rebuilt"] < out["updates"] * 2 < out["updates"] * out["blocks"], out
    w.close()


HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '<svg onload=alert(3)></svg><iframe src="javascript:alert(4)"></iframe>',
    "[click me](javascript:alert(5))",
    "[also](JaVaScRiPt:alert(6)) [tab](java\tscript:alert(7)) [data](data:text/html,<script>alert(8)</script>)",
    "<javascript:alert(9)> [vb](vbscript:msgbox(10)) ![pic](javascript:alert(11))",
    '```x" onmouseover="alert(12)\ncode\n```',
    "**<b onmouseover=alert(13)>bold</b>** `<script>alert(14)</script>`",
    "- <img src=x onerror=alert(15)>\n- [x](javascript:alert(16))",
]


def test_model_text_never_becomes_html(page_server, browser):
    w = Watched(browser, page_server.base_url)
    for text in HOSTILE:
        r = w.render(text)
        # Only elements Markdown makes; never one the text spells out.
        assert set(r["tags"]) <= {"p", "a", "span", "strong", "code", "pre", "ul", "li", "br"}, (text, r["tags"])
        for attribute in r["attributes"]:
            assert re.fullmatch(r"(span class=unsafe-link|span title=.*|a (href|target|rel)=.*|"
                                r"code class=language-[A-Za-z0-9_+#.-]+)", attribute), (text, attribute)
        for _, href, protocol in r["links"]:
            assert protocol in ("http:", "https:", "mailto:"), (text, href)
    # The hostile HTML shows as the characters it is.
    assert w.render(HOSTILE[0])["text"] == "<script>alert(1)</script>"
    assert w.render(HOSTILE[1])["text"] == "<img src=x onerror=alert(2)>"
    r = w.render(HOSTILE[4])
    assert r["links"] == [] and r["unsafe"] == ["also", "tab", "data"]
    assert w.render(HOSTILE[6])["code"] == [["", "code"]]  # a language that is not a plain token is dropped
    # A javascript: link is not clickable: clicking its text runs nothing and goes nowhere.
    url = w.page.url
    w.render("[click me](javascript:alert(5))")
    w.page.locator(".render-test .unsafe-link", has_text="click me").last.click()
    assert w.page.url == url
    assert w.page.evaluate("document.querySelectorAll('main script, main img, main iframe, main svg').length") == 0
    assert w.dialogs == [] and w.popups == [] and not w.errors, (w.dialogs, w.popups, w.errors)
    w.close()


def test_page_is_served_with_a_strict_content_security_policy(page_server):
    for path in ("/", "/app.js", "/markdown.js"):
        status, headers, body = page_server.request("GET", path)
        assert status == 200
        policy = {k.lower(): v for k, v in headers.items()}["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        if path.endswith(".js"):
            # The page's own scripts never hand text to the HTML parser.
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
                assert sink.encode() not in body, (path, sink)


def sse(chunks):
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def test_hostile_answer_streamed_through_the_page_shows_as_text(page_server, browser):
    """The page's own request, answered with a fixed stream whose pieces split the tags
    (as tokens would): the reply shows the tags as text and its stats line shows the
    `speculative` field of the usage chunk."""
    w = Watched(browser, page_server.base_url, enforce_csp=True)
    answer = ("Try this: <scr", "ipt>alert(1)</script> and <img src=x one", "rror=alert(2)>\n\n",
              "```html\n<script>alert(3)</script>\n```\n", "- [run](javascript:", "alert(4))\n- done")
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": "stories"}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "usage": None}]
    chunks += [{**base, "choices": [{"index": 0, "delta": {"content": p}}], "usage": None} for p in answer]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None})
    chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 30, "total_tokens": 39},
                   "speculative": {"proposer": "ngram", "num_drafts": 5, "num_draft_tokens": 16,
                                   "num_accepted_tokens": 12}})
    requests = []

    def answer_route(route):
        requests.append(json.loads(route.request.post_data))
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=sse(chunks))

    w.page.route("**/v1/chat/completions", answer_route)
    _, bubble = send_and_wait(w.page, "Show me some HTML.", timeout_ms=20000)
    assert requests[0]["max_tokens"] == 4096 and requests[0]["stream"] is True  # the page's default
    content = bubble.locator(".content")
    assert content.locator("pre > code.language-html").text_content() == "<script>alert(3)</script>"
    assert "<script>alert(1)</script> and <img src=x onerror=alert(2)>" in content.locator("p").first.text_content()
    assert content.locator("li").all_text_contents() == ["run", "done"]
    assert content.locator("a").count() == 0 and content.locator(".unsafe-link").count() == 1
    assert content.locator("script, img").count() == 0
    assert w.page.evaluate("document.querySelectorAll('script').length") == 2  # the page's own two
    assert "speculative (ngram): 12 of 16 drafted tokens accepted (75%)" in bubble.locator(".stats").text_content()
    # The page does all this under its own CSP without a violation.
    assert w.dialogs == [] and not w.errors and not w.csp, (w.dialogs, w.errors, w.csp)
    w.close()


# ---- end to end, with the model --------------------------------------------------------

@pytest.fixture(scope="module")
def coder():
    with RidgeServer(model_path(MARKDOWN_MODEL), "--parallel", 1, "-c", 1024, "--alias", MARKDOWN_MODEL) as s:
        yield s


def test_chat_page_streams_and_renders_a_markdown_answer(coder, browser, tmp_path):
    w = Watched(browser, coder.base_url, viewport={"width": 900, "height": 760})
    page = w.page
    set_settings(page, 160)
    prompt = "Write a Python function that reverses a string, in a code block, then list two ways to test it."
    seen, bubble = send_and_wait(page, prompt, timeout_ms=55000)
    assert page.locator(".message.user").inner_text() == prompt
    # Streamed: the reply grew in several steps before it finished.
    assert len(seen) >= 3, seen
    reply = last_reply(page)
    # This model, greedy, answers with a fenced code block and a list: it must render as such.
    fences = re.findall(r"^```(\w*)\n(.*?)\n```", reply, flags=re.S | re.M)
    assert fences, reply
    codes = bubble.locator(".content pre > code")
    assert codes.count() == len(fences)
    assert codes.first.text_content() == fences[0][1]
    if fences[0][0]:
        assert codes.first.get_attribute("class") == f"language-{fences[0][0]}"
    outside_code = re.sub(r"^```.*?^```", "", reply, flags=re.S | re.M)
    bullets = re.findall(r"^\s*(?:[-*+]|\d+\.) ", outside_code, flags=re.M)
    assert bullets, reply
    assert bubble.locator(".content li").count() >= len(bullets) - 1
    assert "```" not in bubble.locator(".content").text_content()
    # What streamed in equals a whole render of the final text.
    assert bubble.locator(".content").evaluate(
        "(e, t) => { const d = document.createElement('div'); d.appendChild(window.ridgeChat.markdown.render(t));"
        " return d.innerHTML === e.innerHTML; }", reply)
    assert "tokens" in bubble.locator(".stats").text_content()
    assert page.locator(".message.error").count() == 0
    assert page.locator("#send").is_enabled() and not page.locator("#stop").is_enabled()
    assert not w.errors and not w.dialogs, (w.errors, w.dialogs)

    shot = Path(os.environ.get("RIDGE_SCREENSHOT", tmp_path / "chat-page.png"))
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 5000
    w.close()


def test_stop_button_cancels_the_request(server, browser):
    w = Watched(browser, server.base_url)
    page = w.page
    set_settings(page, 1500)
    before = server.metrics()["ridge_generation_tokens_total"]
    page.fill("#input", "Tell me a very long story about a lighthouse keeper.")
    page.press("#input", "Enter")
    bubble = page.locator(".message.assistant").last
    page.wait_for_function(
        "() => { const b = [...document.querySelectorAll('.message.assistant')].pop();"
        " return b && b.textContent.length > 10; }", timeout=30000)
    page.click("#stop")
    page.wait_for_function("() => !document.querySelector('.message.assistant.streaming')", timeout=10000)
    assert "stopped" in bubble.inner_text()
    idle = server.wait_idle(timeout=10)  # the server cancelled it: no sequence is left running
    assert idle["ridge_generation_tokens_total"] - before < 1500
    # The conversation continues after a stop.
    page.fill("#input", "Thanks.")
    page.press("#input", "Enter")
    page.wait_for_function("() => document.querySelectorAll('.message.assistant').length == 2", timeout=10000)
    w.close()


def test_max_tokens_over_the_context_asks_for_the_rest_of_it(browser):
    """The default max tokens (4096) is over a 160-token context: the page asks again for
    what room is left, and says so."""
    with RidgeServer(model_path(), "--parallel", 1, "-c", 160, "--alias", MODEL) as small:
        w = Watched(browser, small.base_url)
        page = w.page
        assert page.input_value("#max-tokens") == "4096"
        page.click("#settings summary")
        page.fill("#temperature", "0")
        page.click("#settings summary")
        _, bubble = send_and_wait(page, "Say hello.", timeout_ms=50000)
        assert page.locator(".message.error").count() == 0
        stats = bubble.locator(".stats").text_content()
        assert "max tokens: the rest of the context" in stats and "length" in stats, stats
        assert last_reply(page)
        w.close()


def test_speculative_acceptance_is_shown(browser):
    prompt = ("Repeat this line three times, exactly: the quick brown fox jumps over the lazy dog "
              "while the cat sleeps on the warm red mat")
    with RidgeServer(model_path(), "--parallel", 1, "-c", 1024, "--alias", MODEL, "--spec", "ngram") as spec:
        w = Watched(browser, spec.base_url)
        page = w.page
        assert "speculative decoding (ngram)" in page.locator("#model").text_content()
        set_settings(page, 96)
        before = spec.wait_idle()
        _, bubble = send_and_wait(page, prompt, timeout_ms=50000)
        after = spec.wait_idle()
        stats = bubble.locator(".stats").text_content()
        m = re.search(r"speculative \(ngram\): (\d+) of (\d+) drafted tokens accepted \((\d+)%\)", stats)
        assert m, stats
        accepted, drafted, percent = map(int, m.groups())
        label = '{proposer="ngram"}'
        assert drafted == after[f"ridge_spec_decode_num_draft_tokens_total{label}"] - \
            before[f"ridge_spec_decode_num_draft_tokens_total{label}"]
        assert accepted == after[f"ridge_spec_decode_num_accepted_tokens_total{label}"] - \
            before[f"ridge_spec_decode_num_accepted_tokens_total{label}"]
        assert drafted > 0 and abs(percent - 100 * accepted / drafted) <= 0.5
        assert not w.errors, w.errors
        w.close()
