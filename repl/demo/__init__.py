"""``dsh --demo``: the scenario catalogue and the scripted child runtimes, over the loopback endpoint.

Deliberately import-free, so ``python -m dsh.repl.demo.acp_agent`` (a demo child) loads only the module
it runs. The catalogue is :mod:`dsh.repl.demo.catalogue`; the endpoint it scripts is
:mod:`dsh.llm.loopback.fault_server`; :mod:`dsh.repl.demo.endpoint` registers the demo as the front end's
endpoint (dsh.repl.endpoint imports it by name, only for ``--demo``).
"""
