"""How a process that pomo owns (its command line) takes memory for numpy and Arrow.

A run in the process makes and lets go of arrays of millions of versions one after the
other, so what a page of fresh memory costs counts. Two of the libraries' defaults made
it high and erratic: numpy asks the kernel for transparent huge pages for every array of
4 MiB or more (a first touch then zeroes 2 MiB, and may wait for the kernel to compact
memory), and Arrow's default allocator on Linux (mimalloc) gets them too. With numpy's
request off and Arrow on its jemalloc allocator, a whole `pomo run --out` of W1's closure
(3.85 million events) took 5.0 s against 7.3 s (BENCHMARKS.md).

Both libraries read their setting when they are imported (Arrow's conversions to numpy
keep the allocator it started with, whatever is set later), so `settle` sets the
variables before that. A user who sets ``NUMPY_MADVISE_HUGEPAGE`` or
``ARROW_DEFAULT_MEMORY_POOL`` keeps their choice. The processes the command starts (Spark's
Python workers) inherit them. The Dagster and Airflow layers run in their users'
processes and leave both alone.
"""

from __future__ import annotations

import os
import sys


def settle() -> None:
    """Set this process's numpy and Arrow memory as the module says, where the user did not
    choose: by the libraries' variables when they are not imported yet, else as far as
    they can be changed now."""
    if "NUMPY_MADVISE_HUGEPAGE" not in os.environ:
        os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"
        if "numpy" in sys.modules:
            _no_huge_pages()
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ and sys.platform == "linux":
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"  # in Arrow's Linux wheels
        if "pyarrow" in sys.modules:
            _jemalloc()


def _no_huge_pages() -> None:
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # another numpy: its default stands in this process
        return
    _set_madvise_hugepage(False)


def _jemalloc() -> None:
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # a build without it: its default stands
        pass
