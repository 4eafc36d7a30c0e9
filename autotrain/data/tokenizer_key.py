"""A tokenizer's identity for the data cache: what decides the tokens it gives a text, and nothing else."""

from __future__ import annotations

import hashlib
import json


def tokenizer_key(tokenizer) -> str:
    """SHA-256 of the tokenizer's whole definition (a fast tokenizer's JSON: vocabulary, merges, normalizer,
    added tokens; a slow one's vocabulary), its special tokens and chat template."""
    digest = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(backend.to_str().encode())
    else:
        digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    extra = {
        "class": type(tokenizer).__name__,
        "special": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())},
        "chat_template": tokenizer.chat_template,
        "added": [str(t) for t in tokenizer.added_tokens_decoder.values()],
    }
    digest.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return digest.hexdigest()
