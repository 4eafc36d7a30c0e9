// A form generated from a task's JSON Schema: one section per object, one field per value, with the
// schema's description, bounds and default. Edits are reported as (path, value, unset); values are shown
// from the parsed YAML. The optimizer's own arguments come from its schema and follow the chosen optimizer.

const OPEN = new Set(["general", "data", "training_args"]);

function resolve(root, node) {
  if (node && node.$ref) {
    const target = root.$defs[node.$ref.split("/").pop()];
    const { $ref, ...rest } = node;
    return { ...target, ...rest };
  }
  return node || {};
}

// The non-null branch of `X | None`, and whether null is allowed.
function unwrap(root, node) {
  node = resolve(root, node);
  if (!node.anyOf) return { node, nullable: false };
  const options = node.anyOf.filter((o) => o.type !== "null");
  const nullable = options.length < node.anyOf.length;
  if (options.length !== 1) return { node: { ...node, mixed: true }, nullable };
  const { anyOf, ...rest } = node;
  return { node: { ...resolve(root, options[0]), ...rest }, nullable };
}

function kind(node) {
  if (node.enum || node.const !== undefined) return "choice";
  if (node.mixed || node.type === "array" || (node.type === "object" && !node.properties)) return "json";
  if (node.type === "boolean") return "boolean";
  if (node.type === "integer" || node.type === "number") return "number";
  return "text";
}

function bounds(node) {
  const lo = node.minimum ?? node.exclusiveMinimum, hi = node.maximum ?? node.exclusiveMaximum;
  if (lo === undefined && hi === undefined) return "";
  const left = lo === undefined ? "(-∞" : (node.minimum !== undefined ? "[" : "(") + lo;
  const right = hi === undefined ? "∞)" : hi + (node.maximum !== undefined ? "]" : ")");
  return `${left}, ${right}`;
}

function show(value) {
  if (value === undefined) return "";
  if (value === null) return "null";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// What the user typed, as the value to write: numbers as numbers, anything unreadable as typed (the
// server's check then says what is wrong with it, in the CLI's words).
function parse(k, raw, nullable) {
  const text = raw.trim();
  if (text === "") return { unset: true };
  if (nullable && text === "null") return { value: null };
  if (k === "number") {
    const n = Number(text);
    return { value: /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text) && Number.isFinite(n) ? n : text };
  }
  if (k === "boolean" || k === "choice") return { value: JSON.parse(text) };
  if (k === "json" && /^[[{"]/.test(text)) {
    try { return { value: JSON.parse(text) }; } catch { return { value: text }; }
  }
  return { value: text };
}

function debounce(fn, ms) {
  let timer;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

export class SchemaForm {
  constructor(el, onEdit) {
    this.el = el;
    this.onEdit = onEdit;
    this.fields = new Map(); // dotted path -> {input, box, kind, nullable}
  }

  build(schema, optimizers) {
    this.schema = schema;
    this.optimizers = optimizers;
    this.optimizer = undefined;
    this.fields.clear();
    this.el.replaceChildren();
    const general = this.section("general", "", []);
    for (const [key, raw] of Object.entries(schema.properties)) {
      const { node, nullable } = unwrap(schema, raw);
      if (node.type === "object" && node.properties) this.el.append(this.objectSection(key, node, [key]));
      else general.fields.append(this.field(key, node, nullable, [key]));
    }
    this.el.prepend(general.box);
  }

  section(title, description, path) {
    const box = document.createElement("details");
    box.className = "section";
    box.dataset.path = path.join(".");
    box.open = OPEN.has(title);
    const summary = document.createElement("summary");
    summary.textContent = title;
    if (description) summary.insertAdjacentHTML("beforeend", ` <span class="desc"></span>`);
    if (description) summary.lastElementChild.textContent = description;
    const fields = document.createElement("div");
    fields.className = "fields";
    box.append(summary, fields);
    return { box, fields };
  }

  objectSection(key, node, path) {
    const { box, fields } = this.section(key, node.description || "", path);
    for (const [name, raw] of Object.entries(node.properties)) {
      const sub = unwrap(this.schema, raw);
      const here = [...path, name];
      if (here.join(".") === "training_args.optimizer_args") {
        this.argsBox = this.section("optimizer_args", sub.node.description || "", here);
        this.argsBox.box.open = true;
        fields.append(this.argsBox.box);
      } else if (sub.node.type === "object" && sub.node.properties) {
        fields.append(this.objectSection(name, sub.node, here));
      } else {
        fields.append(this.field(name, sub.node, sub.nullable, here));
      }
    }
    return box;
  }

  field(name, node, nullable, path) {
    const k = kind(node), dotted = path.join(".");
    const box = document.createElement("div");
    box.className = "field";
    box.dataset.path = dotted;
    const label = document.createElement("label");
    label.htmlFor = "f-" + dotted;
    label.textContent = name;
    const hint = [bounds(node), node.default !== undefined ? "default " + show(node.default) : ""].filter(Boolean);
    if (hint.length) label.insertAdjacentHTML("beforeend", ' <span class="hint"></span>');
    if (hint.length) label.lastElementChild.textContent = hint.join(" · ");
    const input = this.input(k, node, nullable, dotted);
    const help = document.createElement("small");
    help.textContent = node.description || "";
    help.id = "h-" + dotted;
    const error = document.createElement("div");
    error.className = "error";
    error.id = "e-" + dotted;
    input.setAttribute("aria-describedby", `${error.id} ${help.id}`); // the error is read first
    box.append(label, input, help, error);
    // `pending`: typed but not yet sent. A reply to an earlier edit must not overwrite it: the field has
    // lost focus by then when the user moves on quickly, and the send would carry the old value back.
    const entry = { input, box, kind: k, nullable, pending: false };
    this.fields.set(dotted, entry);
    const send = () => {
      entry.pending = false;
      this.onEdit(path, parse(k, input.value, nullable));
    };
    if (input.tagName === "SELECT") input.addEventListener("change", send);
    else {
      const later = debounce(send, 120);
      input.addEventListener("input", () => { entry.pending = true; later(); });
    }
    return box;
  }

  input(k, node, nullable, dotted) {
    let input;
    if (k === "choice" || k === "boolean") {
      input = document.createElement("select");
      const values = k === "boolean" ? [true, false] : node.enum || [node.const];
      const blank = node.default !== undefined ? `(default: ${show(node.default)})` : "(not set)";
      input.append(new Option(blank, ""));
      if (nullable) input.append(new Option("null", "null"));
      for (const v of values) input.append(new Option(String(v), JSON.stringify(v)));
    } else {
      input = document.createElement("input");
      input.type = "text";
      if (k === "number") input.inputMode = "decimal";
      input.placeholder = node.default !== undefined ? show(node.default) : "";
    }
    input.id = "f-" + dotted;
    input.name = dotted;
    return input;
  }

  optimizerArgs(name) {
    if (!this.argsBox || name === this.optimizer) return;
    this.optimizer = name;
    for (const key of [...this.fields.keys()]) {
      if (key.startsWith("training_args.optimizer_args.")) this.fields.delete(key);
    }
    const schema = this.optimizers[name];
    this.argsBox.fields.replaceChildren();
    const saved = this.schema;
    this.schema = schema || { $defs: {} };
    for (const [key, raw] of Object.entries((schema && schema.properties) || {})) {
      const { node, nullable } = unwrap(this.schema, raw);
      this.argsBox.fields.append(this.field(key, node, nullable, ["training_args", "optimizer_args", key]));
    }
    this.schema = saved;
  }

  // Show the values of `data` (the parsed YAML); the field being typed in, and any with an edit not yet
  // sent, keep what the user typed.
  setData(data) {
    const training = (data && data.training_args) || {};
    this.optimizerArgs(training.optimizer || "adamw_torch");
    for (const [dotted, f] of this.fields) {
      if (f.input === document.activeElement || f.pending) continue;
      let value = data;
      for (const key of dotted.split(".")) value = value && typeof value === "object" ? value[key] : undefined;
      if (f.input.tagName === "SELECT") f.input.value = value === undefined ? "" : JSON.stringify(value);
      else f.input.value = show(value);
    }
  }

  // Mark the fields named by problems (or their nearest section); returns the problems shown nowhere.
  showProblems(problems) {
    for (const f of this.fields.values()) {
      f.box.classList.remove("bad");
      f.input.removeAttribute("aria-invalid");
      f.box.querySelector(".error").textContent = "";
    }
    return problems.filter((p) => {
      const f = this.fields.get(p.path);
      if (!f) return true;
      f.box.classList.add("bad");
      f.input.setAttribute("aria-invalid", "true");
      f.box.querySelector(".error").textContent = p.message;
      return false;
    });
  }

  // Open the sections around the field of `path` and move the focus to it; false when there is none.
  focusField(path) {
    const f = this.fields.get(path);
    if (!f) return false;
    for (let el = f.box.parentElement; el && el !== this.el; el = el.parentElement) {
      if (el.tagName === "DETAILS") el.open = true;
    }
    f.input.focus();
    f.input.scrollIntoView({ block: "center" });
    return true;
  }
}
