"""The prompt guard: built-in secret shapes and the configurable prompt hook (a real child process)."""

from __future__ import annotations

import sys

import anyio
import pytest

from dsh.agent_loop import PromptGuard, mask_secrets, secret_shape
from dsh.agent_loop.guard import CONFIGURED_KEY, HOOK_FAILED, HOOK_TIMED_OUT
from tests import canaries

pytestmark = pytest.mark.anyio

SK = "prompt contains what looks like a secret (sk-…); not sent"
AWS = "prompt contains what looks like a secret (AKIA…); not sent"
PEM = "prompt contains what looks like a secret (-----BEGIN … PRIVATE KEY-----); not sent"


@pytest.mark.parametrize(
    ("prompt", "reason"),
    [
        (f"use {canaries.API_KEY}", SK),
        ("sk-" + "a" * 20, SK),
        ("key=sk-proj-Ab3_dE-fGhIjKlMnOpQrStU", SK),
        ("sk-" + "a" * 19, None),
        ("the task-abcdefghijklmnopqrstuvwxyz is fine", None),
        ("AKIAIOSFODNN7EXAMPLE", AWS),
        ("creds AKIAIOSFODNN7EXAMPL here", None),  # 15 characters after AKIA
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE...", PEM),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", PEM),
        ("-----BEGIN PRIVATE KEY-----", PEM),
        ("-----BEGIN ENCRYPTED PRIVATE KEY-----", PEM),
        ("-----BEGIN PUBLIC KEY-----", None),
        ("nothing secret here", None),
    ],
)
async def test_builtin_secret_shapes(prompt, reason):
    assert await PromptGuard().check(prompt) == reason


def test_the_reason_and_the_masked_prompt_never_hold_the_value():
    prompt = f"a {canaries.API_KEY} b AKIAIOSFODNN7EXAMPLE c"
    assert secret_shape(prompt) == "sk-…"
    masked = mask_secrets(prompt)
    assert masked == "a sk-… b AKIA… c"


async def test_the_check_can_be_switched_off():
    assert await PromptGuard(check_secrets=False).check(canaries.API_KEY) is None


async def test_a_hook_vetoes_with_its_first_stdout_line(tmp_path):
    guard = PromptGuard(hook_command='read line; echo "refused: $line"; echo more; exit 1')
    assert await guard.check("drop the table\nsecond", cwd=tmp_path) == "refused: drop the table"


async def test_a_hook_that_exits_zero_allows(tmp_path):
    assert await PromptGuard(hook_command="cat >/dev/null").check("hello", cwd=tmp_path) is None


async def test_a_hook_reason_is_bounded_cleaned_and_masked(tmp_path):
    long_hook = PromptGuard(hook_command="printf 'x%.0s' $(seq 500); exit 2")
    reason = await long_hook.check("p", cwd=tmp_path)
    assert reason == "x" * 199 + "…"
    noisy = PromptGuard(hook_command=f"printf '\\033[31mred\\033[0m {canaries.API_KEY}\\n'; exit 2")
    assert await noisy.check("p", cwd=tmp_path) == "[31mred[0m sk-***"


async def test_a_silent_veto_names_the_exit_code(tmp_path):
    assert await PromptGuard(hook_command="exit 3").check("p", cwd=tmp_path) == (
        "prompt hook vetoed the prompt (exit code 3)")


@pytest.mark.parametrize(
    "hook",
    [
        ["/nonexistent/dsh-hook"],
        "no-such-command-dsh-hook",
        "kill -KILL $$",
        [sys.executable, "-c", "import os; os.abort()"],
    ],
)
async def test_a_hook_that_cannot_run_rejects_with_a_fixed_reason(tmp_path, hook):
    assert await PromptGuard(hook_command=hook).check("p", cwd=tmp_path) == HOOK_FAILED


async def test_a_hook_that_hangs_times_out(tmp_path):
    guard = PromptGuard(hook_command="sleep 30", hook_timeout=0.3)
    with anyio.fail_after(10):
        assert await guard.check("p", cwd=tmp_path) == HOOK_TIMED_OUT


async def test_a_hook_that_ignores_a_large_prompt_still_decides(tmp_path):
    guard = PromptGuard(hook_command="exit 0")
    with anyio.fail_after(10):
        assert await guard.check("x" * 2_000_000, cwd=tmp_path) is None


async def test_the_hook_gets_no_api_key(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", canaries.API_KEY)
    guard = PromptGuard(hook_command='echo "key=[$DEEPSEEK_API_KEY]"; exit 1')
    assert await guard.check("p", cwd=tmp_path) == "key=[]"


async def test_the_configured_key_is_refused_verbatim_whatever_its_shape() -> None:
    guard = PromptGuard(api_key="plain-key-without-shape-42")
    assert await guard.check("use plain-key-without-shape-42 please") == CONFIGURED_KEY
    assert guard.mask("use plain-key-without-shape-42 please") == "use *** please"
    assert await guard.check("no key here") is None
