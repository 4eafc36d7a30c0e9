"""Which tokens of a chat conversation are the answers: the assistant's turns, as the chat template draws them.

A template says where a turn begins and ends only by what it renders, so that is what is read: the
conversation rendered up to an assistant turn with the generation prompt (what the model is shown when it
starts to answer) and rendered through that turn differ by the text the model writes there, the template's
end-of-turn marker included. Every assistant turn of a conversation is found this way; system, user and tool
turns and the markers that open each turn are not. No `{% generation %}` markers are needed, so it works for
any template that renders a conversation's beginning the same way alone as in the whole.

Where a template does not (one that drops earlier reasoning, one whose generation prompt adds text the whole
conversation does not hold, or a default system prompt that an empty conversation lacks), a turn's span is
cut to where the renderings agree, so it does not reach into another turn.
"""

from __future__ import annotations

from autotrain.errors import UserInputError

Span = tuple[int, int, bool]  # characters [start, end) of the rendered conversation; whether `end` is the turn's own


def render(tokenizer, messages: list[dict], reply: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=reply)


def assistant_spans(tokenizer, messages: list[dict], first: int = 0) -> tuple[str, list[Span]]:
    """The rendered conversation and the characters of each assistant turn from message `first` on."""
    try:
        full = render(tokenizer, messages)
    except Exception as exc:  # noqa: BLE001 - a template's own refusal (jinja raise_exception, ...)
        raise UserInputError(
            f"the chat template cannot render a conversation ({_first_line(exc)}): its roles "
            f"{', '.join(str(m.get('role')) for m in messages)}"
        ) from None
    spans = []
    for i in range(first, len(messages)):
        if messages[i].get("role") != "assistant":
            continue
        try:
            before = render(tokenizer, messages[:i], reply=True) if i else ""  # none renders no messages
            through = full if i + 1 == len(messages) else render(tokenizer, messages[: i + 1])  # the last: full
        except Exception as exc:  # noqa: BLE001 - a template's own refusal (jinja raise_exception, ...)
            raise UserInputError(
                f"the chat template cannot render the conversation up to its assistant turn {i} ({_first_line(exc)}), "
                "so the answers cannot be told apart; set `training_args.train_on_inputs: true` to train on "
                "every token"
            ) from None
        start, end = _agreeing(before, full), _agreeing(through, full)
        if start < len(before) or not i:  # the generation prompt is not what the whole conversation holds there
            start = max(start, _turn_start(tokenizer, messages[:i], full))
        if end > start:
            spans.append((start, end, end == len(through)))
    return full, spans


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _turn_start(tokenizer, earlier: list[dict], full: str) -> int:
    """Where the answer's text begins, from the conversation rendered with an empty assistant turn after
    `earlier` (a template that adds a default system prompt only to a conversation with messages does so
    here as in `full`); 0 when the template will not render one."""
    try:
        return _agreeing(render(tokenizer, [*earlier, {"role": "assistant", "content": ""}]), full)
    except Exception:  # noqa: BLE001 - a template that refuses an empty turn: no better bound
        return 0


def _agreeing(prefix: str, full: str) -> int:
    """How many leading characters `prefix` and `full` share."""
    if full.startswith(prefix):
        return len(prefix)
    n = 0
    for a, b in zip(prefix, full, strict=False):
        if a != b:
            break
        n += 1
    return n


def answer_tokens(tokenizer, messages: list[dict], first: int = 0) -> tuple[list[int], list[int]]:
    """Token ids of the rendered conversation and a 0/1 mask: 1 on the tokens of its assistant turns.

    A token counts when it overlaps an assistant turn's characters (one that straddles the boundary belongs
    to the answer), except across an end where the renderings only agree by chance (`<|end|>\n<|` of
    `<|end|>\n<|endoftext|>` and `<|end|>\n<|user|>`): there a token counts only when it ends inside the
    turn. The ids are the template's text tokenized as TRL tokenizes a conversation (no special tokens
    added: the template writes its own).
    """
    full, spans = assistant_spans(tokenizer, messages, first)
    if not getattr(tokenizer, "is_fast", False):
        return _by_prefixes(tokenizer, full, spans)
    import numpy as np

    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    offsets = np.asarray(encoded["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    return encoded["input_ids"], span_mask(offsets[:, 0], offsets[:, 1], spans).astype(int).tolist()


def span_mask(starts, ends, spans: list[Span]):
    """Which tokens (character `starts` / `ends`, numpy arrays) belong to the assistant turns `spans`, as
    `answer_tokens` counts them: a bool array."""
    import numpy as np

    mask = np.zeros(len(starts), dtype=bool)
    for a, b, own in spans:
        mask |= (starts < b) & (ends > a) & (own | (ends <= b))
    return mask & (ends > starts)


def _by_prefixes(tokenizer, full: str, spans: list[Span]) -> tuple[list[int], list[int]]:
    """Tokenizers without character offsets: the tokens of the text before a boundary agree with the whole
    conversation's up to the token that holds the boundary (the same tokens as by offsets)."""
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]

    def boundary(chars: int) -> tuple[int, bool]:
        """(tokens wholly before `chars`, whether the next token straddles it)"""
        head = tokenizer(full[:chars], add_special_tokens=False)["input_ids"]
        n = 0
        while n < min(len(head), len(ids)) and head[n] == ids[n]:
            n += 1
        return n, n < len(head)

    mask = [0] * len(ids)
    for a, b, own in spans:
        end, across = boundary(b) if b < len(full) else (len(ids), False)
        for i in range(boundary(a)[0], end + int(own and across)):
            mask[i] = 1
    return ids, mask
