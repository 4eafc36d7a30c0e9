// A completed run in the Runs tab: its model card (README.md, rendered to safe HTML by the app) and,
// for an LLM run, a chat with it (the reply streamed in as the model writes it).

import { api, notice } from "./api.js";

const $ = (id) => document.getElementById(id);
let shown = null; // the run the card and chat are for
let messages = []; // this chat's turns, sent whole each time (the app keeps no conversation)
let busy = false;

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("chat-log").append(div);
  return div;
}

function reset() {
  messages = [];
  $("chat-log").replaceChildren();
}

async function send() {
  const text = $("chat-input").value;
  if (busy || !text.trim() || !shown) return;
  busy = true;
  $("chat-send").disabled = true;
  $("chat-input").value = "";
  messages.push({ role: "user", content: text });
  bubble("user", text);
  const reply = bubble("assistant", "");
  reply.setAttribute("aria-busy", "true");
  try {
    await api.stream(`/api/runs/${encodeURIComponent(shown)}/chat`, { messages }, (piece) => { reply.textContent += piece; });
    messages.push({ role: "assistant", content: reply.textContent });
  } catch (e) {
    messages.pop();
    reply.remove();
    notice(e.message, true);
  } finally {
    reply.removeAttribute("aria-busy");
    busy = false;
    $("chat-send").disabled = false;
    $("chat-input").focus();
  }
}

async function showCard(name) {
  try {
    const { html } = await api.get(`/api/runs/${encodeURIComponent(name)}/card`);
    if (name !== shown) return;
    $("card").innerHTML = html; // rendered by the app: raw HTML escaped, unsafe links dropped
    $("run-card").hidden = false;
  } catch {
    $("run-card").hidden = true;
  }
}

function follow(run) {
  const completed = run.status === "completed";
  if (run.name !== shown) {
    shown = run.name;
    reset();
    $("run-card").hidden = true;
    $("card").replaceChildren();
    $("card").dataset.run = "";
  }
  $("run-chat").hidden = !(completed && run.task === "llm");
  if (completed && $("card").dataset.run !== run.name && run.files.some((f) => f.path === "README.md")) {
    $("card").dataset.run = run.name;
    showCard(run.name);
  }
}

export function initFinished() {
  document.addEventListener("run-shown", (e) => follow(e.detail));
  $("chat-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
  });
  $("chat-reset").addEventListener("click", reset);
}
