// A small Markdown renderer for the chat page: model text in, DOM nodes out.
//
// Safety: the model's text never becomes HTML. Every piece of it reaches the page as a
// Text node or a textContent; elements are made with createElement from a fixed list of
// tag names; the only attributes set are a link's href (http:, https: or mailto: only,
// checked after the browser's own URL parsing), a code block's language class (letters,
// digits and "+#._-" only), an ordered list's start number and a table cell's alignment.
// Raw HTML in the text (<script>, <img onerror>) shows as the characters it is.
//
// What it renders: fenced code blocks (``` or ~~~, with a language), ATX headings,
// paragraphs (a single newline is a line break, as chat answers mean it), bullet and
// numbered lists (nested by indentation), block quotes, rules, pipe tables; inline code,
// **strong**, *emphasis*, ~~strike~~, [links](url), <autolinks> and bare web addresses.
//
//   RidgeMarkdown.render("# Hi\n- a\n- b")          // a DocumentFragment
//   const view = new RidgeMarkdown.View(element);   // while a reply streams:
//   view.update(textSoFar);                         // re-renders only the blocks that changed
"use strict";

const RidgeMarkdown = (() => {
  // ---- blocks ------------------------------------------------------------------------

  const kFence = /^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$/;
  const kHeading = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
  const kRule = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
  const kQuote = /^ {0,3}> ?/;
  const kListItem = /^( {0,3})([-*+]|\d{1,9}[.)])(?:([ \t]+)(.*))?$/;
  const kTableDelimiter = /^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

  const isBlank = (line) => /^[ \t]*$/.test(line);
  const indentOf = (line) => line.match(/^ */)[0].length;

  function listMarker(line) {
    const m = kListItem.exec(line.replace(/\t/g, "    "));
    if (!m) return null;
    const marker = m[2];
    const ordered = /\d/.test(marker[0]);
    const spaces = m[3] ? m[3].length : 0;
    const rest = m[4] || "";
    // Content starts after the marker and its spaces; 5+ spaces or nothing: one space.
    const contentIndent = m[1].length + marker.length + (spaces >= 1 && spaces <= 4 && rest ? spaces : 1);
    return {
      indent: m[1].length,
      ordered,
      kind: ordered ? marker.slice(-1) : marker,  // "." or ")" / "-", "*", "+"
      start: ordered ? parseInt(marker, 10) : 1,
      contentIndent,
      first: rest,
    };
  }

  // A line that ends a paragraph because it begins another block.
  function startsBlock(line) {
    return kFence.test(line) || kHeading.test(line) || kRule.test(line) || kQuote.test(line) ||
      listMarker(line) !== null;
  }

  // Lines → blocks: {type, src, ...}. `src` is the block's own text: a block whose src did
  // not change renders the same, which is what lets View keep its nodes.
  function parseBlocks(lines) {
    const blocks = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (isBlank(line)) { i++; continue; }
      const begin = i;
      let m;
      if ((m = kFence.exec(line))) {
        const indent = m[1].length, fence = m[2];
        const body = [];
        let closed = false;
        for (i++; i < lines.length; i++) {
          const close = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(lines[i]);
          if (close && close[1][0] === fence[0] && close[1].length >= fence.length) { closed = true; i++; break; }
          body.push(lines[i].replace(new RegExp("^ {0," + indent + "}"), ""));
        }
        blocks.push({ type: "code", lang: m[3], text: body.join("\n"), closed, src: lines.slice(begin, i).join("\n") });
      } else if ((m = kHeading.exec(line))) {
        blocks.push({ type: "heading", level: m[1].length, text: m[2] || "", src: line });
        i++;
      } else if (kRule.test(line)) {
        blocks.push({ type: "rule", src: line });
        i++;
      } else if (kQuote.test(line)) {
        const inner = [];
        while (i < lines.length && kQuote.test(lines[i])) inner.push(lines[i++].replace(kQuote, ""));
        blocks.push({ type: "quote", blocks: parseBlocks(inner), src: lines.slice(begin, i).join("\n") });
      } else if (listMarker(line)) {
        i = parseList(lines, i, blocks);
      } else if (line.includes("|") && i + 1 < lines.length && kTableDelimiter.test(lines[i + 1]) &&
                 lines[i + 1].includes("-")) {
        const header = splitRow(line);
        const align = splitRow(lines[i + 1]).map((c) =>
          c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : "");
        const rows = [];
        for (i += 2; i < lines.length && !isBlank(lines[i]) && lines[i].includes("|"); i++) rows.push(splitRow(lines[i]));
        blocks.push({ type: "table", header, align, rows, src: lines.slice(begin, i).join("\n") });
      } else {
        const text = [line.trim()];
        for (i++; i < lines.length && !isBlank(lines[i]) && !startsBlock(lines[i]); i++) text.push(lines[i].trim());
        blocks.push({ type: "paragraph", text: text.join("\n"), src: lines.slice(begin, i).join("\n") });
      }
    }
    return blocks;
  }

  // One list from lines[i] on, pushed onto blocks; returns the index after it.
  function parseList(lines, i, blocks) {
    const begin = i;
    const first = listMarker(lines[i]);
    const items = [];
    let loose = false;
    for (;;) {
      const m = listMarker(lines[i]);
      const body = [m.first];
      let blankBefore = false;
      for (i++; i < lines.length; i++) {
        const line = lines[i].replace(/\t/g, "    ");
        if (isBlank(line)) {
          let j = i + 1;
          while (j < lines.length && isBlank(lines[j])) j++;
          if (j === lines.length) break;
          const next = lines[j].replace(/\t/g, "    ");
          const nested = indentOf(next) > m.indent && listMarker(next) !== null;
          if (indentOf(next) < m.contentIndent && !nested) break;
          blankBefore = true;
          body.push("");
          continue;
        }
        if (indentOf(line) > m.indent) {  // the item's own (more indented) content
          if (blankBefore) loose = loose || !listMarker(line);
          blankBefore = false;
          body.push(line.slice(Math.min(indentOf(line), m.contentIndent)));
          continue;
        }
        break;
      }
      items.push(parseBlocks(body));
      // The next item of the same list, maybe after blank lines (which make it loose).
      let j = i;
      while (j < lines.length && isBlank(lines[j])) j++;
      const next = j < lines.length ? listMarker(lines[j]) : null;
      if (!next || next.ordered !== first.ordered || next.kind !== first.kind) break;
      if (j > i) loose = true;
      i = j;
    }
    blocks.push({ type: "list", ordered: first.ordered, start: first.start, loose, items,
                  src: lines.slice(begin, i).join("\n") });
    return i;
  }

  // "| a | b \| c |" → ["a", "b | c"]
  function splitRow(line) {
    let s = line.trim();
    if (s.startsWith("|")) s = s.slice(1);
    if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
    const cells = [];
    let cell = "";
    for (let k = 0; k < s.length; k++) {
      if (s[k] === "\\" && s[k + 1] === "|") { cell += "|"; k++; }
      else if (s[k] === "|") { cells.push(cell.trim()); cell = ""; }
      else cell += s[k];
    }
    cells.push(cell.trim());
    return cells;
  }

  // ---- rendering ---------------------------------------------------------------------

  function el(tag, className) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    return e;
  }

  function renderBlock(block) {
    switch (block.type) {
      case "code": {
        const pre = el("pre");
        const code = el("code");
        // Only a plain token may become a class name; anything else is dropped.
        if (/^[A-Za-z0-9_+#.-]{1,32}$/.test(block.lang)) code.className = "language-" + block.lang;
        code.textContent = block.text;
        pre.appendChild(code);
        return pre;
      }
      case "heading": {
        const h = el("h" + block.level);
        renderInline(block.text, h);
        return h;
      }
      case "rule": return el("hr");
      case "quote": {
        const q = el("blockquote");
        for (const b of block.blocks) q.appendChild(renderBlock(b));
        return q;
      }
      case "list": {
        const list = el(block.ordered ? "ol" : "ul");
        if (block.ordered && block.start !== 1) list.start = block.start;
        for (const item of block.items) {
          const li = el("li");
          for (const b of item) {
            // A tight list's paragraphs are the item's text itself, not <p>s.
            if (b.type === "paragraph" && !block.loose) renderInline(b.text, li);
            else li.appendChild(renderBlock(b));
          }
          list.appendChild(li);
        }
        return list;
      }
      case "table": {
        const wrap = el("div", "table-wrap");
        const table = el("table");
        const row = (cells, tag) => {
          const tr = el("tr");
          block.header.forEach((_, k) => {
            const cell = el(tag);
            if (block.align[k]) cell.style.textAlign = block.align[k];
            renderInline(cells[k] || "", cell);
            tr.appendChild(cell);
          });
          return tr;
        };
        const thead = el("thead");
        thead.appendChild(row(block.header, "th"));
        table.appendChild(thead);
        const tbody = el("tbody");
        for (const r of block.rows) tbody.appendChild(row(r, "td"));
        table.appendChild(tbody);
        wrap.appendChild(table);
        return wrap;
      }
      default: {
        const p = el("p");
        renderInline(block.text, p);
        return p;
      }
    }
  }

  // ---- inline ------------------------------------------------------------------------

  const kPunctuation = /[!-\/:-@\[-`{-~]/;
  const isSpace = (c) => c === undefined || /\s/.test(c);
  const isWordChar = (c) => c !== undefined && /[\p{L}\p{N}]/u.test(c);

  // The href a link may carry, or null: an absolute http(s) or mailto URL as the browser
  // itself parses it (so "JaVaScRiPt:", "java\tscript:" and " javascript:" are all caught).
  function safeHref(url) {
    if (typeof url !== "string" || /[\u0000-\u0020\u007f]/.test(url)) return null;
    let parsed;
    try { parsed = new URL(url); } catch (_) { return null; }
    return ["http:", "https:", "mailto:"].includes(parsed.protocol) ? parsed.href : null;
  }

  function link(href, labelText, parent, renderLabel) {
    const safe = safeHref(href);
    const node = el(safe ? "a" : "span", safe ? "" : "unsafe-link");
    if (safe) {
      node.href = safe;
      node.target = "_blank";
      node.rel = "noopener noreferrer nofollow";
    } else {
      node.title = "link not followed (only http, https and mailto links are)";
    }
    if (renderLabel) renderInline(labelText, node, true);
    else node.textContent = labelText;
    parent.appendChild(node);
  }

  // Index just past the ")" that closes a "(" at `open`, or -1.
  function closingParen(text, open) {
    let depth = 0;
    for (let k = open; k < text.length; k++) {
      if (text[k] === "\\") { k++; continue; }
      if (text[k] === "(") depth++;
      else if (text[k] === ")" && --depth === 0) return k + 1;
      else if (text[k] === "\n" && text[k + 1] === "\n") return -1;
    }
    return -1;
  }

  // Index of the "]" matching a "[" at `open` (code spans skipped), or -1.
  function closingBracket(text, open) {
    let depth = 0;
    for (let k = open; k < text.length; k++) {
      const c = text[k];
      if (c === "\\") { k++; continue; }
      if (c === "`") { const end = codeSpanEnd(text, k); if (end > 0) { k = end - 1; continue; } }
      if (c === "[") depth++;
      else if (c === "]" && --depth === 0) return k;
    }
    return -1;
  }

  // For a backtick run at k: the index after its closing run of the same length, or -1.
  function codeSpanEnd(text, k) {
    let n = 0;
    while (text[k + n] === "`") n++;
    const run = "`".repeat(n);
    for (let j = text.indexOf(run, k + n); j >= 0; j = text.indexOf(run, j + 1)) {
      let m = 0;
      while (text[j + m] === "`") m++;
      if (m === n) return j + n;
      j += m - 1;
    }
    return -1;
  }

  // Where a delimiter run of `n` × `ch` opened at `from` closes: a run of exactly n that
  // follows a non-space (and, for "_", is not inside a word); -1 when none.
  function closingDelimiter(text, from, ch, n) {
    for (let k = from; k < text.length; k++) {
      const c = text[k];
      if (c === "\\") { k++; continue; }
      if (c === "`") { const end = codeSpanEnd(text, k); if (end > 0) { k = end - 1; continue; } }
      if (c !== ch) continue;
      let m = 0;
      while (text[k + m] === ch) m++;
      if (m === n && !isSpace(text[k - 1]) && k > from && !(ch === "_" && isWordChar(text[k + m]))) return k;
      k += m - 1;
    }
    return -1;
  }

  const kEmphasisTags = { 1: ["em"], 2: ["strong"], 3: ["strong", "em"] };

  // Appends text's inline Markdown to parent as nodes. inLink: no nested links.
  function renderInline(text, parent, inLink = false) {
    let buffer = "";
    const flush = () => { if (buffer) { parent.appendChild(document.createTextNode(buffer)); buffer = ""; } };
    let i = 0;
    while (i < text.length) {
      const c = text[i];
      if (c === "\\" && kPunctuation.test(text[i + 1] || "")) { buffer += text[i + 1]; i += 2; continue; }
      if (c === "\n") { flush(); parent.appendChild(el("br")); i++; continue; }
      if (c === "`") {
        let n = 0;
        while (text[i + n] === "`") n++;
        const end = codeSpanEnd(text, i);
        if (end < 0) { buffer += text.slice(i, i + n); i += n; continue; }
        flush();
        const code = el("code");
        let inner = text.slice(i + n, end - n).replace(/\n/g, " ");
        if (/^ .*[^ ].* $/.test(inner)) inner = inner.slice(1, -1);
        code.textContent = inner;
        parent.appendChild(code);
        i = end;
        continue;
      }
      if (c === "*" || c === "_" || c === "~") {
        let n = 0;
        while (text[i + n] === c) n++;
        const opens = !isSpace(text[i + n]) && !(c === "_" && isWordChar(text[i - 1])) &&
          (c === "~" ? n === 2 : n <= 3);
        const close = opens ? closingDelimiter(text, i + n, c, n) : -1;
        if (close < 0) { buffer += text.slice(i, i + n); i += n; continue; }
        flush();
        const tags = c === "~" ? ["del"] : kEmphasisTags[n];
        const outer = el(tags[0]);
        let inner = outer;
        for (const t of tags.slice(1)) inner = inner.appendChild(el(t));
        renderInline(text.slice(i + n, close), inner, inLink);
        parent.appendChild(outer);
        i = close + n;
        continue;
      }
      if (!inLink && (c === "[" || (c === "!" && text[i + 1] === "["))) {
        const open = c === "!" ? i + 1 : i;
        const close = closingBracket(text, open);
        if (close > 0 && text[close + 1] === "(") {
          const end = closingParen(text, close + 1);
          if (end > 0) {
            // (url "title"): the title is dropped; <url> may hold spaces.
            let target = text.slice(close + 2, end - 1).trim().replace(/\s+("[^"]*"|'[^']*')$/, "");
            if (target.startsWith("<") && target.endsWith(">")) target = target.slice(1, -1);
            const label = text.slice(open + 1, close);
            flush();
            // An image is never loaded: the page fetches nothing a model names.
            if (c === "!") link(target, label || target, parent, false);
            else link(target, label, parent, true);
            i = end;
            continue;
          }
        }
      }
      if (!inLink && c === "<") {
        const m = /^<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>/.exec(text.slice(i));
        if (m) { flush(); link(m[1], m[1], parent, false); i += m[0].length; continue; }
      }
      if (!inLink && (c === "h" || c === "H") && !isWordChar(text[i - 1]) && /^https?:\/\//i.test(text.substr(i, 8))) {
        const m = /^https?:\/\/[^\s<>]+/i.exec(text.slice(i, i + 2048));
        if (m) {
          let url = m[0];
          // Trailing punctuation ends the sentence, not the address; a ")" only when unbalanced.
          for (;;) {
            const last = url[url.length - 1];
            if (/[.,;:!?'"*_~]/.test(last)) url = url.slice(0, -1);
            else if (last === ")" && (url.match(/\(/g) || []).length < (url.match(/\)/g) || []).length) url = url.slice(0, -1);
            else break;
          }
          flush();
          link(url, url, parent, false);
          i += url.length;
          continue;
        }
      }
      buffer += c;
      i++;
    }
    flush();
  }

  // ---- public ------------------------------------------------------------------------

  function render(text) {
    const fragment = document.createDocumentFragment();
    for (const block of parseBlocks(String(text).replace(/\r\n?/g, "\n").split("\n"))) {
      fragment.appendChild(renderBlock(block));
    }
    return fragment;
  }

  // Renders a growing text into `element`: each update re-parses the text (cheap) but
  // rebuilds only the blocks from the first one whose source changed, so the finished
  // paragraphs and code blocks above the one being written keep their nodes (and a
  // reader's text selection in them).
  class View {
    constructor(element) {
      this.element = element;
      this.keys = [];  // type + src of each rendered block, in order
      this.rebuilt = 0;  // blocks rendered so far (tests read it)
    }

    update(text) {
      const blocks = parseBlocks(String(text).replace(/\r\n?/g, "\n").split("\n"));
      const keys = blocks.map((b) => b.type + "\u0000" + b.src);
      let same = 0;
      while (same < keys.length && same < this.keys.length && keys[same] === this.keys[same]) same++;
      while (this.element.childNodes.length > same) this.element.lastChild.remove();
      for (let k = same; k < blocks.length; k++) this.element.appendChild(renderBlock(blocks[k]));
      this.rebuilt += blocks.length - same;
      this.keys = keys;
    }
  }

  return Object.freeze({ render, View, safeHref, parseBlocks });
})();

window.RidgeMarkdown = RidgeMarkdown;
