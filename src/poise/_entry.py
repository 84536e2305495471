"""Entry of the ``poise`` console script and ``python -m poise``.

SIGINT and SIGTERM are caught here, before anything else is imported, so a signal in the first
milliseconds of start-up is kept (and acted on by :mod:`poise.cli.stopflag`) instead of
raising KeyboardInterrupt inside some import.
"""

import signal
import sys

_early: list[int] = []


def _keep(signum: int, _frame: object) -> None:
    _early.append(signum)


signal.signal(signal.SIGINT, _keep)
signal.signal(signal.SIGTERM, _keep)


def main() -> int:
    """Run the command line with the early signal, if one came, handed to the stop flag."""
    from poise.cli import main as cli_main
    from poise.cli import stopflag

    flag = stopflag.install()
    if _early:
        flag.signal = _early[-1]
    return cli_main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
