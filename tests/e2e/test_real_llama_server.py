"""dsh against a real llama.cpp ``llama-server``, run as a user runs it: ``dsh -p``, piped stdin with
``/cost``, ``dsh doctor``. What a user relies on: a streamed answer comes through, a prompt over the server's
context is CONTEXT_WINDOW_EXCEEDED with llama.cpp named and /compact's fix, doctor reads ``GET /props`` n_ctx and
says when dsh's fixed prefix does not fit, and the usage llama-server sends is counted (docs/endpoints.md, "Local
servers: context size, usage, silence").

The server is the binary ``DSH_LLAMA_SERVER`` names, else ``llama-server`` on PATH, on 127.0.0.1 with a port the OS
picks. Without one the module skips with the line saying how to build it, under CI=true too: the build takes
longer than CI machines can afford, so this test is exempt from tests/real_parts.missing (docs/endpoints.md,
"A real llama-server").

The model is written here with the ``gguf`` package: a llama-architecture model a few hundred kB in size, with a
byte-fallback tokenizer, a ChatML template and random layer weights, small enough that what reaches the output
is mostly the last token's embedding. The embeddings and output rows make it a bigram model in disguise: the
template's last token is followed by ``Hello``, ``Hello`` by `` world`` and `` world`` by ``<|im_end|>``, so the
answer is known whatever the sampler.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dsh.agent_loop.reasons import Failed
from dsh.agent_loop.usage import UsageTally
from dsh.llm import ErrorCode
from dsh.llm.events import Usage
from dsh.llm.network import FailureDetail
from dsh.repl.config import load_config
from dsh.repl.doctor_environment import FIX_CONTEXT_SIZE, prefix_estimate
from dsh.repl.doctor_report import FAIL, PASS, Step
from dsh.repl.turn_end import fix_line, turn_end_line
from dsh.repl.usage import cache_split_lines, usage_line
from tests.reliability.dsh_harness import Home, Run, config_text, make_home, run_dsh
from tests.server_process import LoggedServer
from tests.waiting import PROMPTLY

pytestmark = pytest.mark.slow

BUILD = ("no llama-server: build it from llama.cpp's source (pip download --no-binary :all: --no-deps "
         "llama-cpp-python; in its vendor/llama.cpp: cmake -B build -DLLAMA_USE_PREBUILT_UI=OFF && cmake --build build "
         "--target llama-server) "
         "and set DSH_LLAMA_SERVER=<that dir>/build/bin/llama-server")
MODEL = "tiny-llama"  # the server's --alias: what GET /v1/models lists and dsh sends
ANSWER = "Hello world"
WIDE, NARROW = 8192, 256  # the two servers' --ctx-size: dsh's prefix fits the first, not the second
FLAG = "--ctx-size (-c) of llama-server"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') "
          "+ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
_LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)")
_START_TIMEOUT = 6 * PROMPTLY  # loading a model of a few hundred kB; seconds on a busy machine
_RUN_TIMEOUT = 12 * PROMPTLY  # one dsh run: a Python start (5-7 s when busy) and a prompt of a few thousand tokens


def llama_server_binary() -> Path | None:
    """``DSH_LLAMA_SERVER``, else ``llama-server`` on PATH, else None."""
    named = os.environ.get("DSH_LLAMA_SERVER")
    if named and not os.access(named, os.X_OK):
        pytest.fail(f"DSH_LLAMA_SERVER={named} is not an executable file", pytrace=False)
    found = named or shutil.which("llama-server")
    return Path(found) if found else None


LLAMA_SERVER = llama_server_binary()
if LLAMA_SERVER is None:  # CI=true too: the build is exempt from tests/real_parts.missing (module docstring)
    pytest.skip(BUILD, allow_module_level=True)
gguf: Any = pytest.importorskip("gguf", reason="the test writes its model with the gguf package: pip install gguf")
np: Any = pytest.importorskip("numpy")  # gguf's own dependency


# --- the model ----------------------------------------------------------------------------------------------------


EMBED, LAYERS, HEADS, FEED_FORWARD = 64, 2, 4, 128
# The vocabulary: control tokens, the 256 byte tokens every text falls back to (so a prompt costs about a token a
# byte: dsh's system prompt alone is over a thousand), and the two words of the answer, which no merge reaches.
TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", *(f"<0x{b:02X}>" for b in range(256)), "Hello",
          "\u2581world"]


def _weights() -> dict[str, Any]:
    """Each tensor by its GGUF name: small random layers, and the bigram read-out (the module's doc)."""
    rng = np.random.default_rng(43)

    def noise(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.01).astype(np.float32)

    hello, world, end = TOKENS.index("Hello"), TOKENS.index("\u2581world"), TOKENS.index("<|im_end|>")
    embeddings = noise(len(TOKENS), EMBED)  # every token points along axis 0 but Hello (axis 1) and world (2)
    embeddings[:, 0] = 1.0
    embeddings[[hello, world], 0] = 0.0
    embeddings[hello, 1] = embeddings[world, 2] = 1.0
    read_out = noise(len(TOKENS), EMBED)  # axis 0 -> Hello, axis 1 -> world, axis 2 -> the end of the turn
    read_out[hello, 0] = read_out[world, 1] = read_out[end, 2] = 4.0
    weights = {"token_embd.weight": embeddings, "output_norm.weight": np.ones(EMBED, np.float32),
               "output.weight": read_out}
    for layer in range(LAYERS):
        block = f"blk.{layer}."
        weights |= {block + "attn_norm.weight": np.ones(EMBED, np.float32),
                    block + "ffn_norm.weight": np.ones(EMBED, np.float32)}
        weights |= {f"{block}{name}.weight": noise(EMBED, EMBED)
                    for name in ("attn_q", "attn_k", "attn_v", "attn_output")}
        weights |= {block + "ffn_gate.weight": noise(FEED_FORWARD, EMBED),
                    block + "ffn_up.weight": noise(FEED_FORWARD, EMBED),
                    block + "ffn_down.weight": noise(EMBED, FEED_FORWARD)}
    return weights


def write_tiny_model(path: Path) -> None:
    """A llama model that answers ``Hello world`` to any chat (the module's doc), all F32, about 470 kB."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("dsh-test-tiny")
    writer.add_context_length(WIDE)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")  # SentencePiece, byte fallback
    writer.add_token_list(TOKENS)
    writer.add_token_scores([0.0] * len(TOKENS))
    kind = gguf.TokenType
    writer.add_token_types([kind.UNKNOWN, *[kind.CONTROL] * 4, *[kind.BYTE] * 256, kind.NORMAL, kind.NORMAL])
    writer.add_bos_token_id(TOKENS.index("<s>"))
    writer.add_eos_token_id(TOKENS.index("<|im_end|>"))
    writer.add_unk_token_id(TOKENS.index("<unk>"))
    writer.add_chat_template(CHATML)
    for name, tensor in _weights().items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# --- the server ---------------------------------------------------------------------------------------------------


class LlamaServer(LoggedServer):
    """One ``llama-server`` process on 127.0.0.1 serving ``model`` with ``context`` tokens; its log in ``directory``."""

    name = "llama-server"
    listening = _LISTENING
    start_timeout = _START_TIMEOUT

    def __init__(self, binary: Path, model: Path, context: int, directory: Path) -> None:
        super().__init__(directory, "llama-server.log")
        self.argv = [str(binary), "--model", str(model), "--alias", MODEL, "--host", "127.0.0.1", "--port", "0",
                     "--ctx-size", str(context), "--parallel", "1", "--threads", "1", "--no-webui"]

    def start(self) -> LlamaServer:
        self.launch(self.argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.directory),
                                "LANG": "C.UTF-8"})
        return self

    def ready(self) -> bool:
        """The model is loaded."""
        try:
            return httpx.get(f"{self.url}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def get(self, path: str) -> Any:
        answer = httpx.get(f"{self.url}{path}", timeout=PROMPTLY)
        answer.raise_for_status()
        return answer.json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """The server's JSON answer to ``body`` at ``path`` (its own endpoints: /tokenize, /apply-template)."""
        answer = httpx.post(f"{self.url}{path}", json=body, timeout=PROMPTLY)
        answer.raise_for_status()
        return answer.json()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny-llama.gguf"
    write_tiny_model(path)
    return path


def _serve(model: Path, context: int, directory: Path) -> Iterator[LlamaServer]:
    assert LLAMA_SERVER is not None
    server = LlamaServer(LLAMA_SERVER, model, context, directory).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def wide(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A server whose context holds dsh's prefix and a short conversation."""
    yield from _serve(tiny_model, WIDE, tmp_path_factory.mktemp("wide"))


@pytest.fixture(scope="module")
def narrow(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A server whose context is smaller than dsh's fixed prefix (``--ctx-size 256``)."""
    yield from _serve(tiny_model, NARROW, tmp_path_factory.mktemp("narrow"))


# --- running dsh --------------------------------------------------------------------------------------------------


def against(server: LlamaServer, home: Home, *args: str, lines: list[str] | None = None) -> Run:
    return run_dsh(home, args, lines, env={"DEEPSEEK_BASE_URL": f"{server.url}/v1"}, label="llama",
                   timeout=_RUN_TIMEOUT)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return make_home(tmp_path, config_text(idle=_RUN_TIMEOUT, first_token=_RUN_TIMEOUT))


@dataclass(frozen=True)
class Exchange:
    """One recorded chat request (``--record``): the body dsh sent, the status and the body's text."""

    request: dict[str, Any]
    status: int
    text: str

    def events(self) -> list[dict[str, Any]]:
        """The stream's JSON events, ``[DONE]`` aside."""
        payloads = [line.removeprefix("data: ") for line in self.text.splitlines() if line.startswith("data: ")]
        return [json.loads(payload) for payload in payloads if payload != "[DONE]"]


def chat_exchanges(trace: Path) -> list[Exchange]:
    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    chats = {r["n"]: r["body"] for r in records if r["type"] == "request" and r["path"].endswith("/chat/completions")}
    status = {r["n"]: r["status"] for r in records if r["type"] == "response"}
    text = {n: "".join(r.get("text", "") for r in records if r["type"] == "data" and r["n"] == n) for n in chats}
    return [Exchange(body if isinstance(body, dict) else json.loads(body), status[n], text[n])
            for n, body in chats.items()]


# --- what a user relies on ----------------------------------------------------------------------------------------


def test_a_streamed_turn_completes_with_the_models_answer(wide: LlamaServer, home: Home) -> None:
    trace = home.root / "trace.jsonl"
    run = against(wide, home, "-p", "hi", "--model", MODEL, "--record", str(trace))
    assert (run.returncode, run.stdout, run.stderr) == (0, ANSWER + "\n", "")
    (exchange,) = chat_exchanges(trace)
    assert exchange.request["stream"] is True and exchange.status == 200
    deltas = [choice["delta"].get("content") for event in exchange.events() for choice in event["choices"]]
    assert "".join(delta for delta in deltas if delta) == ANSWER
    assert len([delta for delta in deltas if delta]) > 1  # streamed: the answer came in more than one event


def test_the_usage_llama_server_sends_is_counted(wide: LlamaServer, home: Home) -> None:
    trace = home.root / "trace.jsonl"
    run = against(wide, home, "-p", "hi", "--model", MODEL, "--output-format", "json", "--record", str(trace))
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    (exchange,) = chat_exchanges(trace)
    (sent,) = [event["usage"] for event in exchange.events() if event.get("usage")]
    # The server's own count of the prompt dsh sent: its template applied, then tokenized as the server does.
    prompt = wide.post("/apply-template", {k: v for k, v in exchange.request.items() if k in ("messages", "tools")})
    tokens = wide.post("/tokenize", {"content": prompt["prompt"], "add_special": True, "parse_special": True})
    assert sent["prompt_tokens"] == len(tokens["tokens"])
    assert result["text"] == ANSWER
    assert result["usage"]["requests"] == 1
    cached = sent["prompt_tokens_details"]["cached_tokens"]  # this server's cache: what earlier tests sent
    assert (result["usage"]["prompt_tokens"], result["usage"]["cached_tokens"], result["usage"]["output_tokens"]) == (
        sent["prompt_tokens"], cached, sent["completion_tokens"])
    assert result["cache_hit_rate"] == round(cached / sent["prompt_tokens"], 4)
    assert sent["completion_tokens"] == 3  # Hello, world and <|im_end|>: the model's three tokens
    assert result["cost_usd"] is None  # a local model has no price: unknown, never $0


def test_cost_counts_the_request_and_its_tokens(wide: LlamaServer, home: Home) -> None:
    trace = home.root / "trace.jsonl"
    run = against(wide, home, "--model", MODEL, "--record", str(trace), lines=["hi", "/cost"])
    assert run.returncode == 0, run.stderr
    (exchange,) = chat_exchanges(trace)
    (sent,) = [event["usage"] for event in exchange.events() if event.get("usage")]
    cached = sent["prompt_tokens_details"]["cached_tokens"]
    # What /cost sums, from what the server sent; the context fill is counted against its --ctx-size (GET /props).
    tally = UsageTally(window=WIDE)
    tally.add(Usage(sent["prompt_tokens"], sent["completion_tokens"], sent["total_tokens"], cached,
                    sent["prompt_tokens"] - cached), MODEL, None, datetime.datetime.now(datetime.UTC))
    assert run.stdout.splitlines() == [
        f"[main turn 1] {ANSWER}",
        f"1 request: {usage_line(tally)}",
        *cache_split_lines(tally),
        f'no price known for {MODEL}: set [models."{MODEL}"] prices in config.toml',
    ]
    assert " · context " in usage_line(tally)  # known: the server said its size


def overflow(server: LlamaServer, home: Home, prompt: str) -> tuple[Run, dict[str, Any], list[str]]:
    """``dsh -p prompt`` against a server whose context it overflows: the run, the server's error object as it
    came over the wire (``--record``), and the last two lines that answer derives from: the turn-end line and its
    fix, as repl/turn_end.py words them for llama.cpp's 400."""
    trace = home.root / "trace.jsonl"
    run = against(server, home, "-p", prompt, "--model", MODEL, "--record", str(trace))
    (exchange,) = chat_exchanges(trace)
    error = json.loads(exchange.text)["error"]
    assert (exchange.status, error["type"]) == (400, "exceed_context_size_error")
    reason = Failed(code=ErrorCode.CONTEXT_WINDOW_EXCEEDED, message=error["message"], status=400,
                    detail=FailureDetail.NOTHING_TO_COMPACT, endpoint=f"{server.url}/v1", endpoint_name="llama.cpp")
    expected = [turn_end_line(reason), fix_line(reason)]
    assert expected[0] is not None and expected[0].startswith("[turn failed CONTEXT_WINDOW_EXCEEDED] llama.cpp: ")
    return run, error, [line for line in expected if line is not None]


def test_dshs_own_prefix_over_a_small_context_is_a_context_window_failure(narrow: LlamaServer, home: Home) -> None:
    run, error, expected = overflow(narrow, home, "hi")
    assert (error["n_ctx"], run.returncode) == (NARROW, 1)
    assert error["n_prompt_tokens"] > NARROW
    # The first turn's line on the context size comes from a look beside the request (agent_loop/model_check.py):
    # before the failure's lines or, as a local server's 400 is quick, after them.
    lines = run.stderr.splitlines()
    (said,) = [line for line in lines if " tokens of context " in line]
    assert said.startswith(f"llama.cpp serves {NARROW} tokens of context (GET /props n_ctx); dsh's fixed prefix "
                           "(system prompt and tool specs) alone is about ")
    assert said.endswith(f" tokens: give it more with {FLAG}")
    assert [line for line in lines if line != said] == expected


def test_a_prompt_longer_than_the_context_is_a_context_window_failure(wide: LlamaServer, home: Home) -> None:
    run, error, expected = overflow(wide, home, "word " * WIDE)  # at least a token a word, whatever the tokenizer
    assert (error["n_ctx"], run.returncode) == (WIDE, 1)
    assert run.stderr.splitlines() == expected


def _context_lines(run: Run) -> list[str]:
    lines = run.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line[2:].startswith("context: "))
    return lines[start:start + 2]


def _prefix(server: LlamaServer, home: Home) -> int:
    """dsh's estimate of its fixed prefix for the configuration doctor runs with (repl/doctor_environment.py)."""
    env = {"DEEPSEEK_API_KEY": "sk-unused", "DEEPSEEK_BASE_URL": f"{server.url}/v1"}
    return prefix_estimate(load_config({"model": MODEL}, env, cwd=home.workspace,
                                       config_path=home.config_dir / "dsh" / "config.toml"))


def test_doctor_reads_props_and_says_the_prefix_does_not_fit(narrow: LlamaServer, home: Home) -> None:
    assert narrow.get("/props")["default_generation_settings"]["n_ctx"] == NARROW  # what doctor is to read
    run = against(narrow, home, "doctor", "--model", MODEL)
    prefix = _prefix(narrow, home)
    said = f"llama.cpp serves {NARROW} tokens of context (GET /props n_ctx)"
    step = Step("context", FAIL, f"{said}; dsh's fixed prefix (system prompt and tool specs) alone is about {prefix} "
                "tokens", FIX_CONTEXT_SIZE.format(prefix=prefix, flag=FLAG))
    assert run.returncode == 1
    assert prefix > NARROW
    assert _context_lines(run) == step.lines()


def test_doctor_passes_a_server_whose_context_holds_the_prefix(wide: LlamaServer, home: Home) -> None:
    run = against(wide, home, "doctor", "--model", MODEL)
    step = Step("context", PASS, f"llama.cpp serves {WIDE} tokens of context (GET /props n_ctx); dsh's fixed prefix "
                f"is about {_prefix(wide, home)} tokens")
    assert _context_lines(run)[:1] == step.lines()
    assert (run.returncode, run.stdout.splitlines()[-1]) == (0, "doctor: every step passed")
