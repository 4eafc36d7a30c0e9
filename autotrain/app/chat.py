"""Chat with a finished LLM run from the page: `autotrain chat`'s engine (its prompt budget, chat
template and stopping rules), the reply streamed to the page as plain text while it is generated.

One model is kept loaded (the last one chatted with) and one reply is generated at a time. What a
request may carry is bounded: at most MAX_TURNS messages of MAX_MESSAGE characters each.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from autotrain.app.paths import run_folder
from autotrain.errors import UserInputError

MAX_MESSAGE = 4000  # characters in one message
MAX_TURNS = 40  # messages in one request (the prompt budget trims older ones further)
ROLES = ("user", "assistant")


def redacted(pieces: Iterator[str], secrets: set[str]) -> Iterator[str]:
    """`pieces` with every secret replaced by `***`, even one split across pieces: the last characters
    (one fewer than the longest secret) wait for the next piece before they are sent."""
    from autotrain.config.interpolate import REDACTED

    secrets = {s for s in secrets if s}
    hold = max(map(len, secrets), default=1) - 1
    buffer = ""
    for piece in pieces:
        buffer += piece
        for secret in secrets:
            buffer = buffer.replace(secret, REDACTED)
        if len(buffer) > hold:
            yield buffer[: len(buffer) - hold]
            buffer = buffer[len(buffer) - hold :]
    if buffer:
        yield buffer


def checked_messages(body: dict) -> list[dict]:
    """The conversation from a request, or UserInputError saying what is wrong with it."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise UserInputError('give {"messages": [{"role": "user", "content": "..."}, ...]}')
    if len(messages) > MAX_TURNS:
        raise UserInputError(f"{len(messages)} messages; at most {MAX_TURNS} are sent (start a new chat)")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise UserInputError('each message is {"role": "user" | "assistant", "content": TEXT}')
        if len(m["content"]) > MAX_MESSAGE:
            raise UserInputError(f"a message is {len(m['content']):,} characters; at most {MAX_MESSAGE:,}")
    if messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        raise UserInputError("the last message must be the user's, and not empty")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


class Engine:
    """The loaded run (reloaded when its folder's model changes) and the lock one reply holds."""

    def __init__(self):
        self.key: tuple | None = None
        self.run = None
        self.loading = threading.Lock()
        self.busy = threading.Lock()

    def load(self, folder: Path):
        from autotrain.inference.load import load_run, read_config

        if read_config(folder).task != "llm":
            raise UserInputError(f"`{folder.name}` is not an LLM run; chat needs a run that generates text")
        key = (folder, *(p.stat().st_mtime_ns for p in sorted(folder.glob("*.safetensors"))))
        with self.loading:
            if key != self.key:
                self.run, self.key = None, None  # free the previous model first
                self.run, self.key = load_run(folder, "auto"), key
        if not self.run.processor.chat_template:
            raise UserInputError(f"the run `{folder.name}` has no chat template (`data.chat_template: none`)")
        return self.run

    def stream(self, run, messages: list[dict], max_new_tokens: int) -> Iterator[str]:
        """The reply, piece by piece, as the model writes it."""
        from transformers import TextIteratorStreamer

        from autotrain.inference.chat import Conversation
        from autotrain.inference.generate import GenerationSettings, generate, generation_config

        conversation = Conversation(run.processor, run.max_tokens)
        conversation.messages = messages
        config = generation_config(GenerationSettings(max_new_tokens=max_new_tokens), run.processor, run.model)
        with self.busy:
            streamer = TextIteratorStreamer(run.processor, skip_prompt=True, skip_special_tokens=True, timeout=600)
            failed: list[str] = []

            def work():
                try:
                    generate(run, [conversation.prompt_ids()], config, streamer=streamer)
                except Exception as exc:  # shown at the end of the reply, not lost in a thread
                    failed.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                    streamer.end()

            thread = threading.Thread(target=work, daemon=True)
            thread.start()
            yield from (piece for piece in streamer if piece)
            thread.join()
            if failed:
                yield f"\n[generation failed: {failed[0]}]"


def routes(app: FastAPI, runs) -> None:
    error = app.state.error
    engine = Engine()

    @app.post("/api/runs/{name}/chat")
    def chat(name: str, body: dict):
        folder = run_folder(runs.root, name)
        if runs.alive(name):
            return error(409, f"run `{name}` is still training; chat with it once it has completed")
        tokens = body.get("max_new_tokens", 256)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= 1024:
            return error(400, "max_new_tokens is a whole number from 1 to 1024")
        try:
            messages = checked_messages(body)
            run = engine.load(folder)
        except UserInputError as exc:
            return error(400, str(exc))
        except (OSError, ValueError) as exc:  # a run folder whose model files cannot be read
            return error(400, f"cannot load run `{name}`: {str(exc).splitlines()[0] if str(exc) else exc!r}")
        reply = redacted(engine.stream(run, messages, tokens), app.state.secrets())
        return StreamingResponse(reply, media_type="text/plain; charset=utf-8", headers={"Cache-Control": "no-store"})
