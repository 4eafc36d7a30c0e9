// The Config tab: a template or file into the YAML view, the form beside it, live validation with the
// CLI's own checks, save, and start.

import { api, notice } from "./api.js";
import { SchemaForm } from "./form.js";

const $ = (id) => document.getElementById(id);
const TASKS = ["llm", "text-classification", "image-classification"];
const TRAINERS = ["sft", "orpo", "dpo", "reward", "clm"];

let templates = [];
let schemaTask = null;
let form;
// Requests run one after another, so each form edit applies to the text the previous one produced.
let queue = Promise.resolve();
let generation = 0;

export const timing = { lastShown: 0 }; // when validation results were last drawn (ms)

function options(select, values, label = (v) => v) {
  select.replaceChildren(...values.map((v) => new Option(label(v), v)));
}

async function useSchema(task) {
  if (!TASKS.includes(task) || task === schemaTask) return;
  const { schema, optimizers } = await api.get(`/api/schema/${task}`);
  schemaTask = task;
  form.build(schema, optimizers);
  $("task").value = task;
  $("trainer").disabled = task !== "llm";
}

async function show(result) {
  const data = result.data && typeof result.data === "object" ? result.data : {};
  if (data.task) await useSchema(data.task);
  if (data.trainer) $("trainer").value = data.trainer;
  form.setData(data);
  const rest = form.showProblems(result.problems);
  const status = $("status");
  status.className = "status " + (result.ok ? "ok" : "bad");
  const n = result.problems.length;
  status.textContent = result.ok ? "✓ valid config" : `${n} problem${n === 1 ? "" : "s"}`;
  $("problems").replaceChildren(
    ...result.problems.map((p) => {
      const li = document.createElement("li");
      const where = p.line ? `line ${p.line}:${p.column} ` : "";
      li.innerHTML = `${where}<code></code>: <span></span>`;
      li.querySelector("code").textContent = p.path;
      li.querySelector("span").textContent = p.message;
      li.classList.toggle("elsewhere", rest.includes(p));
      return li;
    }),
  );
  timing.lastShown = Date.now();
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
  if (name) $("save-as").value = name.split("/").pop();
  return validateNow();
}

function fillTemplates() {
  const task = $("task").value, trainer = $("trainer").value;
  const mine = templates.filter((t) => t.task === task);
  options($("template"), mine.map((t) => t.name));
  const best = mine.find((t) => t.default && (task !== "llm" || t.trainer === trainer));
  if (best) $("template").value = best.name;
}

async function refreshSaved() {
  const names = await api.get("/api/configs");
  const select = $("saved");
  select.replaceChildren(new Option("(configs in the runs dir)", ""), ...names.map((n) => new Option(n, n)));
}

async function start() {
  // Saved as RUNS/<run name>.yml: one config per run, so Resume always finds the one the run started from.
  const body = { yaml: $("yaml").value };
  try {
    const run = await api.post("/api/runs", body);
    notice(`started ${run.name} (config saved as ${run.config})`);
    document.dispatchEvent(new CustomEvent("run-started", { detail: run.name }));
    refreshSaved();
  } catch (e) {
    notice(e.message, true);
    if (e.data && e.data.problems) show(e.data);
  }
}

async function save() {
  const name = $("save-as").value.trim();
  if (!name) return notice("give a file name (NAME.yml) to save into the runs dir", true);
  try {
    const saved = await api.putText(`/api/configs/${encodeURI(name)}`, $("yaml").value);
    notice(`saved ${saved.path}`);
    refreshSaved();
  } catch (e) {
    notice(e.message, true);
  }
}

export async function initEditor() {
  form = new SchemaForm($("form"), edited);
  options($("task"), TASKS);
  options($("trainer"), TRAINERS);
  templates = await api.get("/api/templates");
  $("task").addEventListener("change", fillTemplates);
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
  $("save").addEventListener("click", save);
  $("start").addEventListener("click", start);
  await useSchema("llm");
  fillTemplates();
  refreshSaved();
  const first = templates.find((t) => t.name === "llm/quickstart.yml") || templates[0];
  if (first) {
    $("template").value = first.name;
    await loadText(first.text, first.name);
  }
}
