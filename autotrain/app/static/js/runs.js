// The Runs tab: every run under the runs dir with its status; the selected one's progress, live charts,
// plots, log tail and files. Polls twice a second while the run trains, every 3 s otherwise. Each row is
// a tab stop (Enter or Space selects it, arrow keys move between rows); the selected run is kept in the
// address (#runs/NAME), so a reload shows it again. Each poll of the selected run is announced as a
// `run-shown` event (its detail: the run), for the parts of the page that follow it.

import { api, notice } from "./api.js";
import { COLORS, fmt, lineChart } from "./chart.js";

const $ = (id) => document.getElementById(id);
const NOT_METRICS = new Set(["eval_loss", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second"]);
const FAST = 500, SLOW = 3000;

let selected = null;
let records = [];
let detailTimer = null;
let shownFiles = "";
// For each step first drawn on the loss chart: when (ms since the epoch). Read by the browser test.
window.autotrainChartLog = [];

function eta(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const s = Math.round(seconds);
  return `${Math.floor(s / 3600)}:${String(Math.floor(s / 60) % 60).padStart(2, "0")}:${String(s % 60).padStart(2, "0")}`;
}

// Latest value per step (a resumed run logs its steps again from the checkpoint on).
function points(key) {
  const byStep = new Map();
  for (const r of records) if (typeof r[key] === "number" && typeof r.step === "number") byStep.set(r.step, r[key]);
  return [...byStep.entries()].sort((a, b) => a[0] - b[0]);
}

function drawCharts() {
  const before = Number($("chart-loss").dataset.lastStep || -1);
  lineChart($("chart-loss"), [
    { name: "train loss", color: COLORS[0], points: points("loss") },
    { name: "eval loss", color: COLORS[1], points: points("eval_loss"), markers: true },
  ]);
  const after = Number($("chart-loss").dataset.lastStep || -1);
  if (after > before) window.autotrainChartLog.push({ run: selected, step: after, shownAt: Date.now() });
  lineChart($("chart-lr"), [{ name: "lr", color: COLORS[2], points: points("learning_rate") }]);
  const names = [...new Set(records.flatMap((r) => Object.keys(r)))].filter((k) => k.startsWith("eval_") && !NOT_METRICS.has(k));
  $("fig-metrics").hidden = !names.length;
  lineChart($("chart-metrics"), names.map((n, i) => ({ name: n.slice(5), color: COLORS[(i + 3) % COLORS.length], points: points(n), markers: true })));
}

// The benchmark table beside the charts (`autotrain evaluate --benchmark`, or the config's `benchmark:`).
function cell(value, stderr, signed) {
  if (typeof value !== "number") return "–";
  const text = (signed && value >= 0 ? "+" : "") + value.toFixed(4);
  return typeof stderr === "number" ? `${text} ± ${stderr.toFixed(4)}` : text;
}

function drawBenchmarks(run) {
  const rows = run.benchmarks ? run.benchmarks.rows : [];
  $("fig-benchmarks").hidden = !rows.length;
  $("bench-table").tBodies[0].replaceChildren(
    ...rows.map((r) => {
      const tr = document.createElement("tr");
      for (const text of [r.task, r.metric, cell(r.base, r.base_stderr), cell(r.trained, r.trained_stderr), cell(r.difference, r.difference_stderr, true)]) {
        tr.insertCell().textContent = text;
      }
      return tr;
    }),
  );
}

function drawProgress(run) {
  const p = run.progress;
  const items = [
    ["step", `${p.step}${p.max_steps ? " / " + p.max_steps : ""}`],
    ["loss", fmt(p.loss)],
    ["lr", fmt(p.lr)],
    ["tokens/s", p.tokens_per_second ? Math.round(p.tokens_per_second).toLocaleString() : "–"],
    ["ETA", run.status === "running" ? eta(p.eta_seconds) : "–"],
    ["exit code", run.exit_code ?? "–"],
  ];
  $("run-progress").replaceChildren(
    ...items.flatMap(([k, v]) => {
      const dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = k;
      dd.textContent = v;
      return [dt, dd];
    }),
  );
  const badge = $("run-status");
  badge.textContent = run.status;
  badge.className = "badge " + run.status.replace(/\s+/g, "-");
  $("stop").disabled = run.status !== "running";
  const checkpoint = run.files.some((f) => f.path.startsWith("checkpoint-"));
  $("resume").disabled = run.status === "running" || run.status === "completed" || !checkpoint;
  $("accept-changes").disabled = $("resume").disabled;
}

function drawFiles(run) {
  const key = run.files.map((f) => `${f.path}:${f.size}`).join("|");
  if (key === shownFiles) return;
  shownFiles = key;
  const url = (path) => `/api/runs/${encodeURIComponent(run.name)}/files/${path}`;
  $("run-files").replaceChildren(
    ...run.files.map((f) => {
      const li = document.createElement("li");
      if (f.folder) li.textContent = f.path + "/";
      else li.innerHTML = `<a target="_blank" rel="noopener"></a> <span class="muted"></span>`;
      if (!f.folder) {
        li.firstChild.href = url(f.path);
        li.firstChild.textContent = f.path;
        li.lastChild.textContent = `${(f.size / 1024).toFixed(1)} KB`;
      }
      return li;
    }),
  );
  const plots = run.files.filter((f) => /^plots\/.*\.png$/.test(f.path));
  $("plots").replaceChildren(
    ...plots.map((f) => {
      const src = url(f.path);
      return Object.assign(document.createElement("img"), { src: `${src}${src.includes("?") ? "&" : "?"}v=${f.size}`, alt: f.path });
    }),
  );
}

async function pollDetail() {
  clearTimeout(detailTimer);
  if (!selected) return;
  const name = selected;
  let run;
  try {
    run = await api.get(`/api/runs/${encodeURIComponent(name)}?since=${records.length}`);
  } catch (e) {
    notice(e.message, true);
    detailTimer = setTimeout(pollDetail, SLOW);
    return;
  }
  if (name !== selected) return;
  if (run.count < records.length) records = []; // the run was started again from scratch
  else records = records.concat(run.records);
  $("run-detail").hidden = false;
  $("run-name").textContent = run.name;
  drawProgress(run);
  const row = document.querySelector(`#runs-table tbody tr[data-name="${CSS.escape(run.name)}"]`);
  if (row) fillRow(row, run); // the list polls less often: keep the selected run's row current
  drawCharts();
  drawBenchmarks(run);
  drawFiles(run);
  const log = $("run-log");
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = run.log;
  if (atEnd) log.scrollTop = log.scrollHeight;
  document.dispatchEvent(new CustomEvent("run-shown", { detail: run }));
  detailTimer = setTimeout(pollDetail, run.status === "running" ? FAST : SLOW);
}

export function select(name) {
  selected = name;
  records = [];
  shownFiles = "";
  $("chart-loss").dataset.lastStep = "-1";
  for (const row of document.querySelectorAll("#runs-table tbody tr")) markSelected(row);
  if (location.hash.startsWith("#runs")) history.replaceState(history.state, "", "#runs/" + encodeURIComponent(name));
  pollDetail();
}

function markSelected(row) {
  row.classList.toggle("selected", row.dataset.name === selected);
  row.setAttribute("aria-selected", String(row.dataset.name === selected));
}

function newRow(name) {
  const tr = document.createElement("tr");
  tr.dataset.name = name;
  tr.tabIndex = 0;
  tr.setAttribute("role", "row");
  tr.innerHTML = "<td></td><td><span class='badge'></span></td><td></td><td></td>";
  tr.addEventListener("click", () => select(name));
  tr.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      select(name);
    } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      const next = e.key === "ArrowDown" ? tr.nextElementSibling : tr.previousElementSibling;
      if (next) next.focus();
    }
  });
  return tr;
}

function fillRow(tr, r) {
  tr.cells[0].textContent = r.name;
  tr.cells[1].firstChild.textContent = r.status;
  tr.cells[1].firstChild.className = "badge " + r.status.replace(/\s+/g, "-");
  tr.cells[2].textContent = `${r.progress.step}${r.progress.max_steps ? "/" + r.progress.max_steps : ""}`;
  tr.cells[3].textContent = fmt(r.progress.loss);
}

async function pollList() {
  try {
    const runs = await api.get("/api/runs");
    $("runs-empty").hidden = runs.length > 0;
    // Rows are kept and updated, not rebuilt: the row that has the keyboard focus keeps it.
    const body = $("runs-table").querySelector("tbody");
    const rows = new Map([...body.rows].map((tr) => [tr.dataset.name, tr]));
    const wanted = runs.map((r) => {
      const tr = rows.get(r.name) || newRow(r.name);
      fillRow(tr, r);
      markSelected(tr);
      return tr;
    });
    for (const [name, tr] of rows) if (!runs.some((r) => r.name === name)) tr.remove();
    wanted.forEach((tr, i) => { if (body.rows[i] !== tr) body.insertBefore(tr, body.rows[i] || null); });
  } catch (e) {
    notice(e.message, true);
  }
  setTimeout(pollList, 2000);
}

async function act(action) {
  try {
    // Resume with "accept config changes" checked: `--resume --accept-changes`, as from the command line.
    const body = action === "resume" ? { accept_changes: $("accept-changes").checked } : undefined;
    await api.post(`/api/runs/${encodeURIComponent(selected)}/${action}`, body);
    if (action === "resume") $("accept-changes").checked = false;
    notice(`${action === "stop" ? "stopping" : "resuming"} ${selected}`);
    pollDetail();
  } catch (e) {
    notice(e.message, true);
  }
}

export function initRuns() {
  $("stop").addEventListener("click", () => act("stop"));
  $("resume").addEventListener("click", () => act("resume"));
  pollList();
}
