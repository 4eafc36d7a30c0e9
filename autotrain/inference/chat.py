"""`autotrain chat`: talk to a fine-tuned LLM through its chat template, the reply streamed as it is made.

Messages come from `--message` (each one a turn, then exit), from a terminal (a prompt; `/reset` starts
over, `/exit` or Ctrl-D ends) or from piped stdin (one message per line).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TextIO

from autotrain.errors import UserInputError
from autotrain.inference.bounds import EXIT_COMMANDS, checked_text, not_utf8
from autotrain.inference.generate import GenerationSettings

RESET_COMMAND = "/reset"


def typed_lines(stdin: TextIO) -> Iterator[str]:
    """Lines from a terminal (with a prompt and line editing) or from a pipe, until EOF."""
    interactive = stdin.isatty()
    raw = getattr(stdin, "buffer", None)  # a pipe is read as bytes, so a bad line is found as that line
    number = 0
    while True:
        number += 1
        try:
            line = input("> ") if interactive else _decoded(raw.readline(), number) if raw else stdin.readline()
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return
        except UnicodeDecodeError:
            raise UserInputError(not_utf8(f"stdin line {number}")) from None
        if not interactive and line == "":
            return
        yield checked_text(line.rstrip("\r\n"), f"stdin line {number}")


def _decoded(line: bytes, number: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        raise UserInputError(not_utf8(f"stdin line {number}")) from None


class Conversation:
    """The messages so far, and the prompt ids that fit in the run's `max_length`: the oldest exchanges are
    left out when the conversation outgrows it (the system message stays)."""

    def __init__(self, tokenizer, budget: int, system: str | None = None):
        self.tokenizer = tokenizer
        self.budget = budget
        self.start = [{"role": "system", "content": system}] if system else []
        self.messages = list(self.start)
        self.warned = False

    def reset(self) -> None:
        self.messages = list(self.start)

    def prompt_ids(self) -> list[int]:
        from autotrain.inference.bounds import clip_messages
        from autotrain.inference.generate import prompt_ids

        turns = self.messages[len(self.start) :]
        while True:
            messages = clip_messages(self.tokenizer, self.start + turns, self.budget)  # a huge line costs little
            ids = prompt_ids(self.tokenizer, messages, budget=None)
            if len(ids) <= self.budget or len(turns) <= 1:
                break
            turns = turns[2:]  # the oldest user message and the reply to it
            if not self.warned:
                note = f"note: the conversation outgrew max_length ({self.budget} tokens); older turns are left out"
                print(note, file=sys.stderr)
                self.warned = True
        return ids[-self.budget :]


def reply(run, conversation: Conversation, config) -> str:
    """Generate the assistant's answer, printing it token by token, and add it to the conversation."""
    from transformers import TextStreamer

    from autotrain.inference.generate import generate

    streamer = TextStreamer(run.processor, skip_prompt=True, skip_special_tokens=True)
    text = generate(run, [conversation.prompt_ids()], config, streamer=streamer)[0].strip()
    conversation.messages.append({"role": "assistant", "content": text})
    return text


def chat(run, settings: GenerationSettings, messages: Iterable[str], system: str | None = None) -> int:
    """Answer each message in turn; returns the number of replies."""
    from autotrain.inference.generate import generation_config

    if not run.processor.chat_template:
        raise UserInputError(
            f"the run in `{run.folder}` has no chat template (`data.chat_template: none`); "
            "use `autotrain predict` with plain-text prompts"
        )
    config = generation_config(settings, run.processor, run.model)
    conversation = Conversation(run.processor, run.max_tokens, system)
    replies = 0
    for number, message in enumerate(messages, 1):
        command = checked_text(message, f"message {number}").strip()
        if command in EXIT_COMMANDS:
            break
        if command == RESET_COMMAND:
            conversation.reset()
            print("(conversation cleared)", file=sys.stderr)
            continue
        if not command:
            continue
        conversation.messages.append({"role": "user", "content": message})
        reply(run, conversation, config)
        replies += 1
    return replies


def run_chat(
    run_dir,
    settings: GenerationSettings,
    messages: list[str] | None = None,
    system: str | None = None,
    device: str = "auto",
    stdin: TextIO | None = None,
    image=None,
) -> int:
    """The command: load the run, then chat with `messages`, or with what stdin brings (a vlm run: about
    `image`)."""
    from autotrain.inference.load import load_run, read_config

    cfg = read_config(run_dir)
    task = cfg.task
    if task not in ("llm", "vlm"):
        raise UserInputError(f"`{run_dir}` holds a {task} run; chat needs a run that generates text (task: llm, vlm)")
    if (task == "vlm") != (image is not None):
        raise UserInputError(
            f"`{run_dir}` holds a vlm run: give the image to talk about with --image PATH"
            if task == "vlm"
            else "--image is for vlm runs; this one is an llm run"
        )
    if task == "vlm":
        from datasets import Dataset

        from autotrain.data.images import check_images

        check_images(Dataset.from_dict({"image": [str(image)]}), "--image", "image")
    stdin = stdin or sys.stdin
    lines = None if messages else _stdin_messages(stdin)
    run = load_run(run_dir, device, cfg)
    if not messages and stdin.isatty():
        print(f"chatting with {run_dir} on {run.device}; /reset starts over, /exit (or Ctrl-D) ends", file=sys.stderr)
    if task == "vlm":
        from autotrain.inference.vlm import chat as about_image

        return about_image(run, str(image), settings, messages or lines)
    return chat(run, settings, messages or lines, system)


NOTHING_TO_SAY = (
    "no message to answer: stdin is not a terminal and brought none. Give one with -m TEXT (repeatable), pipe "
    "messages into stdin (one per line), or, in a container, start it with a terminal: docker run -it ..."
)


def _stdin_messages(stdin: TextIO | None) -> Iterator[str]:
    """The messages stdin brings. A terminal is prompted as they come; a pipe or file that holds none (a
    container started without -i reads an empty stdin, or none at all) is bad input, said before the model
    loads: otherwise the command printed nothing and exited 0."""
    import itertools

    if stdin is None:  # the process was started with its stdin closed
        raise UserInputError(NOTHING_TO_SAY)
    lines = typed_lines(stdin)
    if stdin.isatty():
        return lines
    blank = []
    for line in lines:  # blank lines are skipped by the chat anyway; the first message is what counts
        blank.append(line)
        if line.strip():
            return itertools.chain(blank, lines)
    raise UserInputError(NOTHING_TO_SAY)
