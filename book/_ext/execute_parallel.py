"""Execute the book's chapters that are not in the execution cache, two at a time.

``jupyter-book build`` executes outdated chapters one after another (myst-nb's cache mode,
``_build/.jupyter_cache``). Most of a chapter's time is single-threaded Python (starting the
kernel, drawing figures), so on a 2-core machine two chapters at once take about half the
time. This script runs before the build (``make book``): it reads each chapter of
``_toc.yml`` the way myst-nb does, skips those whose code cells already have a cached
execution, executes the others in parallel with jupyter-cache's own executor function, and
stores them in the same cache. The build then finds every chapter there.

Each kernel gets one thread per worker (``OMP_NUM_THREADS``), so the workers never have
more busy threads than the machine has cores (PyTorch's threads spin when they do: minutes
instead of seconds). A chapter that fails here is left out of the cache; the build then
executes it itself and reports the error, strictly, as before.

Usage: ``python book/_ext/execute_parallel.py [--jobs N]`` from the repository root.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "_build" / ".jupyter_cache"
READER = {"name": "myst_nb_md", "type": "plugin"}  # what myst-nb stages a Markdown notebook with


def chapters() -> list[Path]:
    """The toc's pages that are notebooks (jupytext front matter), in toc order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for c in toc.get("chapters", [])]
    pages = [ROOT / f"{f}.md" for f in files]
    return [p for p in pages if p.is_file() and "jupytext:" in p.read_text(encoding="utf8")[:2000]]


def _read(path: Path):
    from myst_nb.core.read import read_myst_markdown_notebook

    return read_myst_markdown_notebook(path.read_text("utf8"), add_source_map=True, path=str(path))


def is_cached(path: Path, cache_dir: Path = CACHE) -> bool:
    """Whether the chapter's code cells, as they are now, have an execution in the cache."""
    from jupyter_cache import get_cache

    try:
        get_cache(str(cache_dir)).match_cache_notebook(_read(path))
        return True
    except KeyError:
        return False


def execute(path: Path, timeout: int = 600, cache_dir: Path = CACHE) -> tuple[str, float, str | None]:
    """Execute one chapter in its folder and cache it; ``(name, seconds, error or None)``."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.executors.utils import single_nb_execution

    notebook = _read(path)
    result = single_nb_execution(
        notebook, cwd=str(path.parent), allow_errors=False, timeout=timeout, meta_override=True
    )
    if result.err is not None:
        return path.name, result.time, f"{type(result.err).__name__}: {result.err}"[:300]
    cache = get_cache(str(cache_dir))
    record = cache.add_nb_to_project(str(path), read_data=READER)
    cache.cache_notebook_bundle(
        CacheBundleIn(notebook, record.uri, data={"execution_seconds": result.time}),
        check_validity=False,
        overwrite=True,
    )
    return path.name, result.time, None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="chapters executed at once (default 2)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (as _config.yml)")
    args = parser.parse_args(argv)
    todo = [p for p in chapters() if not is_cached(p)]
    if not todo:
        return 0
    # Longest first (they are the ones that train models), so the two workers finish together.
    order = ["01_", "03_", "07_", "06_", "05_", "02_", "04_"]
    todo.sort(key=lambda p: next((i for i, o in enumerate(order) if p.name.startswith(o)), len(order)))
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.jobs))
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    from jupyter_cache import get_cache

    get_cache(str(CACHE))  # create the database once, before the workers open it
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(execute, p, args.timeout) for p in todo]
        for future in futures:
            name, seconds, error = future.result()
            print(
                f"{name}: executed in {seconds:.1f} s"
                + (f", FAILED ({error}); the build will rerun it" if error else ""),
                flush=True,
            )
    print(f"{len(todo)} chapters executed in {time.perf_counter() - start:.1f} s with {args.jobs} workers", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
