"""``python -m qknorm_model_tools``: list the commands of the package (none runs from here)."""

import sys

from . import COMMANDS


def main() -> int:
    """Print one ``python -m qknorm_model_tools.NAME --help`` line per command; exit status 0."""
    print("The commands (each: --help for its usage):")
    for name in COMMANDS:
        print(f"  python -m {__package__}.{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
