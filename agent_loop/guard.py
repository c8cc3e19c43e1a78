"""The prompt guard: vetoes a prompt before any request is made (turn ends ``rejected``).

Three checks, in order:

1. The configured API key, verbatim, whatever its shape:
   ``prompt contains the configured API key; not sent``.
2. Built-in secret shapes: an ``sk-`` key (20 or more key characters), an AWS access key id
   (``AKIA`` + 16), a PEM private-key header. The reason names the masked *shape*, never the value:
   ``prompt contains what looks like a secret (sk-…); not sent``.
3. An optional prompt hook: a command (a shell string, or an argv list) that receives the prompt on
   stdin. Exit status 0 lets the prompt through; any other status vetoes it, and the first line of
   its stdout (bounded to 200 characters, control characters removed, secrets masked) is the reason.
   A hook that cannot run -- it does not start, times out, or dies by a signal -- rejects with a
   fixed reason, because a policy that cannot be checked must not be skipped silently.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dsh.agent_loop.tools.shell import run_command
from dsh.llm import redact_text
from dsh.llm.redact import MASK, MIN_SECRET_CHARS

__all__ = [
    "CONFIGURED_KEY",
    "HOOK_FAILED",
    "HOOK_TIMED_OUT",
    "REASON_LIMIT",
    "PromptGuard",
    "mask_secrets",
    "secret_shape",
]

REASON_LIMIT = 200
CONFIGURED_KEY = "prompt contains the configured API key; not sent"
HOOK_FAILED = "prompt hook could not run; not sent"
HOOK_TIMED_OUT = "prompt hook timed out; not sent"
_HOOK_OUTPUT_LIMIT = 16 * 1024


@dataclass(frozen=True, slots=True)
class _Shape:
    label: str  # the masked shape named in the reason
    pattern: re.Pattern[str]


_SHAPES: tuple[_Shape, ...] = (
    _Shape("sk-…", re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}")),
    _Shape("AKIA…", re.compile(r"(?<![A-Z0-9])AKIA[0-9A-Z]{16}(?![0-9A-Z])")),
    _Shape("-----BEGIN … PRIVATE KEY-----", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def secret_shape(prompt: str) -> str | None:
    """The masked shape of the first secret-looking thing in ``prompt``, or None."""
    for shape in _SHAPES:
        if shape.pattern.search(prompt):
            return shape.label
    return None


def mask_secrets(prompt: str) -> str:
    """``prompt`` with every secret-looking match replaced by its masked shape (safe to log)."""
    for shape in _SHAPES:
        prompt = shape.pattern.sub(shape.label, prompt)
    return prompt


def _clean_reason(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    first = text.splitlines()[0] if text.strip() else ""
    first = _CONTROL.sub("", first).strip()
    first = mask_secrets(redact_text(first))
    if len(first) > REASON_LIMIT:
        first = first[: REASON_LIMIT - 1] + "…"
    return first


class PromptGuard:
    """``await guard.check(prompt, cwd)`` -> the rejection reason, or None when the prompt may be sent
    (``checked``: with what the UserPromptSubmit hooks added for the model)."""

    def __init__(
        self,
        hook_command: str | Sequence[str] | None = None,
        *,
        hook_timeout: float = 10.0,
        check_secrets: bool = True,
        api_key: str | None = None,
        prompt_hooks: Callable[[str], Awaitable[tuple[str | None, str]]] | None = None,
    ) -> None:
        self.hook_command = hook_command
        self.prompt_hooks = prompt_hooks  # UserPromptSubmit hooks (agent_loop/hook_run.py; docs/hooks.md)
        self.hook_timeout = hook_timeout
        self.check_secrets = check_secrets
        self.api_key = api_key if api_key and len(api_key) >= MIN_SECRET_CHARS else None

    def mask(self, prompt: str) -> str:
        """``prompt`` as it may be logged: what the secret checks would refuse is masked."""
        if not self.check_secrets:
            return prompt
        if self.api_key is not None:
            prompt = prompt.replace(self.api_key, MASK)
        return mask_secrets(prompt)

    async def check(self, prompt: str, cwd: str | os.PathLike[str] | None = None) -> str | None:
        return (await self.checked(prompt, cwd))[0]

    async def checked(self, prompt: str, cwd: str | os.PathLike[str] | None = None) -> tuple[str | None, str]:
        """The rejection reason (or None), and what the ``UserPromptSubmit`` hooks added for the model."""
        if self.check_secrets:
            if self.api_key is not None and self.api_key in prompt:
                return CONFIGURED_KEY, ""
            shape = secret_shape(prompt)
            if shape is not None:
                return f"prompt contains what looks like a secret ({shape}); not sent", ""
        if self.hook_command and (reason := await self._run_hook(prompt, cwd)) is not None:
            return reason, ""
        return await self.prompt_hooks(prompt) if self.prompt_hooks is not None else (None, "")

    async def _run_hook(self, prompt: str, cwd: str | os.PathLike[str] | None) -> str | None:
        argv = ["/bin/sh", "-c", self.hook_command] if isinstance(self.hook_command, str) else list(
            self.hook_command or ()
        )
        try:
            result = await run_command(
                argv,
                cwd=cwd,
                input=prompt.encode("utf-8", "replace"),
                timeout=self.hook_timeout,
                output_limit=_HOOK_OUTPUT_LIMIT,
                merge_stderr=False,
            )
        except OSError:
            return HOOK_FAILED
        if result.timed_out:
            return HOOK_TIMED_OUT
        if result.signal is not None or result.exit_code is None:
            return HOOK_FAILED
        if result.exit_code == 0:
            return None
        if isinstance(self.hook_command, str) and result.exit_code in (126, 127):
            return HOOK_FAILED  # the shell could not find or execute the hook command
        return _clean_reason(result.output) or f"prompt hook vetoed the prompt (exit code {result.exit_code})"
