"""``python -m posviz``."""

from posviz.cli.app import main

if __name__ == "__main__":
    main()
