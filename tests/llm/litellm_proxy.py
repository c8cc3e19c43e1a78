"""A real LiteLLM proxy on loopback, between dsh and the fault server (tests/llm/test_litellm_gateway.py).

`make test` installs it in its own venv, `.venv/litellm` (`make litellm`). It runs offline:
the local cost map, telemetry off, no database, no admin UI, no retries and no cooldowns (each fault is met
exactly once), from ``fixtures/litellm/config.yaml``. The proxy's master key is the user's key (what dsh sends
as DEEPSEEK_API_KEY); LiteLLM's own credential for its upstream is another one. Both are canaries. What the
proxy sends in each case is written down in docs/endpoints.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx

from tests import canaries
from tests.real_parts import missing
from tests.server_process import LoggedServer
from tests.waiting import PROMPTLY

__all__ = ["MASTER_KEY", "UPSTREAM_KEY", "LiteLLMProxy", "litellm_binary"]

REPO = Path(__file__).resolve().parents[2]
LITELLM = REPO / ".venv" / "litellm" / "bin" / "litellm"
CONFIG_TEMPLATE = REPO / "fixtures" / "litellm" / "config.yaml"
MASTER_KEY = canaries.API_KEY  # the user's key: the proxy accepts it, dsh sends it
UPSTREAM_KEY = canaries.UPSTREAM_KEY  # LiteLLM's own key for its upstream; dsh never has it

# uvicorn's line once the application started; with ``--port 0`` it carries the port the OS gave.
_LISTENING = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")
# Start-up imports a large package set: about 10 s on an idle machine, several times that beside busy loops.
_START_TIMEOUT = 12 * PROMPTLY
_OFFLINE = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else it fetches the price list from the network at start-up
    "LITELLM_TELEMETRY_DISABLED": "true",
    "DISABLE_ADMIN_UI": "True",
}


def litellm_binary() -> Path:
    """The proxy's entry point, or a skip (a failure under CI=true) saying how to install it."""
    if not os.access(LITELLM, os.X_OK):
        missing("LiteLLM proxy", "make test installs it in .venv/litellm")
    return LITELLM


class LiteLLMProxy(LoggedServer):
    """One LiteLLM proxy process in front of ``upstream`` (a base URL on 127.0.0.1); its files in ``directory``."""

    name = "LiteLLM"
    listening = _LISTENING
    start_timeout = _START_TIMEOUT

    def __init__(self, upstream: str, directory: Path) -> None:
        super().__init__(directory, "litellm.log")
        self.upstream = upstream

    def start(self) -> LiteLLMProxy:
        binary = litellm_binary()
        config = self.directory / "config.yaml"
        config.write_text(CONFIG_TEMPLATE.read_text(encoding="utf-8").replace("{upstream}", self.upstream))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.directory),
            "LANG": "C.UTF-8",
            "DSH_LITELLM_MASTER_KEY": MASTER_KEY,
            "DSH_LITELLM_UPSTREAM_KEY": UPSTREAM_KEY,
            **_OFFLINE,
        }
        self.launch([str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", "0"], env)
        return self

    def ready(self) -> bool:
        """LiteLLM lists its model (the start-up is over)."""
        try:
            answer = httpx.get(f"{self.url}/models", headers={"Authorization": f"Bearer {MASTER_KEY}"}, timeout=5)
        except httpx.TransportError:
            return False
        return answer.status_code == 200
