"""The arenas that hold the buffers shared with workers: carving, reuse, and which ones may be freed.

The leak they fix is a CUDA IPC matter (a killed consumer keeps PyTorch's count of a shared block
up), so only the bookkeeping can be checked here, on CPU tensors; the GPU half is the controls
benchmark judging many full-shape verdicts in one process (docs/evaluator.md).
"""

from __future__ import annotations

import pytest
import torch

from kernelflow.eval.session.ipc_arena import ALIGN, ArenaPool, bytes_needed


def test_carved_tensors_are_aligned_disjoint_and_writable():
    pool = ArenaPool(torch.device("cpu"))
    arena = pool.acquire(bytes_needed([((3, 5), torch.float32), ((7,), torch.int64), ((2, 2), torch.float64)]))
    a = arena.carve((3, 5), torch.float32)
    b = arena.carve((7,), torch.int64)
    c = arena.carve((2, 2), torch.float64)
    for t in (a, b, c):
        assert (t.data_ptr() - arena.memory.data_ptr()) % ALIGN == 0
    a.fill_(1.5)
    b.fill_(-3)
    c.fill_(2.25)
    assert a.sum().item() == pytest.approx(22.5) and b.sum().item() == -21 and c.sum().item() == 9.0
    assert b.dtype == torch.int64 and tuple(c.shape) == (2, 2)


def test_carving_past_the_end_is_refused():
    pool = ArenaPool(torch.device("cpu"))
    arena = pool.acquire(16)
    arena.carve((arena.nbytes // 4,), torch.float32)
    with pytest.raises(ValueError, match="cannot hold"):
        arena.carve((1,), torch.float32)


def test_bytes_needed_counts_alignment_padding():
    assert bytes_needed([((1,), torch.float32)]) == 4
    assert bytes_needed([((1,), torch.float32), ((1,), torch.float32)]) == ALIGN + 4


def test_a_released_arena_is_reused_from_the_start_instead_of_allocating():
    pool = ArenaPool(torch.device("cpu"))
    first = pool.acquire(1000)
    first.carve((250,), torch.float32)
    pool.release(first, clean=False)
    again = pool.acquire(500)
    assert again is first and pool.allocated == 1
    assert again.carve((1,), torch.float32).data_ptr() == first.memory.data_ptr()


def test_busy_arenas_are_never_handed_out_twice():
    pool = ArenaPool(torch.device("cpu"))
    a = pool.acquire(100)
    b = pool.acquire(100)
    assert a is not b and pool.allocated == 2


def test_a_larger_request_frees_clean_arenas_but_keeps_dirty_ones():
    pool = ArenaPool(torch.device("cpu"))
    clean, dirty = pool.acquire(100), pool.acquire(100)
    pool.release(clean, clean=True)
    pool.release(dirty, clean=False)
    big = pool.acquire(clean.nbytes + 1)
    assert big is not clean and big is not dirty
    pool.release(big, clean=True)
    # the clean one was dropped when the big one was made; the dirty one is still there for reuse
    assert pool.reserved_bytes == big.nbytes + dirty.nbytes
    assert pool.acquire(10) is dirty


def test_dirty_stays_dirty_after_a_clean_session():
    pool = ArenaPool(torch.device("cpu"))
    arena = pool.acquire(10)
    pool.release(arena, clean=False)
    pool.release(pool.acquire(10), clean=True)
    assert arena.dirty
