"""Run every `bench_*` module of this folder, or those named on the command line."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks


def main() -> None:
    names = sys.argv[1:] or sorted(
        module.name
        for module in pkgutil.iter_modules(benchmarks.__path__)
        if module.name.startswith("bench_")
    )
    for name in names:
        importlib.import_module(f"benchmarks.{name}").main()


if __name__ == "__main__":
    main()
