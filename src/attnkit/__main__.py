"""``python -m attnkit`` (and ``torchrun -m attnkit``) runs the ``attnkit`` command."""

from attnkit._console import main

if __name__ == "__main__":
    main()
