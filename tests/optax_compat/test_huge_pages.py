"""The fused engine's packed CPU buffers are advised onto transparent huge pages, as advice only."""

from __future__ import annotations

import pytest
import torch

from optax_compat._runtime import huge_pages

MIB = 1 << 20


@pytest.fixture
def advised(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Records the ``madvise`` calls instead of making them."""
    calls: list[tuple[int, int, int]] = []

    def record(start: int, length: int, advice: int) -> int:
        calls.append((start, length, advice))
        return 0

    monkeypatch.setattr(huge_pages, "_madvise", lambda: record)
    return calls


class _Subclass(torch.Tensor):
    """A tensor subclass (as DTensor is one): its memory is not advised."""


def _values(numel: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(numel)
    return [torch.randn(numel // 3, generator=generator),
            torch.randn(numel - numel // 3, generator=generator)]


@pytest.mark.parametrize("make", ["cat", "zeros_like", "copy_of"])
def test_large_buffers_are_advised_on_whole_huge_pages_inside_them(
        advised: list[tuple[int, int, int]], make: str) -> None:
    pieces = _values(3 * MIB)  # 12 MiB of float32
    whole = torch.cat(pieces)
    buffer = {"cat": lambda: huge_pages.cat(pieces),
              "zeros_like": lambda: huge_pages.zeros_like(whole),
              "copy_of": lambda: huge_pages.copy_of(whole)}[make]()
    expected = torch.zeros_like(whole) if make == "zeros_like" else whole
    assert torch.equal(buffer, expected) and buffer.is_contiguous()
    assert buffer.data_ptr() not in (piece.data_ptr() for piece in [whole, *pieces])
    [(start, length, advice)] = advised
    assert advice == 14  # MADV_HUGEPAGE
    assert start % huge_pages.HUGE_PAGE == 0 and length % huge_pages.HUGE_PAGE == 0
    assert buffer.data_ptr() <= start
    assert start + length <= buffer.data_ptr() + buffer.numel() * buffer.itemsize
    assert length >= 12 * MIB - 2 * huge_pages.HUGE_PAGE


def test_small_buffers_other_devices_and_subclasses_are_plain(
        advised: list[tuple[int, int, int]]) -> None:
    small = torch.arange(1000.0)
    assert torch.equal(huge_pages.copy_of(small), small)
    meta = torch.empty(3 * MIB, device="meta")
    assert huge_pages.zeros_like(meta).device.type == "meta"
    subclassed = torch.ones(3 * MIB).as_subclass(_Subclass)
    copy = huge_pages.copy_of(subclassed)
    assert type(copy) is _Subclass and torch.equal(copy, subclassed)
    assert advised == []


def test_without_madvise_the_buffers_are_the_plain_torch_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huge_pages, "_madvise", lambda: None)
    pieces = _values(3 * MIB)
    assert torch.equal(huge_pages.cat(pieces), torch.cat(pieces))
    assert torch.equal(huge_pages.copy_of(pieces[0]), pieces[0])
    assert torch.equal(huge_pages.zeros_like(pieces[1]), torch.zeros_like(pieces[1]))
