"""``python -m repl`` is ``dsh``."""

from dsh.repl.cli import main

if __name__ == "__main__":
    main()
