"""Where the mechanisms' random bits come from.

Privacy rests on the noise being unpredictable, so the default source is the operating
system's CSPRNG (``os.urandom``). A seed or a ``numpy.random.Generator`` is accepted so that
tests are repeatable; a draw made with one is NOT differentially private, and
``RandomSource.private`` says so for callers that must record it (pipelines write it into
their manifest).
"""

from __future__ import annotations

import os

import numpy as np

_POOL_BYTES = 4096


class RandomSource:
    """Uniform random bits, from the OS CSPRNG or (for tests only) a seeded numpy generator."""

    def __init__(self, generator: np.random.Generator | None = None):
        self._generator = generator
        self._pool, self._used, self._pid = b"", 0, os.getpid()

    def __getstate__(self) -> dict:
        # A copy (pickled to a worker, a retry, another run) must never replay this pool's bits.
        return {**self.__dict__, "_pool": b"", "_used": 0}

    @property
    def private(self) -> bool:
        """True when the bits come from the OS CSPRNG."""
        return self._generator is None

    def _bytes(self, n: int) -> bytes:
        if n > _POOL_BYTES // 16:
            return self._fresh(n)
        # Small draws (the exact samplers take a few bits at a time) come from a pool: one
        # system call per 4 KiB instead of one per draw. A forked child never reuses its
        # parent's pool, or parent and child would draw the same noise.
        if self._used + n > len(self._pool) or self._pid != os.getpid():
            self._pool, self._used, self._pid = self._fresh(_POOL_BYTES), 0, os.getpid()
        self._used += n
        return self._pool[self._used - n : self._used]

    def _fresh(self, n: int) -> bytes:
        if self._generator is None:
            return os.urandom(n)
        return self._generator.bytes(n)

    def uint16(self, n: int) -> np.ndarray:
        """``n`` independent uniform 16-bit words."""
        return np.frombuffer(self._bytes(2 * n), dtype=np.uint16)

    def uint32(self, n: int) -> np.ndarray:
        """``n`` independent uniform 32-bit words."""
        return np.frombuffer(self._bytes(4 * n), dtype=np.uint32)

    def bits(self, k: int) -> int:
        """A uniform integer in [0, 2**k)."""
        nbytes = (k + 7) // 8
        return int.from_bytes(self._bytes(nbytes), "little") >> (8 * nbytes - k)

    def below(self, n: int) -> int:
        """A uniform integer in [0, n), exactly (rejection of the bit patterns beyond n)."""
        k = max(1, (n - 1).bit_length())
        while True:
            value = self.bits(k)
            if value < n:
                return value

    def uint64(self, n: int) -> np.ndarray:
        """``n`` independent uniform 64-bit words."""
        return np.frombuffer(self._bytes(8 * n), dtype=np.uint64)

    def integers_below(self, n: np.ndarray) -> np.ndarray:
        """One uniform integer in [0, n_i) for each n_i (1 <= n_i < 2^63), exactly, as int64: a 64-bit word
        is kept when it is at least 2^64 mod n_i (the kept words are a multiple of n_i), then taken mod n_i;
        the few rows whose word was rejected draw again."""
        n = np.asarray(n, dtype=np.int64)
        if n.size and n.min() < 1:
            raise ValueError("every bound must be at least 1")
        bound = n.astype(np.uint64)
        floor = (np.uint64(0) - bound) % bound  # 2^64 mod n
        out = np.empty(n.shape, dtype=np.uint64)
        todo = np.arange(n.size)
        while todo.size:
            words = self.uint64(todo.size)
            kept = words >= floor[todo]
            out[todo[kept]] = words[kept] % bound[todo[kept]]
            todo = todo[~kept]
        return out.astype(np.int64)

    def unit_floats(self, n: int) -> np.ndarray:
        """``n`` independent uniform floats in [0, 1), multiples of 2^-53."""
        return (self.uint64(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53


RandomLike = None | int | np.random.Generator | RandomSource


def random_source(rng: RandomLike = None) -> RandomSource:
    """The source for ``rng``: None is the OS CSPRNG; an int seed or a Generator is for tests only."""
    if rng is None:
        return RandomSource()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return RandomSource(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return RandomSource(np.random.default_rng(int(rng)))  # test-only: a seeded draw is not private
    raise ValueError(f"rng must be None (OS randomness), an int seed or a numpy Generator, got {rng!r}")


def stream_source(seed: int | None, stream: int) -> RandomSource:
    """The OS CSPRNG when ``seed`` is None; for tests, an independent repeatable stream of ``seed``.

    Steps that draw in several places (a shard each, a salt) name each place by its ``stream``.
    """
    if seed is None:
        return RandomSource()
    return RandomSource(np.random.default_rng([seed, stream]))  # test-only: a seeded draw is not private
