"""``dsh --demo``: no key, no network, every failure on demand.

The fault server runs in-process on 127.0.0.1 and the real DeepSeek client talks to it over real
sockets, so each scenario walks the same httpx path a real endpoint would. A scenario is a setup
function run before every turn while it is selected: it scripts the server's next responses and
may pick the endpoint (the server, or a closed loopback port), the client's deadlines, the retry
budget, or alter the prompt. This list is also the manual failure-reproduction kit (README).

Other packages add scenarios with :func:`register_scenario` (subagent failure categories, say).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from dsh.agent_loop.retry import RetryPolicy
from dsh.agent_loop.subagent.extras import extra_installed
from dsh.llm import ChatRequest, DeepSeekClient, StreamEvent
from dsh.llm._version import install_line
from dsh.llm.client_settings import ClientSettings
from dsh.llm.deepseek import open_client
from dsh.llm.errors import HarnessError
from dsh.llm.exchange_ring import ExchangeRing
from dsh.llm.loopback.fault_server import Behaviour, FaultServer, closed_port
from dsh.repl.demo.delegation import demo_subagent_tables, register_demo_scenarios
from dsh.repl.demo.product_delegation import product_demo_tables, register_product_demo_scenarios

__all__ = [
    "CORE_SCENARIOS",
    "DEMO_FILE",
    "DEMO_FIRST_TOKEN_TIMEOUT",
    "SCENARIOS",
    "Demo",
    "DemoClient",
    "DemoTurn",
    "Scenario",
    "demo_retry_policy",
    "register_scenario",
    "start_demo",
]

DEMO_FIRST_TOKEN_TIMEOUT = 3.0  # the keep-alive stall scenario ends TIMEOUT after this
DEMO_IDLE_TIMEOUT = 120.0  # long enough to practise Ctrl-C on a stalled stream
# Backoff is shortened in the demo so that retried failures end in seconds, not half a minute.
class _RetrySettings(TypedDict):
    max_retries: int
    base_delay: float
    max_delay: float
    jitter: float
    retry_after_max: float


DEMO_RETRY: _RetrySettings = {"max_retries": 5, "base_delay": 0.1, "max_delay": 0.4, "jitter": 0.0,
                              "retry_after_max": 0.4}


def demo_retry_policy() -> RetryPolicy:
    return RetryPolicy(**DEMO_RETRY)


@dataclass
class DemoTurn:
    """What a scenario's setup may change for the coming turn."""

    prompt: str
    server: FaultServer
    endpoint: str = "server"  # "server", "refused" (a closed port), "plain_https" (https to the plain port), "tls"
    proxy: str | None = None  # a proxy URL for the turn's requests (the fault server playing one)
    first_token_timeout: float = DEMO_IDLE_TIMEOUT
    stream_idle_timeout: float = DEMO_IDLE_TIMEOUT
    retry: RetryPolicy = field(default_factory=demo_retry_policy)
    dialect: str | None = None  # "deepseek": the turn's endpoint speaks DeepSeek's extensions (None: by the host)
    extras: dict[str, Any] = field(default_factory=dict)  # free room for scenarios added by others
    # The turn fails with this before any request (a scenario whose extra is missing: not an answer, so -p exits 1).
    failure: HarnessError | None = None

    def push(self, *behaviours: Behaviour | str) -> None:
        """Queue behaviours for the next requests (then the default answers)."""
        self.server.push(*behaviours)

    def script(self, *behaviours: Behaviour | str) -> None:
        """The turn's requests get these behaviours in order; the last one answers every later request."""
        *head, last = behaviours
        self.server.default = Behaviour.coerce(last)
        self.push(*head)


Setup = Callable[[DemoTurn], None]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    setup: Setup
    expect: str | None = None  # a line (or line prefix) the scenario prints: pinned by the e2e tests
    cancel: bool = False  # the scenario waits for Ctrl-C
    extra: str | None = None  # the optional extra it needs (``acp``, ``claude``): /scenario marks it when missing

    def needs(self) -> str | None:
        """``needs the acp extra: pip install 'dsh-agent[acp]'`` when its extra is not installed, else None."""
        if self.extra is None or extra_installed(self.extra):
            return None
        return f"needs the {self.extra} extra: {install_line(self.extra)}"


SCENARIOS: dict[str, Scenario] = {}
CORE_SCENARIOS: tuple[str, ...] = ()  # the ones this module defines (others add theirs at import)


def register_scenario(
    name: str, summary: str, setup: Setup, *, expect: str | None = None, cancel: bool = False,
    extra: str | None = None,
) -> Scenario:
    """Add (or replace) a scenario; ``name`` is what ``/scenario NAME`` takes; ``extra``, the optional extra
    it needs to run (without it, its turn answers with the install line, and the listing says so)."""
    scenario = Scenario(name, summary, setup, expect, cancel, extra)
    SCENARIOS[name] = scenario
    return scenario


class DemoClient:
    """Streams through a real :class:`DeepSeekClient` for the endpoint the scenario picked."""

    secrets: tuple[str, ...] = ()  # no key, no credentials: nothing of the demo's to mask
    ring: ExchangeRing | None = None  # no failure capsule keeps the demo's exchanges
    trace_header: dict[str, Any] | None = None  # nor records them

    def __init__(self, server_url: str, refused_url: str) -> None:
        self.urls = {"server": server_url, "refused": refused_url}
        self.turn: DemoTurn | None = None
        self._clients: dict[tuple[str, float, float, str | None, str | None], DeepSeekClient] = {}

    @property
    def base_url_display(self) -> str:
        return self._client().base_url_display

    @property
    def dialect(self) -> str:
        return self._client().dialect

    def _client(self) -> DeepSeekClient:
        turn = self.turn
        key = (
            self.urls.get(turn.endpoint if turn else "server", self.urls["server"]),
            turn.first_token_timeout if turn else DEMO_IDLE_TIMEOUT,
            turn.stream_idle_timeout if turn else DEMO_IDLE_TIMEOUT,
            turn.proxy if turn else None,
            turn.dialect if turn else None,
        )
        client = self._clients.get(key)
        if client is None:
            client = open_client(ClientSettings(
                base_url=key[0], api_key=None, first_token_timeout=key[1], stream_idle_timeout=key[2],
                connect_timeout=5.0, proxy=key[3], trust_env=False, env={},  # loopback only: no proxy, OS trust
                dialect=key[4],
            ))
            self._clients[key] = client
        return client

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if self.turn is not None and self.turn.failure is not None:
            raise self.turn.failure
        async with contextlib.aclosing(self._client().stream(request)) as events:
            async for event in events:
                yield event

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class Demo:
    """The selected scenario, applied before each turn."""

    def __init__(self, server: FaultServer, client: DemoClient, retry: RetryPolicy, scenario: str = "text") -> None:
        self.server = server
        self.client = client
        self.retry = retry  # the policy object the agent holds; reset and adjusted per turn
        self.scenario = self.select(scenario)

    def select(self, name: str) -> Scenario:
        scenario = SCENARIOS.get(name.strip().lower())
        if scenario is None:
            raise KeyError(name)
        self.scenario = scenario
        return scenario

    @staticmethod
    def subagent_tables() -> dict[str, dict[str, Any]]:
        """The demo's ``[subagents.NAME]`` tables (a real child dsh, scripted faults, fake agents)."""
        return {**demo_subagent_tables(), **product_demo_tables()}

    def scenarios(self) -> list[tuple[str, str]]:
        """Each scenario's name and summary, for completion."""
        return [(scenario.name, scenario.summary) for scenario in SCENARIOS.values()]

    def listing(self) -> str:
        width = max(len(name) for name in SCENARIOS)
        lines = [f"{'*' if s is self.scenario else ' '} {s.name:<{width}}  {s.summary}{_needs(s)}"
                 for s in SCENARIOS.values()]
        lines.append("pick one with /scenario NAME; it applies to every turn until you pick another")
        return "\n".join(lines)

    def before_turn(self, prompt: str) -> str:
        """Reset the server script and the retry budget, run the scenario's setup; the prompt to send."""
        self.server.clear_script()  # leftovers of a cancelled multi-request scenario must not leak
        self.server.default = Behaviour("text")
        turn = DemoTurn(prompt=prompt, server=self.server)
        self.scenario.setup(turn)
        _adopt(self.retry, turn.retry)
        self.client.turn = turn
        return turn.prompt


def _adopt(retry: RetryPolicy, wanted: RetryPolicy) -> None:
    """The turn's retry settings (DEMO_RETRY's keys) on the policy object the agent holds."""
    retry.max_retries, retry.base_delay, retry.max_delay = wanted.max_retries, wanted.base_delay, wanted.max_delay
    retry.jitter, retry.retry_after_max = wanted.jitter, wanted.retry_after_max


def _needs(scenario: Scenario) -> str:
    needs = scenario.needs()
    return f" ({needs})" if needs else ""


# --- the catalogue ----------------------------------------------------------------------------------


def _default(*behaviours: Behaviour | str) -> Setup:
    """Every request of the turn gets these behaviours in order, the last one repeating."""

    def setup(turn: DemoTurn) -> None:
        turn.script(*behaviours)

    return setup


_HELLO = "Hello from the dsh demo! This text streamed from a real HTTP server on 127.0.0.1.\n"


def _text(turn: DemoTurn) -> None:
    turn.server.default = Behaviour("slow_text", text=_HELLO, delay=0.01)


def _reasoning(turn: DemoTurn) -> None:
    turn.server.default = Behaviour(
        "reasoning",
        reasoning="The user wants to see reasoning. It streams first, dim on a terminal.",
        text="And this is the answer, in normal type.\n",
    )


def _tool_call(turn: DemoTurn) -> None:
    turn.push(Behaviour("tool_call", id="call_demo_1", name="list_dir", arguments='{"path": "."}',
                        reasoning="Let me look at the working directory."))
    turn.server.default = Behaviour(
        "text", text="That was a real tool round trip: the model asked for list_dir, dsh ran it, "
        "and the result went back in the next request.\n"
    )


def _shell_approval(turn: DemoTurn) -> None:
    turn.push(Behaviour("tool_call", id="call_demo_2", name="run_shell",
                        arguments='{"command": "echo hello from run_shell"}', reasoning="Run a harmless command."))
    turn.server.default = Behaviour("text", text="The shell tool asked you first; your answer went to the model.\n")


DEMO_FILE = "dsh-demo.txt"  # what the write-file and edit-file scenarios change, in the working directory
_DEMO_CONTENT = "Hello from the dsh demo.\nThis file was written by the write_file tool.\n"


def _write_file(turn: DemoTurn) -> None:
    arguments = json.dumps({"path": DEMO_FILE, "content": _DEMO_CONTENT})
    turn.push(Behaviour("tool_call", id="call_demo_3", name="write_file", arguments=arguments,
                        reasoning="Create a small file; the user sees the diff first."))
    turn.server.default = Behaviour("text", text=f"write_file asked before it touched {DEMO_FILE}; "
                                    "the model sees what happened.\n")


def _edit_file(turn: DemoTurn) -> None:
    edit = {"path": DEMO_FILE, "old_string": "Hello from the dsh demo.",
            "new_string": "Hello again: edit_file changed this line."}
    turn.push(Behaviour("tool_call", id="call_demo_4", name="read_file", arguments=json.dumps({"path": DEMO_FILE}),
                        reasoning="Read the file before changing it."),
              Behaviour("tool_call", id="call_demo_5", name="edit_file", arguments=json.dumps(edit),
                        reasoning="Now change its first line."))
    turn.server.default = Behaviour("text", text="edit_file asked before it changed one exact line; "
                                    "the model sees what happened.\n")


def _refused(turn: DemoTurn) -> None:
    turn.endpoint = "refused"


def _plain_http(turn: DemoTurn) -> None:
    turn.endpoint = "plain_https"


def _bad_cert(turn: DemoTurn) -> None:
    turn.endpoint = "tls"


def _demo_proxy(turn: DemoTurn) -> str:
    # The fault server plays the proxy; the password is a demo one, masked like any proxy credential.
    return f"http://demo:demoProxyPassword@127.0.0.1:{turn.server.port}"


def _proxy_407(turn: DemoTurn) -> None:
    turn.proxy = _demo_proxy(turn)
    turn.script("proxy_407")


def _proxy_503(turn: DemoTurn) -> None:
    turn.proxy = _demo_proxy(turn)
    turn.script("proxy_503")


def _keepalive_stall(turn: DemoTurn) -> None:
    turn.server.default = Behaviour("keepalive_only", interval=0.5)
    turn.first_token_timeout = DEMO_FIRST_TOKEN_TIMEOUT  # and retried once only, whatever the policy


def _no_headers(turn: DemoTurn) -> None:
    turn.server.default = Behaviour("stall_before_headers")
    turn.first_token_timeout = turn.stream_idle_timeout = DEMO_FIRST_TOKEN_TIMEOUT
    turn.retry.max_retries = 0  # one deadline is enough to see it


def _prompt_rejected(turn: DemoTurn) -> None:
    # A fake key (not a real one) appended to the prompt: the built-in guard refuses to send it.
    turn.prompt = f"{turn.prompt} sk-demoNotARealKey0123456789abcdef"


_CACHE_TURNS: dict[int, int] = {}  # the cache-drop scenario's turns so far, by demo server


def _cache_drop(turn: DemoTurn) -> None:
    # DeepSeek-shaped usage: 96% of the prompt from the cache on the first turn, 12% on the next, and so on.
    count = _CACHE_TURNS[id(turn.server)] = _CACHE_TURNS.get(id(turn.server), 0) + 1
    hit = 960 if count % 2 else 120
    text = ("The server reused 96% of this prompt from its cache; send another prompt.\n" if count % 2 else
            "This time the server's cache served 12%, though dsh sent the same prefix.\n")
    turn.server.default = Behaviour("text", text=text, usage={
        "prompt_tokens": 1000, "prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": 1000 - hit})


BUDGET_DEMO_CAP = 0.05  # US dollars: the budget-stop scenario's max_cost when none is configured (demo_config)


def _budget_stop(turn: DemoTurn) -> None:
    # 200k prompt tokens a request, all cache misses: $0.06 at deepseek-flash's peak prices, $0.03 off-peak, so a
    # $0.05 cap stops the turn before its second or third request, at $0.06 spent either way (agent_loop/budget.py).
    usage = {"prompt_tokens": 200_000, "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 200_000}
    turn.push(*[Behaviour("tool_call", id=f"call_budget_{n}", name="list_dir", arguments='{"path": "."}',
                          reasoning="Look once more.", usage=usage) for n in range(4)])
    turn.server.default = Behaviour("text", text="No cap held this session back: dsh --demo --scenario budget-stop "
                                    "sets one.\n", usage=usage)


CUT_ANSWER = ("A stream cut after its first words need not lose them: dsh asks the server to go on from the text "
              "already shown (prefix completion), and the answer arrives whole, once.\n")


def _cut_and_continue(turn: DemoTurn) -> None:
    # The loopback server plays DeepSeek's beta prefix completion: the cut request's text is the prefix, and the
    # continuation sends the rest of the same answer (agent_loop/continuation.py).
    turn.dialect = "deepseek"
    turn.push(Behaviour("reset_mid_stream", text=CUT_ANSWER[:54]))
    turn.server.default = Behaviour("text", text=CUT_ANSWER)


def _retry_then_success(turn: DemoTurn) -> None:
    turn.push("http_503")
    turn.server.default = Behaviour("text", text="This answer came on the second attempt.\n")


def _register_catalogue() -> None:
    """The core scenarios, in the order ``/scenario`` lists them."""
    _register_tools()
    _register_http()
    _register_connection()
    _register_stream()


def _register_tools() -> None:
    """Text, reasoning, and the tools' round trips and approvals."""
    add = register_scenario
    add("text", "plain streamed text", _text, expect="Hello from the dsh demo!")
    add("reasoning", "reasoning (dim on a terminal), then the answer", _reasoning,
        expect="And this is the answer, in normal type.")
    add("tool-call", "the model calls list_dir, dsh runs it, the model answers", _tool_call,
        expect='  [tool call] list_dir({"path": "."})')
    add("shell-approval", "the model wants to run a shell command: you answer y / n / a "
        "(piped, with no one to ask, it is denied)", _shell_approval,
        expect='  [tool call] run_shell({"command": "echo hello from run_shell"})')
    add("write-file", f"the model wants to create {DEMO_FILE} here: you see the diff and answer y / n / a "
        "(piped or -p, it is denied unless --allow-edits)", _write_file,
        expect='  [tool call] write_file({"path": "dsh-demo.txt", ')
    add("edit-file", f"the model reads {DEMO_FILE} (write-file creates it) and changes one line: the diff, "
        "then y / n / a", _edit_file, expect='  [tool call] edit_file({"path": "dsh-demo.txt", ')


def _register_http() -> None:
    """Each HTTP status the endpoint may answer, and a retry that succeeds."""
    add = register_scenario
    add("retry-then-success", "HTTP 503 once, then an answer (one retry line)", _retry_then_success,
        expect="[retry 1/5 in 0.1s] SERVER: Server Overloaded, please try again later")
    add("http-400", "HTTP 400 invalid request (not retried)", _default("http_400"),
        expect="[turn failed INVALID_REQUEST] The `reasoning_content` in the thinking mode must be passed "
        "back to the API.")
    add("http-400-context", "HTTP 400 context window exceeded, with the fix line", _default("http_400_context"),
        expect="[turn failed CONTEXT_WINDOW_EXCEEDED] This model's maximum context length is 131072 tokens.")
    add("http-401", "HTTP 401 bad API key, with the fix line", _default("http_401"),
        expect="[turn failed AUTH] Authentication Fails, Your api key: ****abcd is invalid")
    add("http-402", "HTTP 402 insufficient balance, with the fix line", _default("http_402"),
        expect="[turn failed QUOTA] Insufficient Balance")
    add("http-403", "HTTP 403 permission denied", _default("http_403"),
        expect="[turn failed AUTH] Permission denied: this API key may not use this model")
    add("http-413", "HTTP 413 request too large", _default("http_413"),
        expect="[turn failed INVALID_REQUEST] Request body too large")
    add("http-422", "HTTP 422 invalid parameters (an unmapped status)", _default("http_422"),
        expect="[turn failed HTTP_422] Invalid Parameters: temperature must be between 0 and 2")
    add("http-429", "HTTP 429 rate limit; its Retry-After: 1 is past the demo's 0.4 s wait cap (60 s outside "
        "the demo), so the turn ends at once saying when to retry (then the fix line)",
        _default(Behaviour("http_429", retry_after="1")), expect="[turn failed RATE_LIMIT] Rate Limit Reached")
    add("http-500", "HTTP 500 (retried, then the fix line)", _default("http_500"),
        expect="[turn failed SERVER] Internal Server Error")
    add("http-502", "HTTP 502 with an HTML body from a proxy (retried, then the fix line)", _default("http_502_html"),
        expect="[turn failed SERVER] API error (HTTP 502) from the endpoint at 127.0.0.1:")
    add("http-503", "HTTP 503 server overloaded (retried, then the fix line)", _default("http_503"),
        expect="[turn failed SERVER] Server Overloaded, please try again later")


def _register_connection() -> None:
    """The connection's failures: refused, wrong protocol, bad certificate, proxies, deadlines, a stall."""
    add = register_scenario
    add("refused", "connection refused: a closed loopback port (retried)", _refused,
        expect="[turn failed TRANSPORT] request to the endpoint at http://127.0.0.1:")
    add("plain-http", "https:// to a port that speaks plain HTTP (not retried)", _plain_http,
        expect="  fix: the server speaks plain HTTP — did you mean http://127.0.0.1:")
    add("bad-cert", "a self-signed certificate the system does not trust (not retried)", _bad_cert,
        expect="  fix: trust the CA that issued it: point SSL_CERT_FILE at a bundle that holds that CA, or add the CA "
        "to the OS trust store (update-ca-certificates on Debian)")
    add("proxy-407", "a proxy refusing its credentials (and echoing them): PROXY, not retried", _proxy_407,
        expect="[turn failed PROXY] proxy http://***@127.0.0.1:")
    add("proxy-503", "a proxy whose upstream refused (squid's headers): PROXY, retried", _proxy_503,
        expect="[turn failed PROXY] proxy http://***@127.0.0.1:")
    add("keepalive-stall", f"keep-alives but no token; first-token deadline {DEMO_FIRST_TOKEN_TIMEOUT:g}s, "
        "retried once", _keepalive_stall,
        expect="[turn failed TIMEOUT] no content from the endpoint at 127.0.0.1:")
    add("no-headers", f"the request is read, then nothing; deadline {DEMO_FIRST_TOKEN_TIMEOUT:g}s, no retry",
        _no_headers,
        expect="[turn failed TIMEOUT] no response headers from the endpoint at 127.0.0.1:")
    add("stall", "headers, then silence: press Ctrl-C to cancel", _default("stall_after_headers"),
        expect="[turn aborted] cancelled", cancel=True)
    add("stall-mid-stream", "some text, then only keep-alives: the toolbar counts the silence; Ctrl-C cancels",
        _default(Behaviour("keepalive_only", text="The first words arrive, then only keep-alives", interval=1.0)),
        expect="[turn aborted] cancelled", cancel=True)


def _register_stream() -> None:
    """What the stream itself may carry: a drop, a missing end, odd text, an error event, a limit, the guard."""
    add = register_scenario
    add("mid-stream-drop", "connection reset after some text (not retried: the text is already on screen)",
        _default("reset_mid_stream"),
        expect="[turn failed TRANSPORT] stream from the endpoint at http://127.0.0.1:")
    add("stream-closed", "the stream ends with neither a finish reason nor [DONE]", _default("no_finish"),
        expect="[turn failed STREAM_CLOSED] SSE stream ended without [DONE]")
    add("no-done", "a finish reason, then a clean close without [DONE]: the answer is whole", _default("no_done"),
        expect="No terminator")
    add("surrogates", "an emoji split across two chunks and a lone surrogate: joined, and replaced by U+FFFD",
        _default("surrogates"), expect="Smile \U0001f600, a lone \ufffd!")
    add("malformed", "a payload that is not JSON", _default("malformed_json"),
        expect="[turn failed MALFORMED_RESPONSE] malformed SSE payload: ")
    add("content-filter", "finish_reason content_filter", _default("content_filter"),
        expect="[turn failed CONTENT_FILTER] stream from the endpoint at 127.0.0.1:")
    add("relay-error", "a relay (LiteLLM) ends the stream with an error event: its own words, SERVER (retried)",
        _default(Behaviour("error_event", gateway="litellm")),
        expect="[turn failed SERVER] litellm.InternalServerError: upstream connection lost")
    add("gateway-upstream-401", "a gateway (LiteLLM) relays its upstream's 401: its own credential, not your key",
        _default("gateway_upstream_401"),
        expect="  fix: LiteLLM accepted your key, but its upstream refused LiteLLM's own credential")
    add("max-tokens", "finish_reason length: the output-token limit", _default("length"),
        expect="[turn hit the output-token limit]")
    add("cut-and-continue", "a connection reset after some text, on a DeepSeek-dialect endpoint: the answer is "
        "continued from the text shown (prefix completion)", _cut_and_continue,
        expect="[continuing after TRANSPORT: 54 chars kept (prefix completion)]")
    add("cache-drop", "the prompt cache serves 96%, then 12% of the same prefix: the second turn names the drop",
        _cache_drop, expect="The server reused 96% of this prompt from its cache; send another prompt.")
    add("budget-stop", f"--scenario budget-stop caps the run at ${BUDGET_DEMO_CAP:.2f} (unless max_cost is set); tool "
        "rounds spend it: the turn stops before the next request", _budget_stop,
        expect="[turn stopped BUDGET] $0.06 spent of a $0.05 cap")
    add("prompt-rejected", "a key-shaped string in the prompt: the guard refuses to send it", _prompt_rejected,
        expect="[turn rejected] prompt contains what looks like a secret (sk-…); not sent")


def _register_delegation() -> None:
    """One scenario per subagent failure category, from the subagent packages' own catalogues."""
    register_demo_scenarios(register_scenario, Behaviour)
    register_product_demo_scenarios(register_scenario, Behaviour)


_register_catalogue()
CORE_SCENARIOS = tuple(SCENARIOS)
_register_delegation()


async def start_demo(stack: contextlib.AsyncExitStack, scenario: str) -> Demo:
    """The demo's endpoint (a fault server with TLS, a closed port) and its client, held open by ``stack``."""
    server = await stack.enter_async_context(FaultServer(default="text", tls=True))
    refused_port = stack.enter_context(closed_port())
    client = DemoClient(server.url, f"http://127.0.0.1:{refused_port}")
    client.urls.update(plain_https=server.plain_url_for_https, tls=server.tls_url)
    stack.push_async_callback(client.aclose)
    return Demo(server, client, demo_retry_policy(), scenario)
