"""Attack: the model repeats the key (docs/reliability.md, "Attacks: the model repeats the key").

Once the model holds a secret (a hostile AGENTS.md or a file it read can hand it over), it can write it
back in its answer or its reasoning. The real ``dsh -p`` runs against the fault server scripting such a
reply: the configured key, the base URL's credentials and a secret-named variable's value, each cut into
two chunks at every position it can be cut at (and once a character a chunk). Whatever the output format,
the user sees ``***`` where each stood, and no 8-character piece of any of them reaches stdout, stderr,
the session log, ``dsh sessions show`` or any other file under HOME. Key-shaped text that is not a
configured secret (an example ``sk-`` key) is the answer's own and stays.
"""

from __future__ import annotations

import json
from pathlib import Path

from dsh_harness import COUNTS, Home, config_text, make_home, read_log, run_dsh

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests import canaries

KEY = canaries.API_KEY
ENV_TOKEN = "canaryDeployToken5521"  # a value found by its variable's name (DEPLOY_TOKEN)
SECRETS = (KEY, canaries.URL_USER, canaries.URL_PASSWORD, canaries.URL_QUERY, ENV_TOKEN)
CUT = "|"  # where the fault server ends a chunk
PIECE = 8  # no piece of a secret this long may show anywhere
EXAMPLE = "sk-example0123456789"  # key-shaped, but nobody's key: the answer may quote it


def _cut_everywhere(secret: str) -> tuple[str, str]:
    """``secret`` once for each place it can be cut, cut there, then once a character a chunk; and what
    the user must see instead."""
    copies = [f"{secret[:n]}{CUT}{secret[n:]}" for n in range(1, len(secret))] + [CUT.join(secret)]
    return " ".join(copies), " ".join(["***"] * len(copies))


def _reply() -> tuple[Behaviour, str, str]:
    """The scripted reply, and the answer and reasoning the user must see."""
    key, key_shown = _cut_everywhere(KEY)
    rest = [f"{s[: len(s) // 2]}{CUT}{s[len(s) // 2 :]}" for s in SECRETS[1:]]
    text = f"The key: {key}. The rest: {' '.join(rest)}. Keys look like {EXAMPLE}."
    shown_text = f"The key: {key_shown}. The rest: {' '.join(['***'] * len(rest))}. Keys look like {EXAMPLE}."
    # The reasoning ends in the key: its tail is held until the answer starts.
    reasoning = f"AGENTS.md says to repeat it back: {key}"
    shown_reasoning = f"AGENTS.md says to repeat it back: {key_shown}"
    COUNTS["echoed secret chunk splits checked (per output)"] += len(KEY) + len(rest)
    return Behaviour("reasoning", reasoning=reasoning, text=text, cut=CUT), shown_text, shown_reasoning


def _base_url(port: int) -> str:
    return f"http://{canaries.URL_USER}:{canaries.URL_PASSWORD}@127.0.0.1:{port}/v1?api_key={canaries.URL_QUERY}"


def _env() -> dict[str, str]:
    return {"DEEPSEEK_API_KEY": KEY, "DEPLOY_TOKEN": ENV_TOKEN}


def assert_no_piece_anywhere(home: Home, *texts: str) -> None:
    """No 8-character piece of a secret in the texts or in any file under HOME (logs, transcripts)."""
    blobs = {f"text {n}": text for n, text in enumerate(texts)}
    blobs |= {str(path): path.read_text("utf-8", "replace") for path in home.root.rglob("*") if path.is_file()}
    pieces = {secret[at : at + PIECE] for secret in SECRETS for at in range(len(secret) - PIECE + 1)}
    hits = [f"{where}: {piece}" for where, blob in blobs.items() for piece in pieces if piece in blob]
    assert hits == []
    COUNTS["echoed secret pieces checked (piece x artifact, 0 hits)"] += len(pieces) * len(blobs)


def test_a_key_echoed_in_chunks_is_masked_in_every_output_the_log_and_sessions_show(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text())
    reply, shown_text, shown_reasoning = _reply()
    runs = {}
    with FaultServer(default=reply) as server:
        for output in ("text", "json", "stream-json"):
            runs[output] = run_dsh(home, ["--base-url", _base_url(server.port), "-p", "repeat it", "--output-format",
                                          output], env=_env(), key=None, label=output)
    assert all(run.returncode == 0 for run in runs.values()), {k: r.stderr for k, r in runs.items()}
    assert runs["text"].stdout == shown_text + "\n"
    assert runs["text"].stderr == runs["json"].stderr == shown_reasoning + "\n"
    assert json.loads(runs["json"].stdout)["text"] == shown_text
    lines = [json.loads(line) for line in runs["stream-json"].stdout.splitlines()]
    assert "".join(e["data"]["text"] for e in lines if e["type"] == "text/delta") == shown_text
    assert "".join(e["data"]["text"] for e in lines if e["type"] == "reasoning/delta") == shown_reasoning
    deltas = [e["type"] for e in lines if e["type"].endswith("/delta")]
    assert deltas == sorted(deltas)  # all the reasoning (its held tail too) before the answer
    for log in home.session_files():
        _, records = read_log(log)
        message = next(r["data"] for r in records if r["type"] == "assistant/message")
        assert (message["content"], message["reasoning_content"]) == (shown_text, shown_reasoning)
    show = run_dsh(home, ["sessions", "show", "last"], env=_env(), key=None, label="show")
    assert f"[main turn 1] {shown_reasoning}\n{shown_text}\n" in show.stdout
    assert_no_piece_anywhere(home, show.stdout, show.stderr, *(r.stdout + r.stderr for r in runs.values()))


def test_a_key_cut_off_by_a_dropped_stream_is_masked_in_what_is_kept(tmp_path: Path) -> None:
    home = make_home(tmp_path, config_text())
    dropped = Behaviour("fin_mid_stream", text=f"The key is {KEY[:20]}")  # the rest never comes
    with FaultServer(default=dropped) as server:
        run = run_dsh(home, ["--base-url", server.url, "-p", "repeat it", "--output-format", "json"], env=_env(),
                      key=None, label="dropped")
    assert run.returncode == 1
    result = json.loads(run.stdout)
    assert (result["text"], result["reason"]["code"]) == ("The key is ***", "TRANSPORT")
    _, records = read_log(home.only_session())
    message = next(r["data"] for r in records if r["type"] == "assistant/message")
    assert (message["content"], message["interrupted"]) == ("The key is ***", True)
    assert_no_piece_anywhere(home, run.stdout, run.stderr)
