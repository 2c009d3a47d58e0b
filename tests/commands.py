"""`router-backend ARGS` in a process forked from one that has already imported every
command, for tests that use a command as a means (a hunt, a feed imported) rather than test
the program itself (its start, its pipes, its signals: those run `python -m ops`).

A command's start is mostly its imports (`python -X importtime -m ops hunt --help`: about
0.3 s of 0.4 s on an idle machine, 0.8 s of 0.95 s on a loaded one), and the default tier
runs a few hundred. multiprocessing's forkserver (public API) keeps one process per test
worker with ops/ imported; each command is a fresh child of it, with its own environment,
working directory, standard output and error, run through `ops.cli.main` as the
program's entry point runs it. Its standard input is empty (os.devnull, as multiprocessing
sets it): a command fed its input runs as a program instead.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from typing import Mapping

from ops.cli import COMMAND_MODULES, main
from testkit import REPOSITORY

TIMEOUT_SECONDS = 600
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["ops.cli", *COMMAND_MODULES.values()])


def _run_in_child(args: tuple[str, ...], env: dict[str, str], out_path: str,
                  err_path: str) -> None:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(REPOSITORY)
    for path, fd in ((out_path, 1), (err_path, 2)):
        with open(path, "wb") as file:
            os.dup2(file.fileno(), fd)
    try:
        code = main(list(args))
    except SystemExit as leaving:  # argparse's own exits (--help, a usage error)
        code = leaving.code if isinstance(leaving.code, int) else 1 if leaving.code else 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_command(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess:
    """What `router-backend ARGS` in `env` exits with and writes, as text."""
    with tempfile.TemporaryDirectory(prefix="command-") as directory:
        out_path, err_path = f"{directory}/out", f"{directory}/err"
        child = _CONTEXT.Process(target=_run_in_child,
                                 args=(args, dict(env), out_path, err_path))
        child.start()
        child.join(TIMEOUT_SECONDS)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["router-backend", *args], TIMEOUT_SECONDS)
        with open(out_path, encoding="utf-8") as out, open(err_path, encoding="utf-8") as err:
            return subprocess.CompletedProcess(["router-backend", *args], child.exitcode,
                                               out.read(), err.read())


def router_backend(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess:
    """testkit.server.router_backend's answer, without the program's start."""
    return run_command(env, *args)


def router_backend_output(env: Mapping[str, str], *args: str) -> str:
    """router_backend's standard output; RuntimeError with its error output when it fails."""
    done = run_command(env, *args)
    if done.returncode != 0:
        raise RuntimeError(f"router-backend {' '.join(args)}: {done.stderr or done.stdout}")
    return done.stdout
