"""A benchmark paired against another checkout of this project: the two run in turn on the
same machine, and the medians of a figure each prints are compared.

    python -m bench.pair --before /path/to/checkout [--runs 4] [--figure "HTTP NDJSON:"]
        [--reference "COPY:"] [--before-module M] [--before-python P] bench.ingest ARGS...

The other checkout runs with its own virtualenv (`.venv/bin/python` in it, or
`--before-python`), so a release with other dependencies is measured with its own;
`--before-module` names its copy of the benchmark when it differs. Runs alternate, the other
checkout first, so a machine that slows down during the run weighs on both. A figure is the
first number on the line that starts with `--figure`; `--reference` (the COPY of the same
records, in the same run) gives each run's ratio, which cancels what the machine's hour does
to both. Whole runs are minutes apart: on a machine whose speed moves by a third between
them, bench/ingest_pair.py (rounds of seconds, both servers up) shows ingestion's few per
cent where this needs dozens of runs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

NUMBER = re.compile(r"[\d,]+(?:\.\d+)?")


def figure(output: str, label: str) -> float:
    for line in output.splitlines():
        if line.strip().startswith(label):
            found = NUMBER.search(line.strip()[len(label):])
            if found:
                return float(found.group().replace(",", ""))
    raise RuntimeError(f"no line starting {label!r} in:\n{output[-2000:]}")


def run(python: str, directory: Path, module: str, args: list[str]) -> str:
    done = subprocess.run([python, "-m", module, *args], cwd=directory, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{module} in {directory} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--before-module", help="its benchmark module, if not the same")
    parser.add_argument("--before-python", help="its Python (default: its .venv's)")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--figure", default="HTTP NDJSON:")
    parser.add_argument("--reference", default="COPY:")
    parser.add_argument("module")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()

    before_python = args.before_python or str(args.before / ".venv" / "bin" / "python")
    sides = {"before": (before_python, args.before,
                        args.before_module or args.module),
             "this": (sys.executable, Path.cwd(), args.module)}
    figures: dict[str, list[float]] = {side: [] for side in sides}
    ratios: dict[str, list[float]] = {side: [] for side in sides}
    for number in range(args.runs):
        for side, (python, directory, module) in sides.items():
            output = run(python, directory, module, args.args)
            figures[side].append(figure(output, args.figure))
            ratios[side].append(figures[side][-1] / figure(output, args.reference))
            print(f"run {number + 1} {side:>6}: {figures[side][-1]:>12,.0f}  "
                  f"against {args.reference} {ratios[side][-1]:.3f}", flush=True)
    for side in sides:
        print(f"{side:>6}: median {statistics.median(figures[side]):,.0f}, "
              f"mean ratio to the reference {statistics.mean(ratios[side]):.3f}")
    on_medians = statistics.median(figures["this"]) / statistics.median(figures["before"])
    on_ratios = statistics.mean(ratios["this"]) / statistics.mean(ratios["before"])
    print(f"this/before: {on_medians:.3f} on the medians, {on_ratios:.3f} on the ratios to "
          "the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
