"""``@path`` mentions (agent_loop/mentions.py; docs/prompt.md): the exact text the model is sent for a prompt, and
the one line each for what was cut, masked or left out, on hostile trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh.agent_loop.mentions import FILE_CAP_BYTES, MAX_ENTRIES, expand_mentions, mentions_in
from dsh.llm.redact import Redactor

SECRET = "sk-mentionSecret0000000000000000"


def _expand(tree: Path, prompt: str, cwd: Path | None = None) -> tuple[str, list[str]]:
    expansion = expand_mentions(prompt, cwd=cwd or tree, root=tree, redactor=Redactor((SECRET,)))
    return expansion.text, expansion.notices


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 1\n")
    return root


def test_a_file_joins_the_prompt_as_a_fenced_block_with_its_path_and_line_count(tree: Path) -> None:
    text, notices = _expand(tree, "explain @src/app.py")

    assert text == "explain @src/app.py\n\n@src/app.py (2 lines):\n```\ndef main():\n    return 1\n```"
    assert notices == []


def test_a_directory_gives_its_listing(tree: Path) -> None:
    (tree / "src" / "lib").mkdir()
    text, _ = _expand(tree, "what is in @src/ ?")

    assert text == "what is in @src/ ?\n\n@src/ (directory, 2 entries):\n```\napp.py\nlib/\n```"


def test_what_is_not_a_mention_is_sent_as_typed(tree: Path) -> None:
    for prompt in ("mail me@example.com", "a@src/app.py", 'quote "@src/app.py"', "code `@src/app.py`",
                   "escaped \\@src/app.py", "no at sign"):
        assert _expand(tree, prompt) == (prompt, []), prompt
    assert mentions_in("see @a.py, @b/ and @a.py. @b/") == ["a.py", "b/", "a.py."]


def test_a_sentence_s_last_full_stop_is_not_part_of_the_path(tree: Path) -> None:
    text, notices = _expand(tree, "Read @src/app.py.")

    assert text.startswith("Read @src/app.py.\n\n@src/app.py (2 lines):\n")
    assert notices == []


def test_a_missing_mention_is_one_line_and_the_text_as_typed(tree: Path) -> None:
    assert _expand(tree, "fix @nope.py please") == ("fix @nope.py please", ["@nope.py: no such file in this tree"])


def test_nothing_outside_the_tree(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text(SECRET)
    (tree / "link").symlink_to(tmp_path / "outside.txt")
    (tree / "dirlink").symlink_to(tmp_path)
    prompt = "@../outside.txt @link @dirlink/outside.txt @/etc/passwd @../../../../../../etc/passwd"

    text, notices = _expand(tree, prompt)

    assert text == prompt
    assert notices == [
        "@../outside.txt: it is outside this tree",
        "@link: it is a symlink to a path outside this tree",
        "@dirlink/outside.txt: it is outside this tree",
        "@/etc/passwd: it is outside this tree",
        "@../../../../../../etc/passwd: it is outside this tree",
    ]


def test_a_fifo_is_never_opened(tree: Path) -> None:
    os.mkfifo(tree / "pipe")

    assert _expand(tree, "@pipe") == ("@pipe", ["@pipe: left out: it is a FIFO, not a regular file"])


def test_a_huge_file_is_cut_and_a_line_says_so(tree: Path) -> None:
    with open(tree / "big.log", "wb") as handle:  # 1 GiB, sparse: only the cap is read
        handle.write(b"line\n" * 20000)
        handle.truncate(1024 ** 3)

    text, notices = _expand(tree, "@big.log")

    assert notices == ["@big.log: cut at 64 KiB of 1.0 GiB (a mention sends at most 64 KiB, all of a "
                       "prompt's 256 KiB)"]
    header, _, body = text.partition("\n\n")[2].partition("\n")
    assert header == "@big.log (its first 13107 lines, cut at 64 KiB of 1.0 GiB):"
    assert body == "```\n" + "line\n" * 13107 + "```"
    assert len(body) < FILE_CAP_BYTES + 16


def test_secrets_are_masked_and_named_in_one_line(tree: Path) -> None:
    (tree / ".env").write_text(f"DEEPSEEK_API_KEY={SECRET}\n")

    text, notices = _expand(tree, "@.env")

    assert SECRET not in text
    assert text == "@.env\n\n@.env (1 line, secrets masked):\n```\nDEEPSEEK_API_KEY=***\n```"
    assert notices == ["@.env: sent with secrets masked (***)"]


def test_a_binary_file_is_left_out(tree: Path) -> None:
    (tree / "logo.bin").write_bytes(b"\x89PNG\x00\x01")

    assert _expand(tree, "@logo.bin")[1] == ["@logo.bin: left out: it is binary (it holds a NUL byte)"]


def test_hostile_names_and_contents_reach_the_model_escaped_not_raw(tree: Path) -> None:
    os.mkdir(tree / "odd")
    (tree / "odd" / "esc\x1b[31mred").write_text("x")
    (tree / "odd" / os.fsdecode(b"bad\xff")).write_text("x")
    (tree / "odd" / "fence.md").write_text("```\ninside\n````\n\udcff".encode("utf-8", "surrogateescape").decode(
        "utf-8", "replace"))

    listing, _ = _expand(tree, "@odd")
    fenced, _ = _expand(tree, "@odd/fence.md")

    assert listing == "@odd\n\n@odd (directory, 3 entries):\n```\nbad\ufffd\nesc\\u001b[31mred\nfence.md\n```"
    assert fenced.split("\n\n", 1)[1].startswith("@odd/fence.md (4 lines):\n`````\n```\ninside\n````\n")
    assert fenced.endswith("\n`````")
    assert _expand(tree, "lone \ud800 @src/app.py")[0].startswith("lone \ud800 @src/app.py\n\n@src/app.py")


def test_a_big_directory_is_listed_to_its_cap(tree: Path) -> None:
    many = tree / "many"
    many.mkdir()
    for index in range(MAX_ENTRIES + 5):
        (many / f"f{index:04d}").touch()

    text, notices = _expand(tree, "@many")

    assert notices == [f"@many: listing cut at {MAX_ENTRIES} entries"]
    assert f"@many (directory, {MAX_ENTRIES} entries, cut):" in text
    assert text.endswith(f"(more entries: the listing is cut at {MAX_ENTRIES})\n```")


def test_a_mention_from_a_subfolder_may_reach_up_inside_the_tree(tree: Path) -> None:
    (tree / "README.md").write_text("hello\n")

    text, notices = _expand(tree, "@../README.md", cwd=tree / "src")

    assert text.endswith("@../README.md (1 line):\n```\nhello\n```") and notices == []
