"""The model's own log-sum-exp, kept from PyTorch's CPU flash attention (posviz.observe.tiled.normalisers): the output
of ``scaled_dot_product_attention`` is the same bit for bit, the normalisers are those of a float64 softmax, and
calls that take another kernel keep nothing."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

from posviz.observe.tiled.normalisers import flash_cpu, keeping_normalisers

needs_flash = pytest.mark.skipif(flash_cpu() is None, reason=f"PyTorch {torch.__version__} has no CPU flash attention operator")


def _qkv(heads: int = 4, kv: int = 2, n: int = 50, d: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (2 * torch.randn(2, heads, n, d, generator=g), 2 * torch.randn(2, kv, n, d, generator=g),
            torch.randn(2, kv, n, d, generator=g))


@needs_flash
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gqa", [True, False])
def test_the_output_is_unchanged_and_the_normalisers_are_those_of_the_float64_logits(causal, gqa):
    q, k, v = _qkv(kv=2 if gqa else 4)
    kwargs = {"enable_gqa": True} if gqa else {}
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3, **kwargs)
        with keeping_normalisers() as kept:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3, **kwargs)
    assert torch.equal(out, expected)
    assert len(kept) == 1 and kept[0].causal is causal and kept[0].scale == 0.3
    s = q.double() @ k.double().repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2) * 0.3
    if causal:
        s = s.masked_fill(torch.ones(50, 50, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(kept[0].lse.double(), torch.logsumexp(s, -1), rtol=0, atol=1e-5)


@needs_flash
def test_calls_that_take_another_kernel_keep_nothing_and_are_unchanged():
    q, k, v = _qkv(kv=4)
    mask = torch.ones(50, 50, dtype=torch.bool).tril()
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        with keeping_normalisers() as kept:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out, expected) and kept == [None]
    q.requires_grad_(True)
    with keeping_normalisers() as kept:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()  # the gradient is PyTorch's own
    assert kept == [None] and q.grad is not None


@needs_flash
def test_another_threads_attention_is_not_kept():
    q, k, v = _qkv(kv=4)
    seen = []
    with torch.no_grad(), keeping_normalisers() as kept:
        worker = threading.Thread(target=lambda: seen.append(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
        worker.start()
        worker.join()
    assert kept == [] and len(seen) == 1


def test_pytorchs_own_function_is_back_after_the_block_even_when_it_raises():
    original = F.scaled_dot_product_attention
    with pytest.raises(RuntimeError, match="inside"):
        with keeping_normalisers():
            assert F.scaled_dot_product_attention is not original
            raise RuntimeError("inside")
    assert F.scaled_dot_product_attention is original


@pytest.mark.skipif(flash_cpu() is not None, reason="this PyTorch has the CPU flash attention operator")
def test_without_the_flash_operator_nothing_is_kept():
    q, k, v = _qkv(kv=4)
    with torch.no_grad(), keeping_normalisers() as kept:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert kept == [None] and out.shape == q.shape
