"""``dsh --demo``: the embedded endpoint, its scenario catalogue and the scripted child runtimes.

Deliberately import-free, so ``python -m dsh.repl.demo.acp_agent`` (a demo child) loads only the module
it runs. The catalogue is :mod:`dsh.repl.demo.catalogue`; the endpoint :mod:`dsh.repl.demo.fault_server`.
"""
