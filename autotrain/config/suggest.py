"""Nearest-name suggestions for typos."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`" (did you mean `x`?)"` for the closest choice, or "" when nothing is close."""
    choices = [str(c) for c in choices]
    prefixed = [c for c in choices if c.startswith(str(word)) and word]
    if prefixed:
        return f" (did you mean `{prefixed[0]}`?)"
    match = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    if not match:
        lowered = {c.lower(): c for c in choices}
        match = [lowered[w] for w in (str(word).lower(),) if w in lowered]
    return f" (did you mean `{match[0]}`?)" if match else ""
