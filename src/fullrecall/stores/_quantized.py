"""A compressed copy of a large vector block, scanned to pick candidates that the block then re-scores exactly.

faiss-cpu's 8-bit scalar quantizer (one range for every dimension, inner product) keeps a byte a dimension
instead of four, and faiss scans it about 3x faster than numpy multiplies the float32 matrix (100,000 x 384:
2.5 ms against 8.6 ms on one core). The scan only chooses candidates (the flat copy ``OVERFETCH`` x k, at
least ``MIN_CANDIDATES``; the inverted file ``IVF_OVERFETCH`` x k, at least ``IVF_MIN_CANDIDATES``); their
cosines are computed again in float32 from the block's own matrix, so scores are exact and the chosen rows match
an exact scan (recall@50 1.000 against it at 100,000 bench vectors; the flat copy's 100 candidates for 50 hits
at 10,000 bench vectors, 400 questions: 1.000, as 200 gave).
The flat copy keeps each value as a whole number in [-127, 127] (the rows scaled by 127 / the largest value
met when the copy was made; later ones are clipped), which faiss scans faster than its 8-bit range code: 10,000
archived vectors, 0.6 against 0.9 ms, and the same candidates (recall@50 after re-scoring 0.9999 for both).

From ``IVF_MIN_ROWS`` rows the copy is an inverted file: k-means splits it into ``LISTS`` clusters (trained
once, on a worker thread, when the copy is made: about 1.5 s at 100,000 rows) and a question scans the
``PROBES`` clusters nearest to it, about a fifth of the rows, at the price of exactness (recall@10 0.988
against an exact scan at 100,000 bench vectors; the chosen candidates are still scored exactly). 96 of 512
clusters scan fewer rows than 64 of 256 for the same recall (0.989): 0.94-1.12 ms against 1.16-1.27 ms a
question there, candidates re-scored included (flat 8-bit: 2.5 ms).

Used only when faiss is installed (the ``faiss`` extra) and a block holds at least ``MIN_ROWS`` rows: below
that numpy's exact scan is as fast. Right after the question's embedding, whose model weights have pushed the
block out of the CPU caches, the exact scan of 2,000 rows (3 MB) and its best 50 took 0.65 ms and the copy's
with its candidates re-scored 0.36-0.52 ms; at 1,000 rows both 0.37 ms (LoCoMo's turns and questions: the
same best 10 and 50 rows as the exact scan at 1,000-2,760 rows, for each of 800 questions). A store's warm makes the copy
(2 ms at 2,000 rows), so that a first question does not. At 10,000 rows the copy (3.8 MB) still pays on the
recall path, where the float32 matrix (15 MB) has left the caches between questions: 0.7 ms against 1.4 ms in a
profiled recall.
The copy grows with its block (rows are only ever appended to a block; a block rebuilt after deletes gets a
new copy, a flat one that reaches ``IVF_MIN_ROWS`` an inverted file), and a filter becomes a bitmap of the
rows faiss may return.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

MIN_ROWS = 1_500
OVERFETCH = 2  # the flat copy: candidates a question, x k and at least MIN_CANDIDATES
MIN_CANDIDATES = 100
IVF_OVERFETCH = 4  # the inverted file
IVF_MIN_CANDIDATES = 200
IVF_MIN_ROWS = 50_000  # from here the copy is split into LISTS clusters, PROBES of them scanned a question
LISTS = 512
PROBES = 96

_faiss: Any = None


def faiss_module() -> Any:
    """The faiss module, or None when it is not installed (imported once, on first use)."""
    global _faiss
    if _faiss is None:
        try:
            import faiss

            _faiss = faiss
        except ImportError:
            _faiss = False
    return _faiss or None


@contextlib.contextmanager
def _one_thread(faiss: Any) -> Iterator[None]:
    """Run faiss on one OpenMP thread (this thread's setting, put back after)."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


class Quantized:
    """An 8-bit copy of the first ``size`` rows of a block's (normalised) matrix: one flat scan, or (``ivf``)
    an inverted file of clusters of them.
    """

    def __init__(self, faiss: Any, matrix: np.ndarray) -> None:
        self._faiss = faiss
        dim, ip = matrix.shape[1], faiss.METRIC_INNER_PRODUCT
        self.ivf = self.clusters(len(matrix))
        self._scale: float | None = None  # the flat copy's rows are integers: 127 / the largest |value| made
        if self.ivf:
            self._coarse = faiss.IndexFlatIP(dim)  # kept referenced: the inverted file does not own it
            sq8 = faiss.ScalarQuantizer.QT_8bit_uniform
            self._index = faiss.IndexIVFScalarQuantizer(self._coarse, dim, LISTS, sq8, ip)
            with _one_thread(faiss):  # as the searches; with two threads a recall test failed one run in seven
                self._index.train(np.ascontiguousarray(matrix[:: max(1, len(matrix) // (64 * LISTS))]))
        else:
            self._index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit_direct_signed, ip)
            self._scale = 127.0 / max(float(np.abs(matrix).max()), 1e-12)
        self._lock = threading.Lock()  # faiss does not search an index while rows are added to it
        self.size = 0
        self.grow(matrix)

    @classmethod
    def of(cls, matrix: np.ndarray) -> Quantized | None:
        """A copy of ``matrix`` when it is big enough to pay and faiss is installed, else None."""
        if not cls.pays(len(matrix)):
            return None
        return cls(faiss_module(), matrix)

    @staticmethod
    def pays(rows: int) -> bool:
        """Whether a block of ``rows`` rows gets a copy (faiss installed, at least ``MIN_ROWS`` rows)."""
        return rows >= MIN_ROWS and faiss_module() is not None

    @staticmethod
    def clusters(rows: int) -> bool:
        """Whether the copy of a block of ``rows`` rows is an inverted file (trained: slow to make)."""
        return rows >= IVF_MIN_ROWS

    def outgrown(self, rows: int) -> bool:
        """Whether a block of ``rows`` rows should have a copy of the other kind (flat past ``IVF_MIN_ROWS``)."""
        return not self.ivf and self.clusters(rows)

    def wanted(self, k: int) -> int:
        """How many candidates a search for the ``k`` best asks this copy for."""
        return max(IVF_OVERFETCH * k, IVF_MIN_CANDIDATES) if self.ivf else max(OVERFETCH * k, MIN_CANDIDATES)

    @property
    def nbytes(self) -> int:
        return self.size * int(self._index.d)

    def grow(self, matrix: np.ndarray, start: int = 0) -> bool:
        """Add the rows of ``matrix`` from ``start`` on, the rows before it being those held; False (nothing
        added) when this copy holds other rows past ``start`` (another block grew it: the caller makes its own).
        """
        with self._lock:
            if start != self.size:
                return False
            if len(matrix) > start:
                self._index.add(self._codes(matrix[start:]))
                self.size = len(matrix)
            return True

    def _codes(self, rows: np.ndarray) -> np.ndarray:
        """Rows as the copy takes them: as they are (the inverted file), or scaled to integers in [-127, 127]."""
        if self._scale is None:
            return np.ascontiguousarray(rows, dtype=np.float32)
        codes = np.multiply(rows, np.float32(self._scale), dtype=np.float32)  # one array, rounded and clipped in place
        np.rint(codes, out=codes)
        return np.clip(codes, -127, 127, out=codes)

    def _query(self, query: np.ndarray) -> np.ndarray:
        """The query as the copy takes it, a C-contiguous float32 vector: the flat copy's scan reads it in whole
        numbers too, so it is scaled to [-127, 127] (inner products only grow by a constant: the order is the same).
        """
        query = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if self._scale is None:
            return query
        return query * np.float32(127.0 / max(float(np.abs(query).max()), 1e-12))

    def candidates(self, query: np.ndarray, n: int, rows: int, mask: np.ndarray | None) -> np.ndarray:
        """Row numbers (below ``rows``) of the ``n`` best rows by approximate inner product that pass ``mask``
        (a boolean array of at least ``rows`` entries, or None), in no particular order.
        """
        faiss = self._faiss
        options: dict[str, Any] = {"nprobe": PROBES} if self.ivf else {}
        query = self._query(query)
        scores, found = np.empty(n, dtype=np.float32), np.empty(n, dtype=np.int64)
        with self._lock:
            if mask is not None or rows < self.size:
                allowed = np.zeros(self.size, dtype=bool)
                allowed[:rows] = True if mask is None else mask[:rows]
                bits = np.packbits(allowed, bitorder="little")
                options["sel"] = faiss.IDSelectorBitmap(self.size, faiss.swig_ptr(bits))
            params = (faiss.SearchParametersIVF if self.ivf else faiss.SearchParameters)(**options) if options else None
            # one OpenMP thread: a one-query scan gains nothing from two, and they wait on each other when
            # another process keeps a core busy (measured: 4 ms against 8-12). The index's own search, without
            # the Python wrapper's checks (the arrays are made right here).
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)
            try:
                self._index.search_c(1, faiss.swig_ptr(query), n, faiss.swig_ptr(scores), faiss.swig_ptr(found), params)
            finally:
                faiss.omp_set_num_threads(threads)
        return found[found >= 0]
