// Tabs, and the two halves of the page.

import { notice } from "./api.js";
import "./fit.js"; // the memory estimate and the Data tab (adds its tab before the tabs are wired)
import { initEditor } from "./editor.js";
import { initRuns, select } from "./runs.js";

function showTab(name) {
  for (const b of document.querySelectorAll("nav button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.id === "tab-" + name);
}

for (const b of document.querySelectorAll("nav button")) b.addEventListener("click", () => showTab(b.dataset.tab));
document.addEventListener("run-started", (e) => {
  showTab("runs");
  select(e.detail);
});

initRuns();
initEditor()
  .then(() => document.body.setAttribute("data-ready", "1"))
  .catch((e) => notice(e.message, true));
