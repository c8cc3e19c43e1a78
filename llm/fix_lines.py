"""The fix lines of a network failure: what to change when a connection, its TLS or its proxy failed
(docs/reliability.md, "Proxies, permanent failures, fix lines, TLS trust").

One table for every caller that says them: a turn's end (dsh.repl.turn_end) and web_fetch's failures
(dsh.agent_loop.tools.web_guard). ``{source}`` names what set the value to check (a flag, an environment
variable, a config key, or "the URL"); ``{host}``, ``{name}`` and ``{url}`` come from the failure.
"""

from __future__ import annotations

__all__ = [
    "FIX_CERTIFICATE",
    "FIX_CERTIFICATE_EXPIRED",
    "FIX_CERTIFICATE_NOT_YET_VALID",
    "FIX_NAME_NOT_FOUND",
    "FIX_PLAIN_HTTP",
    "FIX_PROXY_AUTH",
    "FIX_PROXY_NAME",
    "FIX_PROXY_REFUSED",
    "FIX_REFUSED",
]

FIX_REFUSED = "  fix: nothing is listening at {host} — check {source}"
FIX_NAME_NOT_FOUND = "  fix: the host name {name} does not exist — check {source}"
FIX_PLAIN_HTTP = "  fix: the server speaks plain HTTP — did you mean {url}?"
# Certificate failures, by FailureDetail: how to trust the CA, or what the server must change. Never "turn
# verification off" (docs/reliability.md, "Certificate failures"); tests/repl/test_render.py holds them to it.
FIX_CERTIFICATE = (
    "  fix: trust the CA that issued it: point SSL_CERT_FILE at a bundle that holds that CA, or add the CA to the"
    " OS trust store (update-ca-certificates on Debian)"
)
FIX_CERTIFICATE_EXPIRED = (
    "  fix: the server's certificate has expired and must be renewed there (if it looks current, check this"
    " machine's clock)"
)
FIX_CERTIFICATE_NOT_YET_VALID = (
    "  fix: the certificate is not valid yet — check this machine's clock, or the dates of the server's certificate"
)
FIX_PROXY_REFUSED = "  fix: nothing is listening at the proxy {host} — check {source}"
FIX_PROXY_NAME = "  fix: the proxy host {name} does not exist — check {source}"
FIX_PROXY_AUTH = "  fix: the proxy refused the credentials — check the user:password in {source}"
