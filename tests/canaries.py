"""Canary secrets shared by the whole suite.

Tests plant these where a secret could leak from (the API key, base-URL userinfo and query, proxy
URLs, child env and stderr, upstream error bodies). At the end of the session ``conftest.py`` greps
every file the suite wrote under pytest's base temp directory — rendered transcripts, logs, session
logs, diagnostics — and fails the run on any hit.
"""

API_KEY = "sk-canaryApiKey7f3a9c1e5b2d4f6a8c0e"
URL_USER = "canaryUrlUser4412"
URL_PASSWORD = "canaryUrlPassword8893"
URL_QUERY = "canaryUrlQuery2207"
PROXY_PASSWORD = "canaryProxyPassword6150"
CHILD_ENV = "canaryChildEnv3381"
UPSTREAM_KEY = "sk-canaryUpstreamEcho55e1d0c4b7a9"  # key-shaped: an upstream body echoing a key

STRICT = (API_KEY, URL_USER, URL_PASSWORD, URL_QUERY, PROXY_PASSWORD, CHILD_ENV, UPSTREAM_KEY)

# Task text and tool input may legitimately sit in a session log (the user's own words) but never in
# a diagnostic; tests assert that directly.
TASK_TEXT = "canaryTaskText1290"
TOOL_INPUT = "canaryToolInput7731"
# A child's stderr is the agent's own words: a failed run keeps its last lines host-side (dsh.log, /why),
# masked, but never in a diagnostic or anything the model sees; tests assert that directly. A secret
# planted in it (CHILD_ENV, UPSTREAM_KEY) stays strict.
CHILD_STDERR = "canaryChildStderr9046"
