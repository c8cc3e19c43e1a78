"""The loopback endpoint: a DeepSeek-compatible server on 127.0.0.1 for tests, the demo and the bench.

:mod:`~dsh.llm.loopback.fault_server` misbehaves on demand, :mod:`~dsh.llm.loopback.streams` builds the
streams it sends, :mod:`~dsh.llm.loopback.replay_server` answers from a ``--record`` trace. It imports
only ``dsh.llm``, and no product code imports it but the front end's ``--demo``, ``--replay`` and
``dsh replay-server`` (contracts in pyproject.toml; docs/fault-server.md). Deliberately import-free, so
``python -m dsh.llm.loopback.fault_server`` loads only the modules it runs.
"""
