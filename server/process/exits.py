"""How a process ends on a failure it can name: one line on standard error and an exit
status, the same for every command (ops/command.py adds the commands' own errors) and for
the service's processes. A closed standard output (`| head`) ends it quietly."""

from __future__ import annotations

import os
import sys
from typing import Callable

from server.db.migrate import SchemaNotReady
from server.db.pool import DatabaseUnavailable
from server.settings import SettingsError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_STDOUT_CLOSED = 141  # as a shell reports a command SIGPIPE ended (128 + 13)

Errors = tuple[type[BaseException], ...]
USAGE: Errors = (SettingsError,)
# OSError: the database unreachable, the port taken, DATA_DIR in use, a file unreadable ...
FAILED: Errors = (SchemaNotReady, DatabaseUnavailable, OSError)


def stdout_closed() -> int:
    """The reader of standard output left: what is still buffered goes nowhere, so that the
    interpreter's last flush says nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_STDOUT_CLOSED


def reported(prog: str, call: Callable[[], int], *, usage: Errors = (), failed: Errors = (),
             marker: str = "", say_interrupted: bool = True) -> int:
    """`call()`'s exit status, or the status of the failure it raised, named in one line
    `PROG: MARKER MESSAGE`; a failure of no kind named here is a defect, and its traceback
    shows."""
    try:
        status = call()
        sys.stdout.flush()  # here, where a closed reader is seen
        return status
    except BrokenPipeError:
        return stdout_closed()
    except KeyboardInterrupt:
        if say_interrupted:
            print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except USAGE + usage as error:
        print(f"{prog}: {marker}{error}", file=sys.stderr)
        return EXIT_USAGE
    except FAILED + failed as error:
        print(f"{prog}: {marker}{error}", file=sys.stderr)
        return EXIT_FAILED
