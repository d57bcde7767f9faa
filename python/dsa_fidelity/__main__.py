"""`python -m dsa_fidelity ARGS`: runs the dsa-fidelity CLI with ARGS (dsa_fidelity.cli_path)."""

import os
import sys

from dsa_fidelity import cli_path


def main() -> None:
    try:
        cli = cli_path()
    except FileNotFoundError as e:
        print(f"dsa-fidelity: {e}", file=sys.stderr)
        sys.exit(2)
    os.execv(cli, [cli] + sys.argv[1:])


if __name__ == "__main__":
    main()
