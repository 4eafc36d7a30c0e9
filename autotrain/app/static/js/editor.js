// The Config tab: a template or file into the YAML view, the form beside it, live validation with the
// CLI's own checks, save, and start. Tasks and trainers come from the server's schemas; the draft (the
// YAML, the save-as name) is kept in local storage, so a reload keeps it.

import { api, clearNotice, notice } from "./api.js";
import { SchemaForm } from "./form.js";

const $ = (id) => document.getElementById(id);
const DRAFT = "autotrain.draft";

let templates = [];
let tasks = [];
const schemas = {}; // task -> {schema, optimizers}, fetched once
let schemaTask = null;
let form;
// Requests run one after another, so each form edit applies to the text the previous one produced.
let queue = Promise.resolve();
let generation = 0;
let clean = ""; // the YAML as last loaded, saved or started: anything else is an unsaved edit
let nameTyped = false; // the save-as name was typed by the user: it no longer follows project_name

export const timing = { lastShown: 0 }; // when validation results were last drawn (ms)

function options(select, values, label = (v) => v) {
  select.replaceChildren(...values.map((v) => new Option(label(v), v)));
}

async function schemaOf(task) {
  if (!schemas[task]) schemas[task] = await api.get(`/api/schema/${encodeURIComponent(task)}`);
  return schemas[task];
}

// The `trainer` choices a task's JSON Schema declares ([] for a task without trainers).
function trainersOf(schema) {
  let node = (schema.properties || {}).trainer;
  if (!node) return [];
  if (node.$ref) node = schema.$defs[node.$ref.split("/").pop()];
  const branch = (node.anyOf || []).find((o) => o.enum || o.$ref);
  if (!node.enum && branch) node = branch.$ref ? schema.$defs[branch.$ref.split("/").pop()] : branch;
  return node.enum || [];
}

// The toolbar's trainer list for `task`: filled from its schema, disabled when it has none.
async function fillTrainers(task) {
  const { schema } = await schemaOf(task);
  const trainers = trainersOf(schema), select = $("trainer"), kept = select.value;
  options(select, trainers);
  if (trainers.includes(kept)) select.value = kept;
  select.disabled = !trainers.length;
}

async function useSchema(task) {
  if (!tasks.includes(task) || task === schemaTask) return;
  const { schema, optimizers } = await schemaOf(task);
  schemaTask = task;
  form.build(schema, optimizers);
  $("task").value = task;
  await fillTrainers(task);
}

function base(path) {
  return String(path).replace(/[\\/]+$/, "").split(/[\\/]/).pop();
}

async function show(result) {
  const data = result.data && typeof result.data === "object" ? result.data : {};
  if (data.task) await useSchema(data.task);
  if (data.trainer) $("trainer").value = data.trainer;
  if (typeof data.project_name === "string" && base(data.project_name) && !nameTyped) {
    $("save-as").value = base(data.project_name) + ".yml";
  }
  form.setData(data);
  const rest = form.showProblems(result.problems);
  const status = $("status");
  status.className = "status " + (result.ok ? "ok" : "bad");
  const n = result.problems.length;
  status.textContent = result.ok ? "✓ valid config" : `${n} problem${n === 1 ? "" : "s"}`;
  if (result.ok) clearNotice("config");
  $("problems").replaceChildren(...result.problems.map((p) => problemItem(p, rest.includes(p))));
  keepDraft();
  timing.lastShown = Date.now();
}

// One problem: a button that moves the focus to its field (or to its line in the YAML).
function problemItem(p, elsewhere) {
  const li = document.createElement("li");
  const jump = document.createElement("button");
  jump.type = "button";
  jump.className = "jump";
  const where = p.line ? `line ${p.line}:${p.column} ` : "";
  jump.innerHTML = `${where}<code></code>: <span></span>`;
  jump.querySelector("code").textContent = p.path;
  jump.querySelector("span").textContent = p.message;
  jump.addEventListener("click", () => {
    if (!elsewhere && form.focusField(p.path)) return;
    jumpToLine(p.line || 1);
  });
  li.classList.toggle("elsewhere", elsewhere);
  li.append(jump);
  return li;
}

function jumpToLine(line) {
  const box = $("yaml"), lines = box.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  box.focus();
  box.setSelectionRange(start, start + (lines[line - 1] || "").length);
}

function keepDraft() {
  try {
    localStorage.setItem(DRAFT, JSON.stringify({ text: $("yaml").value, name: $("save-as").value, clean, nameTyped }));
  } catch { /* storage full or disabled: the draft is not kept */ }
}

export function dirty() {
  return $("yaml").value !== clean;
}

function enqueue(work) {
  const mine = ++generation;
  queue = queue.then(() => work(mine)).catch((e) => notice(e.message, true));
  return queue;
}

export function validateNow() {
  return enqueue(async (mine) => {
    const result = await api.postText("/api/validate", $("yaml").value);
    if (mine === generation) await show(result);
  });
}

function edited(path, { value, unset }) {
  enqueue(async (mine) => {
    const result = await api.post("/api/yaml/set", { text: $("yaml").value, path, value, unset: !!unset });
    $("yaml").value = result.text;
    if (mine === generation) await show(result);
  });
}

export function loadText(text, name = "") {
  $("yaml").value = text;
  clean = text;
  nameTyped = false;
  if (name) $("save-as").value = base(name);
  return validateNow();
}

function fillTemplates() {
  const task = $("task").value, trainer = $("trainer").value;
  const mine = templates.filter((t) => t.task === task);
  options($("template"), mine.map((t) => t.name));
  const best = mine.find((t) => t.default && ($("trainer").disabled || t.trainer === trainer));
  if (best) $("template").value = best.name;
}

async function refreshSaved() {
  const names = await api.get("/api/configs");
  const select = $("saved");
  select.replaceChildren(new Option("(configs in the runs dir)", ""), ...names.map((n) => new Option(n, n)));
}

async function start() {
  // Saved as RUNS/<run name>.yml: one config per run, so Resume always finds the one the run started from.
  const text = $("yaml").value;
  try {
    const run = await api.post("/api/runs", { yaml: text });
    clean = text;
    keepDraft();
    notice(`started ${run.name} (config saved as ${run.config})`);
    document.dispatchEvent(new CustomEvent("run-started", { detail: run.name }));
    refreshSaved();
  } catch (e) {
    notice(e.message, true, "config");
    if (e.data && e.data.problems) show(e.data);
  }
}

async function save() {
  const name = $("save-as").value.trim();
  if (!name) return notice("give a file name (NAME.yml) to save into the runs dir", true);
  const text = $("yaml").value;
  try {
    const saved = await api.putText(`/api/configs/${encodeURI(name)}`, text);
    clean = text;
    keepDraft();
    notice(`saved ${saved.path}`);
    refreshSaved();
  } catch (e) {
    notice(e.message, true);
  }
}

function listen() {
  $("task").addEventListener("change", async () => { await fillTrainers($("task").value); fillTemplates(); });
  $("trainer").addEventListener("change", fillTemplates);
  $("load-template").addEventListener("click", () => {
    const t = templates.find((x) => x.name === $("template").value);
    if (t) loadText(t.text, t.name);
  });
  $("saved").addEventListener("change", async (e) => {
    if (!e.target.value) return;
    const { path, text } = await api.get(`/api/configs/${encodeURI(e.target.value)}`);
    loadText(text, path);
  });
  $("file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (file) loadText(await file.text(), file.name);
  });
  let timer;
  $("yaml").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(validateNow, 150); });
  $("save-as").addEventListener("input", () => { nameTyped = true; keepDraft(); });
  $("save").addEventListener("click", save);
  $("start").addEventListener("click", start);
  window.addEventListener("beforeunload", (e) => {
    if (!dirty()) return;
    e.preventDefault(); // the browser asks before the page is left; the draft is kept either way
    e.returnValue = "";
  });
}

function savedDraft() {
  try {
    const draft = JSON.parse(localStorage.getItem(DRAFT) || "null");
    return draft && typeof draft.text === "string" && draft.text.trim() ? draft : null;
  } catch {
    return null;
  }
}

export async function initEditor() {
  form = new SchemaForm($("form"), edited);
  [{ tasks }, templates] = await Promise.all([api.get("/api/schema"), api.get("/api/templates")]);
  options($("task"), tasks);
  listen();
  await useSchema(tasks[0]);
  fillTemplates();
  refreshSaved();
  const draft = savedDraft();
  if (draft) {
    $("yaml").value = draft.text;
    $("save-as").value = draft.name || "";
    clean = typeof draft.clean === "string" ? draft.clean : "";
    nameTyped = !!draft.nameTyped;
    await validateNow();
    return;
  }
  const first = templates.find((t) => t.name === "llm/quickstart.yml") || templates[0];
  if (first) {
    $("template").value = first.name;
    await loadText(first.text, first.name);
  }
}
