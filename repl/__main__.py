"""``python -m repl`` is ``dsh``."""

from repl.cli import main

if __name__ == "__main__":
    main()
