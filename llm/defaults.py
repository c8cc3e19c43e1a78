"""Every default for talking to the model, defined once: endpoint, model, deadlines, retries.

Plain constants with no imports, so the config, the command line and the child runtime read them
without loading the HTTP client (``dsh.llm`` loads its other modules on first use).
"""

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_FIRST_TOKEN_TIMEOUT",
    "DEFAULT_MAX_CONTINUATIONS",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MODEL",
    "DEFAULT_POOL_TIMEOUT",
    "DEFAULT_RETRY_AFTER_MAX",
    "DEFAULT_RETRY_BASE_DELAY",
    "DEFAULT_RETRY_JITTER",
    "DEFAULT_RETRY_MAX_DELAY",
    "DEFAULT_STREAM_IDLE_TIMEOUT",
    "DEFAULT_WRITE_TIMEOUT",
    "LEGACY_MODELS",
]

DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODEL = "deepseek-flash"
# A reply cut after its text is continued by prefix completion at most this often a step (agent_loop/continuation.py).
DEFAULT_MAX_CONTINUATIONS = 2
# DeepSeek's legacy model names that still answer: each name -> (the current name that serves it, the default,
# and the version DeepSeek names). https://api-docs.deepseek.com/quick_start/pricing; llm/models.py prices each
# as the model that serves it.
LEGACY_MODELS = {
    "deepseek-v4-flash": (DEFAULT_MODEL, "V4.1-Flash"),
    "deepseek-v4-flash-vision-exp": (DEFAULT_MODEL, "V4.1-Flash"),
}

# Deadlines, in seconds. A stream that is silent (not even a keep-alive) for the idle timeout has
# stalled; the first content token must come within the first-token timeout even while keep-alives flow.
DEFAULT_FIRST_TOKEN_TIMEOUT = 600.0
DEFAULT_STREAM_IDLE_TIMEOUT = 300.0
DEFAULT_CONNECT_TIMEOUT = 30.0
DEFAULT_WRITE_TIMEOUT = 60.0  # sending one request body
DEFAULT_POOL_TIMEOUT = 60.0  # waiting for a free connection

# Retries of a transient failure, per request: exponential backoff from the base delay, capped,
# plus up to this fraction of random jitter so that clients do not retry in lockstep.
DEFAULT_MAX_RETRIES = 5
DEFAULT_RETRY_BASE_DELAY = 0.5
DEFAULT_RETRY_MAX_DELAY = 10.0
DEFAULT_RETRY_JITTER = 0.1
# A server's Retry-After is waited for, as asked, up to this; one that asks for longer ends the turn, saying
# when the server asked to be retried (a turn never hangs for minutes on one header).
DEFAULT_RETRY_AFTER_MAX = 60.0
