// Tabs, and the two halves of the page. The tab (and the selected run) live in the address:
// #config, #runs or #runs/NAME, so a reload, or the back button, shows the same place. A tab is a
// `nav button[data-tab=NAME]` with its `section#tab-NAME`: one more needs no change here.

import { notice } from "./api.js";
import "./fit.js"; // the memory estimate and the Data tab (adds its tab before the tabs are wired)
import { initEditor } from "./editor.js";
import { initFinished } from "./finished.js";
import { initRuns, select } from "./runs.js";

const tabs = () => [...document.querySelectorAll("nav button[data-tab]")];

function showTab(name, run) {
  for (const b of tabs()) {
    const on = b.dataset.tab === name;
    b.classList.toggle("active", on);
    b.setAttribute("aria-selected", String(on));
    b.tabIndex = on ? 0 : -1;
  }
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.id === "tab-" + name);
  const hash = "#" + name + (run ? "/" + encodeURIComponent(run) : "");
  if (location.hash !== hash) history.replaceState(history.state, "", hash);
}

function fromAddress() {
  const [tab, run] = location.hash.slice(1).split("/");
  if (!tabs().some((b) => b.dataset.tab === tab)) return showTab("config");
  if (tab !== "runs" || !run) return showTab(tab);
  showTab("runs", decodeURIComponent(run));
  select(decodeURIComponent(run));
}

for (const b of tabs()) {
  b.setAttribute("role", "tab");
  b.setAttribute("aria-controls", "tab-" + b.dataset.tab);
  b.addEventListener("click", () => showTab(b.dataset.tab));
  // the tab list is one tab stop; arrow keys move between its tabs (and show them)
  b.addEventListener("keydown", (e) => {
    if (e.key !== "ArrowRight" && e.key !== "ArrowLeft") return;
    const all = tabs(), next = all[(all.indexOf(b) + (e.key === "ArrowRight" ? 1 : all.length - 1)) % all.length];
    next.focus();
    showTab(next.dataset.tab);
  });
}
document.addEventListener("run-started", (e) => {
  showTab("runs", e.detail);
  select(e.detail);
});
window.addEventListener("hashchange", fromAddress);

initRuns();
initFinished();
fromAddress();
initEditor()
  .then(() => document.body.setAttribute("data-ready", "1"))
  .catch((e) => notice(e.message, true));
