"""`compare`'s all-finite fast path gives exactly the verdict of its general path.

The fast path exists for speed on 6.4 GB outputs (fewer passes, one sync per chunk); these tests pin
that it never changes a result: same pass/fail, same max error, same worst index and value, same
NaN/Inf counts, on outputs that pass, fail, contain NaN or Inf, meet a NaN/Inf reference, or sit on
a zero bound, in one chunk and across many chunks where both paths mix.
"""

from __future__ import annotations

import pytest
import torch

from kernelflow.eval import correctness
from kernelflow.eval.correctness import compare
from kernelflow.tasks import Tolerance

TOL = Tolerance(atol=1e-5, rtol=1e-4)


def _general(out, ref, tolerance, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(correctness, "_all_finite_chunk", lambda *a: None)
        return compare(out, ref, tolerance)


def _cases():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(64, 97, generator=g, dtype=torch.float64) * 3
    close = (ref * (1 + 1e-6)).to(torch.float32)
    yield "passing", close, ref, TOL
    wrong = close.clone()
    wrong[5, 7] += 1.0
    yield "one wrong element", wrong, ref, TOL
    yield "zeros", torch.zeros(64, 97), ref, TOL
    nan_out = close.clone()
    nan_out[3, 3] = float("nan")
    yield "NaN in the output", nan_out, ref, TOL
    inf_out = close.clone()
    inf_out[60, 1] = float("inf")
    yield "Inf in the output", inf_out, ref, TOL
    ref_inf = ref.clone()
    ref_inf[0, 0] = float("inf")
    out_inf = close.clone()
    out_inf[0, 0] = float("inf")
    yield "matching Inf", out_inf, ref_inf, TOL
    yield "Inf reference missed", close, ref_inf, TOL
    ref_zero = ref.clone()
    ref_zero[2, :] = 0.0
    exact = ref_zero.to(torch.float32)
    yield "zero bound, exact", exact, ref_zero, Tolerance(atol=0.0, rtol=1e-4)
    off = exact.clone()
    off[2, 5] = 1e-30
    yield "zero bound, off", off, ref_zero, Tolerance(atol=0.0, rtol=1e-4)
    tie = (ref * 0).to(torch.float32)
    tie_ref = torch.ones_like(ref)
    yield "all elements equally wrong (first index wins)", tie, tie_ref, TOL


CASES = list(_cases())


@pytest.mark.parametrize("chunk", [1 << 26, 97, 64])
@pytest.mark.parametrize(("name", "out", "ref", "tol"), CASES, ids=[c[0] for c in CASES])
def test_fast_path_agrees_with_the_general_path(name, out, ref, tol, chunk, monkeypatch):
    monkeypatch.setattr(correctness, "_CHUNK_ELEMS", chunk)
    fast = compare(out, ref, tol).__dict__
    general = _general(out, ref, tol, monkeypatch).__dict__
    # NaN != NaN, so a NaN worst value is compared by its string
    assert {k: repr(v) for k, v in fast.items()} == {k: repr(v) for k, v in general.items()}, name


def test_the_fast_path_is_taken_for_finite_chunks_and_declines_otherwise():
    r = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    o = torch.tensor([1.0, -2.0, 3.5], dtype=torch.float64)
    max_err, v, i = correctness._all_finite_chunk(o, r, TOL)
    assert max_err == pytest.approx(0.5) and i == 2 and v > 1
    o[0] = float("nan")
    assert correctness._all_finite_chunk(o, r, TOL) is None
    assert correctness._all_finite_chunk(r.clone(), torch.zeros(3, dtype=torch.float64),
                                         Tolerance(atol=0.0, rtol=1e-4)) is None
