// The chat page (see chat_page.h). Plain HTML + JS; the conversation lives in the page and is
// resent with every turn, as OpenAI's API is stateless. Text is inserted with textContent only,
// so model output can never inject markup. With --api-key the page asks for the key (a URL
// would leave it in the history, logs and Referer headers), keeps it in sessionStorage for the
// tab, and sends it as "Authorization: Bearer".
#include "server/chat_page.h"

namespace lancet::server {

const char* chat_page_html() {
  return R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lancet chat</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d1f23; }
  header { background: #1d1f23; color: #fff; padding: 10px 16px; display: flex; gap: 12px; align-items: center; }
  header h1 { font-size: 18px; margin: 0; }
  header span { opacity: 0.7; font-size: 13px; }
  #log { max-width: 820px; margin: 0 auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { padding: 10px 14px; border-radius: 10px; white-space: pre-wrap; line-height: 1.4; max-width: 85%; }
  .user { background: #2f6fed; color: #fff; align-self: flex-end; }
  .assistant { background: #fff; border: 1px solid #d8dbe0; align-self: flex-start; }
  .error { background: #fde8e8; border: 1px solid #f5b5b5; color: #8a1c1c; align-self: stretch; }
  form { max-width: 820px; margin: 0 auto; padding: 0 16px 16px; display: flex; gap: 8px; }
  textarea { flex: 1; font: inherit; padding: 8px; border-radius: 8px; border: 1px solid #c4c8cf; min-height: 44px; }
  button { font: inherit; padding: 8px 16px; border-radius: 8px; border: 0; background: #2f6fed; color: #fff; }
  button:disabled { background: #9bb5ee; }
  #settings { max-width: 820px; margin: 0 auto; padding: 0 16px 12px; font-size: 13px; display: flex; gap: 12px; }
  #settings input { width: 70px; }
</style>
</head>
<body data-state="idle">
<header><h1>lancet</h1><span id="model">connecting...</span></header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Send a message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<div id="settings">
  <label>temperature <input id="temperature" type="number" step="0.1" min="0" max="2" value="0.7"></label>
  <label>max tokens <input id="max_tokens" type="number" min="1" value="256"></label>
  <label>API key <input id="api_key" type="password" autocomplete="off" style="width:160px"
         placeholder="if the server has one"></label>
  <button id="clear" type="button">Clear</button>
</div>
<script>
"use strict";
const log = document.getElementById("log");
const input = document.getElementById("input");
const sendButton = document.getElementById("send");
const keyInput = document.getElementById("api_key");
let history = [];
let modelName = null;
let pendingQuestion = null;  // ?q=..., sent once the model is known

function headers() {
  const h = {"Content-Type": "application/json"};
  const key = keyInput.value;
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  window.scrollTo(0, document.body.scrollHeight);
  return div;
}

async function loadModel() {
  const label = document.getElementById("model");
  try {
    const r = await fetch("/v1/models", {headers: headers()});
    if (r.status === 401) {
      modelName = null;
      label.textContent = keyInput.value ? "wrong API key" : "enter the API key below";
      document.body.dataset.state = "need-key";
      keyInput.focus();
      return;
    }
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : ("HTTP " + r.status));
    modelName = j.data[0].id;
    label.textContent = modelName;
    if (document.body.dataset.state === "need-key") document.body.dataset.state = "idle";
    if (pendingQuestion) {
      const q = pendingQuestion;
      pendingQuestion = null;
      send(q);
    }
  } catch (e) {
    label.textContent = "model unavailable: " + e.message;
  }
}

async function send(text) {
  if (!text.trim()) return;
  history.push({role: "user", content: text});
  addMessage("user", text);
  const out = addMessage("assistant", "");
  out.id = "answer-" + history.length;
  sendButton.disabled = true;
  document.body.dataset.state = "streaming";
  let answer = "";
  try {
    const body = {messages: history, stream: true,
                  temperature: parseFloat(document.getElementById("temperature").value),
                  max_tokens: parseInt(document.getElementById("max_tokens").value, 10)};
    if (modelName) body.model = modelName;
    const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), body: JSON.stringify(body)});
    if (!r.ok) {
      const j = await r.json().catch(() => ({error: {message: r.statusText}}));
      throw new Error(j.error ? j.error.message : ("HTTP " + r.status));
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;  // comments (keep-alives) and blank lines
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message);
          for (const c of chunk.choices || []) {
            if (c.delta && c.delta.content) {
              answer += c.delta.content;
              out.textContent = answer;
            }
          }
        }
      }
    }
    history.push({role: "assistant", content: answer});
    document.body.dataset.state = "done";
  } catch (e) {
    addMessage("error", "Error: " + e.message);
    history.pop();
    document.body.dataset.state = "error";
  } finally {
    sendButton.disabled = false;
  }
}

document.getElementById("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = input.value;
  input.value = "";
  send(text);
});
input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    document.getElementById("form").requestSubmit();
  }
});
document.getElementById("clear").addEventListener("click", () => { history = []; log.textContent = ""; });

keyInput.addEventListener("change", () => {
  sessionStorage.setItem("lancet_api_key", keyInput.value);
  loadModel();
});
keyInput.value = sessionStorage.getItem("lancet_api_key") || "";
const params = new URLSearchParams(window.location.search);
if (params.get("temperature")) document.getElementById("temperature").value = params.get("temperature");
if (params.get("max_tokens")) document.getElementById("max_tokens").value = params.get("max_tokens");
pendingQuestion = params.get("q");
loadModel();
</script>
</body>
</html>
)HTML";
}

}  // namespace lancet::server
