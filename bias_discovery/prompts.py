"""Prompt templates stored as plain files in `prompts/`, so researchers can read and edit them.

A template file holds chat messages, each introduced by a header line `=== system ===` or
`=== user ===`. Placeholders use `${name}` (string.Template): model text inserted into a
template is never re-parsed, so braces or dollar signs inside responses are harmless.
"""

from __future__ import annotations

import os
import re
import string
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .errors import ConfigError
from .llm.types import ChatMessage
from .resources import prompts_dir

_HEADER = re.compile(r"^=== (system|user|assistant) ===[ \t]*$", re.MULTILINE)


class PromptTemplate(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    messages: tuple[tuple[str, str], ...]
    """(role, template text) in order."""

    @property
    def placeholders(self) -> set[str]:
        names: set[str] = set()
        for _, text in self.messages:
            for match in string.Template.pattern.finditer(text):
                name = match.group("named") or match.group("braced")
                if name:
                    names.add(name)
        return names

    def render(self, **values: str) -> tuple[ChatMessage, ...]:
        """Fill every placeholder; a missing or unexpected value is a bug, so it raises."""
        missing = self.placeholders - values.keys()
        extra = values.keys() - self.placeholders
        if missing or extra:
            raise ConfigError(f"prompt {self.name!r}: missing values {sorted(missing)}, unexpected {sorted(extra)}")
        return tuple(
            ChatMessage(role=role, content=string.Template(text).substitute(values))  # type: ignore[arg-type]
            for role, text in self.messages
        )


def parse_prompt_file(path: Path) -> PromptTemplate:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from None
    headers = list(_HEADER.finditer(text))
    if not headers:
        raise ConfigError(f"{path}: no '=== system ===' or '=== user ===' header found")
    if text[: headers[0].start()].strip():
        raise ConfigError(f"{path}: text before the first '=== role ===' header")
    messages = []
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        body = text[header.end() : end].strip("\n")
        messages.append((header.group(1), body.strip()))
    return PromptTemplate(name=path.stem, messages=tuple(messages))


def shipped_prompts() -> list[str]:
    """Names of the prompt templates in `prompts/`."""
    return sorted(p.stem for p in prompts_dir().glob("*.txt"))


def is_prompt_path(name_or_path: str) -> bool:
    """A template given as a file path (it has a suffix or a directory part), not a shipped name."""
    candidate = Path(name_or_path).expanduser()
    return bool(candidate.suffix) or "/" in name_or_path or os.sep in name_or_path


@lru_cache(maxsize=64)
def load_prompt(name_or_path: str) -> PromptTemplate:
    """Load a shipped prompt by name (`judge_pairwise`) or any template file by path."""
    if is_prompt_path(name_or_path):
        candidate = Path(name_or_path).expanduser()
        if not candidate.is_file():
            raise ConfigError(
                f"prompt file {candidate} not found (a name without a suffix is a shipped prompt: "
                f"{', '.join(shipped_prompts())})"
            )
        return parse_prompt_file(candidate)
    path = prompts_dir() / f"{name_or_path}.txt"
    if not path.is_file():
        raise ConfigError(f"unknown prompt {name_or_path!r}; shipped prompts: {', '.join(shipped_prompts())}")
    return parse_prompt_file(path)
