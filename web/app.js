// The ridge chat page: keeps the conversation in memory, sends it to
// /v1/chat/completions with stream: true, and parses the server-sent events as they
// arrive (fetch + a stream reader, no libraries). Replies are Markdown, rendered by
// markdown.js into DOM nodes as they stream (model text never becomes HTML). Stop aborts
// the fetch, which closes the connection; the server notices and cancels the request.
"use strict";

const $ = (id) => document.getElementById(id);
const conversation = [];  // {role, content} as the API wants them
let modelId = null;
let controller = null;     // AbortController of the reply being streamed
let speculative = null;    // the server's draft proposer ("ngram", "draft"), or null

// For tests and the curious: the conversation as sent, and the renderer.
window.ridgeChat = Object.freeze({ conversation, markdown: RidgeMarkdown });

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function setStatus(text) { $("status").textContent = text; }

function addMessage(role, text) {
  $("empty")?.remove();
  const div = document.createElement("div");
  div.className = "message " + role;
  div.textContent = text;
  $("messages").appendChild(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

// An error response as an Error whose message has the status and the server's words,
// and whose `code` is the OpenAI error code when there is one.
async function responseError(response) {
  const error = new Error(`${response.status} ${response.statusText}`);
  try {
    const body = await response.json();
    if (body.error && body.error.message) {
      error.message = `${response.status}: ${body.error.message}`;
      error.code = body.error.code;
    }
  } catch (_) { /* not JSON */ }
  return error;
}

// The stats line's words for a response's "speculative" field (the server's extension).
function speculativeText(spec) {
  if (!spec) return null;
  const drafted = spec.num_draft_tokens, accepted = spec.num_accepted_tokens;
  if (!drafted) return `speculative (${spec.proposer}): nothing drafted`;
  const rate = Math.round((100 * accepted) / drafted);
  return `speculative (${spec.proposer}): ${accepted} of ${drafted} drafted tokens accepted (${rate}%)`;
}

async function loadModel() {
  try {
    const response = await fetch("/v1/models", { headers: headers() });
    if (!response.ok) throw await responseError(response);
    const model = (await response.json()).data[0];
    modelId = model.id;
    const meta = model.meta || {};
    speculative = meta.speculative || null;
    $("model").textContent = `${model.id}` + (meta.n_ctx ? ` · context ${meta.n_ctx}` : "") +
      (meta.chat_template ? ` · ${meta.chat_template} template` : " · no chat template") +
      (speculative ? ` · speculative decoding (${speculative})` : "");
  } catch (e) {
    $("model").textContent = "model unknown (" + e.message + ")";
  }
}

// Splits the SSE byte stream into events; calls onData with each "data:" payload.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (data && onData(data) === false) return;
    }
  }
}

async function send(text) {
  conversation.push({ role: "user", content: text });
  addMessage("user", text);
  const bubble = addMessage("assistant streaming", "");
  const content = document.createElement("div");
  content.className = "content";
  bubble.appendChild(content);
  const view = new RidgeMarkdown.View(content);

  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...conversation);
  const body = {
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($("temperature").value),
  };
  // Empty means the rest of the context (the server's default for chat).
  const maxTokens = $("max-tokens").value.trim();
  if (maxTokens) body.max_tokens = Number(maxTokens);
  if (modelId) body.model = modelId;

  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  setStatus("waiting for the first token…");
  const started = performance.now();
  let firstToken = null;
  let reply = "";
  let usage = null;
  let spec = null;
  let finish = null;
  let cappedByContext = false;
  try {
    const post = () => fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    let response = await post();
    if (!response.ok) {
      const error = await responseError(response);
      // The conversation plus max tokens is over the context: ask again for whatever room
      // is left (the stats line says so). A prompt over the context fails again, and shows.
      if (error.code !== "context_length_exceeded" || body.max_tokens === undefined) throw error;
      delete body.max_tokens;
      cappedByContext = true;
      response = await post();
      if (!response.ok) throw await responseError(response);
    }
    await readEvents(response, (data) => {
      if (data === "[DONE]") return false;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      if (chunk.speculative) spec = chunk.speculative;
      for (const choice of chunk.choices || []) {
        const piece = choice.delta && choice.delta.content;
        if (piece) {
          if (firstToken === null) firstToken = performance.now();
          reply += piece;
          view.update(reply);
          bubble.scrollIntoView({ block: "end" });
          setStatus("streaming…");
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    });
    conversation.push({ role: "assistant", content: reply });
  } catch (e) {
    if (e.name === "AbortError") {
      finish = "stopped";
      conversation.push({ role: "assistant", content: reply });
    } else {
      conversation.pop();  // the user's turn got no reply; let it be sent again
      addMessage("error", "Error: " + e.message);
    }
  } finally {
    bubble.classList.remove("streaming");
    const seconds = (performance.now() - started) / 1000;
    const stats = document.createElement("span");
    stats.className = "stats";
    const parts = [];
    if (finish) parts.push(finish);
    if (usage) parts.push(`${usage.completion_tokens} tokens`);
    if (cappedByContext) parts.push("max tokens: the rest of the context");
    if (firstToken !== null) parts.push(`first token ${((firstToken - started) / 1000).toFixed(2)} s`);
    if (usage && firstToken !== null && usage.completion_tokens > 1) {
      const genSeconds = (performance.now() - firstToken) / 1000;
      if (genSeconds > 0) parts.push(`${((usage.completion_tokens - 1) / genSeconds).toFixed(1)} tokens/s`);
    }
    parts.push(`${seconds.toFixed(2)} s`);
    const specText = speculativeText(spec);
    if (specText) parts.push(specText);
    stats.textContent = parts.join(" · ");
    bubble.appendChild(stats);
    controller = null;
    $("send").disabled = false;
    $("stop").disabled = true;
    setStatus("");
    $("input").focus();
  }
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});

$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});

$("stop").addEventListener("click", () => { if (controller) controller.abort(); });

$("clear").addEventListener("click", () => {
  if (controller) controller.abort();
  conversation.length = 0;
  $("messages").replaceChildren();
});

$("api-key").addEventListener("change", loadModel);

loadModel();
$("input").focus();
