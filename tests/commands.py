"""`router-backend ARGS` (or `python -m ops.rulegen ARGS`, the other programs of ops/) in a
process forked from one that has already imported every command, for tests that use a command as a means (a hunt, a feed imported) rather than test
the program itself (its start, its pipes, its signals: those run `python -m ops`).

A command's start is mostly its imports (`python -X importtime -m ops hunt --help`: about
0.3 s of 0.4 s on an idle machine, 0.8 s of 0.95 s on a loaded one), and the default tier
runs a few hundred. multiprocessing's forkserver (public API) keeps one process per test
worker with ops/ imported; each command is a fresh child of it, with its own environment,
working directory, standard output and error, run through the program's `main` as its
entry point runs it. Its standard input is empty (os.devnull, as multiprocessing
sets it): a command fed its input runs as a program instead.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from ops.cli import COMMAND_MODULES
from testkit import REPOSITORY

TIMEOUT_SECONDS = 600
ROUTER_BACKEND = "ops.cli"
PROGRAMS = (ROUTER_BACKEND, "ops.rulegen", "ops.rulepreprocess", "ops.routeraccessreport")
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload([*PROGRAMS, *COMMAND_MODULES.values()])


def _run_in_child(program: str, args: tuple[str, ...], env: dict[str, str], out_path: str,
                  err_path: str) -> None:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(REPOSITORY)
    for path, fd in ((out_path, 1), (err_path, 2)):
        with open(path, "wb") as file:
            os.dup2(file.fileno(), fd)
    try:
        code = importlib.import_module(program).main(list(args))
    except SystemExit as leaving:  # argparse's own exits (--help, a usage error)
        code = leaving.code if isinstance(leaving.code, int) else 1 if leaving.code else 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_program(program: str, env: Mapping[str, str], *args: str, text: bool = True
                ) -> subprocess.CompletedProcess:
    """What `python -m PROGRAM ARGS` (one of PROGRAMS) in `env` exits with and writes (as
    text, or bytes)."""
    with tempfile.TemporaryDirectory(prefix="command-") as directory:
        out_path, err_path = f"{directory}/out", f"{directory}/err"
        child = _CONTEXT.Process(target=_run_in_child,
                                 args=(program, args, dict(env), out_path, err_path))
        child.start()
        child.join(TIMEOUT_SECONDS)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired([program, *args], TIMEOUT_SECONDS)
        written = [Path(path).read_bytes() for path in (out_path, err_path)]
        if text:
            written = [output.decode() for output in written]
        return subprocess.CompletedProcess([program, *args], child.exitcode, *written)


def router_backend(env: Mapping[str, str], *args: str, text: bool = True
                   ) -> subprocess.CompletedProcess:
    """testkit.server.router_backend's answer, without the program's start."""
    return run_program(ROUTER_BACKEND, env, *args, text=text)


def router_backend_output(env: Mapping[str, str], *args: str) -> str:
    """router_backend's standard output; RuntimeError with its error output when it fails."""
    done = router_backend(env, *args)
    if done.returncode != 0:
        raise RuntimeError(f"router-backend {' '.join(args)}: {done.stderr or done.stdout}")
    return done.stdout
