"""An Ollama Modelfile for an exported GGUF: the chat template translated into Ollama's Go template for the
common families (ChatML, Llama 3, Mistral; SmolLM2's is ChatML with a default system prompt), the stop
tokens, and the system prompt. The translation is not trusted: a small renderer of the Go-template subset
written here renders it beside the tokenizer's own Jinja template on sample conversations, and only a
family whose renderings match character for character is used."""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotrain.errors import UserInputError

_RANGE = "{{- range .Messages }}"
# family -> (Go templates to try, stop tokens). Variants differ in the spacing some tokenizers use.
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "chatml": (
        (_RANGE + "<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n",),
        ("<|im_start|>", "<|im_end|>"),
    ),
    "llama3": (
        (
            _RANGE + "<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ end }}"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    ),
    "mistral": (
        tuple(
            _RANGE + '{{ if eq .Role "user" }}[INST]' + inner + '[/INST]{{ else if eq .Role "assistant" }}'
            + answer + "{EOS}{{ end }}{{ end }}"
            for inner in (" {{ .Content }} ", " {{ .Content }}")
            for answer in ("{{ .Content }}", " {{ .Content }}")
        ),
        ("[INST]", "[/INST]", "{EOS}"),
    ),
}  # fmt: skip
PROBES: list[list[dict]] = [
    [{"role": "user", "content": "Hi there"}],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye?"},
    ],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
]
_MARK = "\x00SYSTEM\x00"
# Ollama samples unless told not to (temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1): its answers
# would not be the greedy ones the parity check compared. Temperature 0 takes the top token; a repeat penalty
# of 1 leaves the logits as the model gives them.
GREEDY = (
    "# greedy decoding, as the parity check compared the export with the trained model; raise temperature for "
    "varied answers",
    "PARAMETER temperature 0",
    "PARAMETER repeat_penalty 1",
)


@dataclass
class ChatFamily:
    name: str
    template: str  # Ollama TEMPLATE
    stops: tuple[str, ...]
    default_system: str | None  # a system prompt the chat template adds when a conversation has none
    prefix: str  # what llama.cpp puts before the template's text (BOS when the tokenizer adds it)


def find_family(hf_render, conversations: list[list[dict]], prefix: str, eos: str) -> ChatFamily | None:
    """The family whose Go template renders every conversation (that the tokenizer's template accepts) as the
    tokenizer does; `hf_render(messages)` renders with the generation prompt, `eos` is the tokenizer's EOS."""
    probes = [(m, text) for m in PROBES + conversations if (text := _try(hf_render, m)) is not None]
    if not probes:
        return None
    for name, (templates, stops) in FAMILIES.items():
        stops = tuple(stop.replace("{EOS}", eos) for stop in stops)
        for template in (t.replace("{EOS}", eos) for t in templates):
            default = _default_system(template, probes, prefix)
            if all(prefix + render_go(template, _with_system(m, default)) == text for m, text in probes):
                return ChatFamily(name, template, stops, default, prefix)
    return None


def _try(hf_render, messages: list[dict]) -> str | None:
    try:
        return hf_render(messages)
    except Exception:  # a template that refuses a role (Mistral's, for system): not a probe for it
        return None


def _with_system(messages: list[dict], system: str | None) -> list[dict]:
    if system is None or (messages and messages[0]["role"] == "system"):
        return messages
    return [{"role": "system", "content": system}, *messages]


def _default_system(template: str, probes, prefix: str) -> str | None:
    """The system prompt the tokenizer's template inserts on its own (SmolLM2: "You are a helpful AI ...")."""
    first = next((text for m, text in probes if m[0]["role"] != "system"), None)
    marked = render_go(template, [{"role": "system", "content": _MARK}, {"role": "user", "content": "x"}])
    if first is None or _MARK not in marked:
        return None
    before, after = marked.split(_MARK, 1)
    before, after = prefix + before, after[: after.find("x")] if "x" in after else after
    if not first.startswith(before) or after not in first[len(before) :]:
        return None
    return first[len(before) : first.index(after, len(before))] or None


def modelfile_text(gguf_name: str, family: ChatFamily, system: str | None) -> str:
    lines = [f"FROM ./{gguf_name}", "", f'TEMPLATE """{family.template}"""', ""]
    lines += [f'PARAMETER stop "{stop}"' for stop in family.stops]
    lines += ["", *GREEDY]
    system = system or family.default_system
    if system and takes_system(family.template):
        if '"""' in system:
            raise UserInputError('the system prompt holds `"""`, which a Modelfile cannot quote')
        lines += ["", f'SYSTEM """{system}"""']
    return "\n".join(lines) + "\n"


def takes_system(template: str) -> bool:
    """Whether the template writes a system message (Mistral's drops it, as its Jinja template refuses it)."""
    return _MARK in render_go(template, [{"role": "system", "content": _MARK}, {"role": "user", "content": "x"}])


# --- the Go-template subset the templates above use --------------------------------------------------------

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def render_go(template: str, messages: list[dict]) -> str:
    """Render `template` as Ollama would for `messages` (range .Messages, if/else if/else, eq, .Role,
    .Content, trim markers); anything else in a template is an error, so the check cannot pass by skipping."""
    nodes, _ = _parse(_lex(template), 0)
    return _run(nodes, {"Messages": messages})


def _lex(template: str) -> list[tuple[str, str]]:
    parts: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for match in _ACTION.finditer(template):
        text = template[pos : match.start()]
        text = text.lstrip() if trim_next else text
        parts.append(("text", text.rstrip() if match.group(1) else text))
        parts.append(("action", match.group(2)))
        pos, trim_next = match.end(), bool(match.group(3))
    tail = template[pos:]
    parts.append(("text", tail.lstrip() if trim_next else tail))
    return parts


def _parse(parts, i: int):
    """(nodes, index of the `end` / `else` action that closes them) from `parts[i:]`."""
    nodes = []
    while i < len(parts):
        kind, value = parts[i]
        if kind == "text":
            nodes.append(("text", value))
        elif value == "end" or value.startswith("else"):
            return nodes, i
        elif value.startswith(("range ", "if ")):
            node, i = _block(parts, i + 1, value)
            nodes.append(("block", node))
            continue
        else:
            nodes.append(("value", value))
        i += 1
    return nodes, i


def _block(parts, i: int, head: str):
    """(head, body, else-body) of a block whose body starts at `i`, and the index after its `end`."""
    body, j = _parse(parts, i)
    if j >= len(parts):
        raise UserInputError(f"internal: `{{{{ {head} }}}}` has no `{{{{ end }}}}`")
    closing = parts[j][1]
    if closing.startswith("else if "):  # the chained `if` shares this block's `end`
        node, k = _block(parts, j + 1, "if " + closing[len("else if ") :])
        return (head, body, [("block", node)]), k
    other = None
    if closing == "else":
        other, j = _parse(parts, j + 1)
    return (head, body, other), j + 1


def _run(nodes, scope: dict) -> str:
    out = []
    for kind, value in nodes:
        if kind == "text":
            out.append(value)
        elif kind == "value":
            out.append(str(_value(value, scope)))
        else:
            head, body, other = value
            if head.startswith("range "):
                out += [_run(body, {**scope, **_fields(item)}) for item in _value(head[6:], scope)]
            elif _test(head[3:], scope):
                out.append(_run(body, scope))
            elif other is not None:
                out.append(_run(other, scope))
    return "".join(out)


def _fields(message: dict) -> dict:
    return {"Role": message["role"], "Content": message["content"]}


def _value(expr: str, scope: dict):
    if expr.startswith("."):
        return scope[expr[1:]]
    raise UserInputError(f"internal: the Go-template renderer does not know `{expr}`")


def _test(expr: str, scope: dict) -> bool:
    match = re.fullmatch(r'eq (\.\w+) "([^"]*)"', expr)
    if match:
        return _value(match.group(1), scope) == match.group(2)
    return bool(_value(expr, scope))
