// The Export action on a finished run: format and quant, a button that starts `autotrain export` in the
// background, and each export the run holds with its parity figures. Builds its own panel in the run view
// and follows the selected run through the run name and status the Runs tab shows.

import { api, notice } from "./api.js";

const $ = (id) => document.getElementById(id);
let shown = null;
let timer = null;
let options = null;

function panel() {
  const box = document.createElement("section");
  box.id = "run-export";
  box.innerHTML = `<h3>Export</h3>
    <div class="toolbar">
      <label>Format <select id="export-format"></select></label>
      <label>Quant <select id="export-quant"></select></label>
      <button type="button" id="export-start">Export</button>
      <span id="export-state" class="muted"></span>
    </div>
    <table id="export-table"><thead><tr><th>export</th><th>parity</th><th>reader</th><th>prompts agreeing</th>
      <th>max logit diff (trained / file)</th><th>size</th></tr></thead><tbody></tbody></table>`;
  $("run-progress").after(box);
  return box;
}

// The formats the selected run exports to (GGUF and Ollama are for LLM runs; other tasks: merged).
function fillFormats(formats) {
  const select = $("export-format");
  if ([...select.options].map((o) => o.value).join() === formats.join()) return;
  select.replaceChildren(...formats.map((f) => new Option(f, f, false, f === (formats.includes("gguf") ? "gguf" : "merged"))));
  fillQuants();
}

function fillQuants() {
  const merged = $("export-format").value === "merged";
  const quants = merged ? options.merged_dtypes : options.quants;
  $("export-quant").replaceChildren(...quants.map((q) => new Option(q, q, false, q === (merged ? "f32" : "f16"))));
}

function rows(exports) {
  return exports.flatMap((e) => {
    const readers = Object.entries(e.readers || {});
    const size = e.files.map((f) => `${(f.bytes / 1e6).toFixed(1)} MB`).join(", ");
    return (readers.length ? readers : [["–", {}]]).map(([reader, r]) => {
      const tr = document.createElement("tr");
      const trained = r.vs_trained || r, file = r.vs_written_weights || {};
      const cells = r.exercised === false
        ? [e.folder, e.passed ? "passed" : "FAILED", reader, `not checked: ${r.reason}`, "", size]
        : [e.folder, e.passed ? "passed" : "FAILED", reader, `${trained.prompts_agreeing ?? "–"}/${trained.prompts ?? "–"}`,
           `${fmt(trained.max_logit_diff ?? trained.max_logit_diff_first_token)} / ${fmt(file.max_logit_diff)}`, size];
      for (const text of cells) tr.insertCell().textContent = text;
      tr.title = e.failures.join("; ") || e.prompts_source || "";
      tr.className = e.passed ? "" : "failed";
      return tr;
    });
  });
}

const fmt = (x) => (typeof x === "number" ? x.toPrecision(3) : "–");

async function refresh() {
  clearTimeout(timer);
  const name = $("run-name").textContent;
  if (!name || $("run-detail").hidden) return;
  try {
    const state = await api.get(`/api/runs/${encodeURIComponent(name)}/export`);
    if (name !== $("run-name").textContent) return;
    if (state.formats) fillFormats(state.formats);
    $("export-table").tBodies[0].replaceChildren(...rows(state.exports));
    const last = state.log ? state.log.trim().split("\n").pop() : "";
    $("export-state").textContent = state.running ? `exporting… ${last}` : state.exit_code ? `failed (exit ${state.exit_code}): ${last}` : "";
    $("export-start").disabled = state.running || $("run-status").textContent !== "completed";
    if (state.running) timer = setTimeout(refresh, 2000);
  } catch (e) {
    notice(e.message, true);
  }
}

async function start() {
  const name = $("run-name").textContent;
  try {
    await api.post(`/api/runs/${encodeURIComponent(name)}/export`, { format: $("export-format").value, quant: $("export-quant").value });
    notice(`exporting ${name}`);
    refresh();
  } catch (e) {
    notice(e.message, true);
  }
}

async function init() {
  panel();
  options = await api.get("/api/export/options");
  fillFormats(Object.keys(options.formats));
  $("export-format").addEventListener("change", fillQuants);
  $("export-start").addEventListener("click", start);
  // The Runs tab rewrites the name and status of the selected run on every poll: follow it.
  new MutationObserver(() => {
    const key = `${$("run-name").textContent}|${$("run-status").textContent}`;
    if (key !== shown) {
      shown = key;
      refresh();
    }
  }).observe($("run-detail"), { subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ["hidden"] });
}

init().catch((e) => notice(e.message, true));
