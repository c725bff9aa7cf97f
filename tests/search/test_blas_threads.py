"""The vector search runs on one BLAS thread and gives the process's BLAS threads back, also when searches
overlap on several threads (each restoring what it found would leave the process on one thread).
"""

from __future__ import annotations

import pytest

from fullrecall.search.semantic import _one_blas_thread


def test_overlapping_searches_give_the_blas_threads_back() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    libs = _one_blas_thread._controllers()  # the BLAS libraries loaded when the first search ran
    if not libs:
        pytest.skip("no BLAS library threadpoolctl can drive")
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        start = [lib.get_num_threads() for lib in libs]
        first, second = _one_blas_thread(), _one_blas_thread()
        first.__enter__()
        second.__enter__()  # another thread's search begins while the first runs
        assert [lib.get_num_threads() for lib in libs] == [1] * len(libs)
        first.__exit__(None, None, None)
        assert [lib.get_num_threads() for lib in libs] == [1] * len(libs)  # the second still runs on one
        second.__exit__(None, None, None)
        assert [lib.get_num_threads() for lib in libs] == start
