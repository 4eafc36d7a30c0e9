// Will it fit, and what will it train on: the memory estimate beside the config, and the Data tab.
// Built here (imported by main.js before it wires the tabs), so the page's HTML stays as it is.

import { api, notice } from "./api.js";

const $ = (id) => document.getElementById(id);

function element(tag, attrs = {}, text = "") {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text) el.textContent = text;
  return el;
}

function buildPage() {
  const tab = element("button", { type: "button", "data-tab": "data" }, "Data");
  document.querySelector("nav").append(tab);
  const section = element("section", { id: "tab-data", class: "tab" });
  const bar = element("div", { class: "toolbar" });
  const count = element("input", { id: "preview-count", type: "number", min: "1", max: "50", value: "5" });
  const label = element("label", {}, "Examples ");
  label.append(count);
  bar.append(label, element("button", { type: "button", id: "preview-run", class: "primary" }, "Preview"));
  section.append(
    bar,
    element("p", { class: "muted" }, "The config in the editor, as the trainer will see its data. " +
      "\u00abMarked text\u00bb carries no loss."),
    element("div", { id: "preview-out" }),
  );
  document.querySelector("main").append(section);
  const side = element("div", { id: "estimate" });
  side.append(element("button", { type: "button", id: "estimate-run" }, "Estimate memory"), element("pre", { id: "estimate-out" }));
  $("problems").after(side);
}

async function estimate() {
  $("estimate-out").textContent = "estimating...";
  try {
    const result = await api.postText("/api/estimate", $("yaml").value);
    $("estimate-out").textContent = result.lines.join("\n");
  } catch (e) {
    $("estimate-out").textContent = e.message;
  }
}

function exampleNode(kind, example, i) {
  const box = element("div", { class: "example" });
  box.append(element("h4", {}, `example ${i}`));
  if (kind === "tokens" || kind === "blocks") {
    const pre = element("pre");
    for (const [text, trained] of example.segments) {
      pre.append(trained ? document.createTextNode(text) : element("mark", { title: "no loss" }, "\u00ab" + text + "\u00bb"));
    }
    box.append(pre, element("p", { class: "muted" }, `${example.tokens} tokens, ${example.trained_tokens} trained` +
      (example.cut_tokens ? `, ${example.cut_tokens} cut by max_length` : "")));
  } else if (kind === "pairs") {
    box.append(element("pre", {}, `prompt (${example.prompt_tokens} tokens, no loss):\n${example.prompt}`));
    const sides = element("div", { class: "split" });
    for (const side of ["chosen", "rejected"]) {
      sides.append(element("pre", {}, `${side} (${example[side].tokens} tokens):\n${example[side].text}`));
    }
    box.append(sides);
  } else if (kind === "prompts") {
    box.append(element("pre", {}, example.prompt));
  } else if (kind === "rows") {
    // the tasks' own fields (image, target, objects, prompt, answer, ...); an image as a thumbnail too
    if (example.thumbnail) box.append(element("img", { src: example.thumbnail, alt: example.image, class: "thumbnail" }));
    const fields = Object.entries(example).filter(([key]) => key !== "thumbnail");
    box.append(element("pre", {}, fields.map(([key, value]) => `${key}: ${typeof value === "string" ? value : JSON.stringify(value)}`).join("\n")));
  } else {
    box.append(element("pre", {}, `${example.text ?? example.image}\n-> label ${example.label}`));
  }
  return box;
}

async function preview() {
  const out = $("preview-out");
  out.textContent = "reading the data...";
  try {
    const record = await api.postText(`/api/preview?count=${$("preview-count").value}`, $("yaml").value);
    out.textContent = "";
    record.examples.forEach((example, i) => out.append(exampleNode(record.kind, example, i)));
    out.append(element("pre", {}, Object.entries(record.summary).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n")));
    for (const w of record.warnings) out.append(element("p", { class: "error" }, "warning: " + w));
  } catch (e) {
    out.textContent = e.message;
    notice(e.message, true);
  }
}

buildPage();
$("estimate-run").addEventListener("click", estimate);
$("preview-run").addEventListener("click", preview);
