"""What does a transformer block keep for backward, and what does recomputation drop? (lesson 8.2)

:class:`Block` is a GPT-style transformer block written operation by operation in float32, so that every
tensor autograd keeps can be named: layer norm, the q/k/v projection, attention (scores, softmax, dropout,
the product with v), the output projection and its dropout, a second layer norm, an MLP of width 4h with GELU
and dropout, two residual additions. Inputs are ``(b, s, h)``: batch, sequence, hidden.

``recompute`` chooses what is kept (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models"):

- ``"none"``: everything each operation saves;
- ``"selective"``: attention's core (softmax, dropout, the product with v) runs under
  ``torch.utils.checkpoint.checkpoint``: only q, k and v are kept and the ``a s^2`` terms are recomputed in
  backward;
- ``"full"``: the whole block runs under ``checkpoint``: only its input is kept.

:func:`block_terms` is the count, one row per kept tensor: Korthikanti's ``s b h (34 + 5 a s / h)`` written for
this block in float32 (4 bytes a value; a dropout mask 4 bytes on a CPU, 1 on a GPU), plus the two layer norms'
statistics, which the paper leaves out. :class:`SwiGLUBlock` is the lesson's exercise: another block (no dropout, a SwiGLU MLP of
width ``ffn``) whose bytes the learner predicts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from effitrain_helpers.core.language import msg, tr

RECOMPUTE = ("none", "selective", "full")
VALUE = 4  # bytes of a float32 value


def _check_shape(hidden: int, heads: int) -> None:
    if heads < 1 or hidden % heads:
        raise ValueError(tr("hidden={hidden} is not a multiple of heads={heads}; choose heads dividing the hidden "
                            "size (each head gets hidden / heads values).", hidden=hidden, heads=heads))


def _heads(x, heads: int):
    """``(b, s, h)`` -> ``(b, a, s, h / a)``, contiguous."""
    b, s, h = x.shape
    return x.view(b, s, heads, h // heads).transpose(1, 2).contiguous()


def attention_core(q, k, v, dropout: float, training: bool):
    """softmax(q kᵀ / sqrt(d)) v for ``(b, a, s, d)`` tensors, with dropout on the probabilities: the part
    whose saved tensors grow as ``a s^2`` (scores recomputed under selective recomputation)."""
    probabilities = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return F.dropout(probabilities, dropout, training) @ v


class Block(nn.Module):
    """A GPT-style block (pre-layer-norm, GELU MLP of width 4h, dropout after attention's probabilities, after
    the output projection and after the MLP). ``recompute`` is one of :data:`RECOMPUTE`.

    ``tensor_parallel=t`` builds one rank's share under Megatron's tensor parallelism: its a/t heads (q/k/v columns,
    output-projection rows) and 4h/t of the MLP's width. The all-reduces that would sum the ranks' outputs after
    the output projection and after fc2 save nothing for backward, so one process measures a rank's bytes."""

    def __init__(self, hidden: int, heads: int, dropout: float = 0.1, recompute: str = "none",
                 tensor_parallel: int = 1) -> None:
        super().__init__()
        _check_shape(hidden, heads)
        if tensor_parallel < 1 or heads % tensor_parallel:
            raise ValueError(tr("tensor_parallel={t} does not divide heads={heads}; choose a divisor of the heads.",
                                t=tensor_parallel, heads=heads))
        if recompute not in RECOMPUTE:
            raise ValueError(tr("recompute={recompute!r} is not one of {allowed}.", recompute=recompute,
                                allowed=", ".join(RECOMPUTE)))
        t = tensor_parallel
        self.heads, self.dropout, self.recompute = heads // t, dropout, recompute
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden // t), nn.Linear(hidden // t, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden // t), nn.Linear(4 * hidden // t, hidden)

    def forward(self, x):
        if self.recompute == "full":
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)

    def _forward(self, x):
        b, s, _ = x.shape
        q, k, v = (_heads(t, self.heads) for t in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        if self.recompute == "selective":
            context = checkpoint(attention_core, q, k, v, self.dropout, self.training, use_reentrant=False)
        else:
            context = attention_core(q, k, v, self.dropout, self.training)
        context = context.transpose(1, 2).reshape(b, s, -1)
        x = x + F.dropout(self.proj(context), self.dropout, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.dropout, self.training)


class SwiGLUBlock(nn.Module):
    """Another block (lesson 8.2's exercise): pre-layer-norm, no dropout, and a SwiGLU MLP of width ``ffn``:
    fc_down(silu(fc_gate(x)) * fc_up(x)), as LLaMA's blocks."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        _check_shape(hidden, heads)
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.gate, self.up = nn.Linear(hidden, ffn), nn.Linear(hidden, ffn)
        self.down = nn.Linear(ffn, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = (_heads(t, self.heads) for t in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        x = x + self.proj(attention_core(q, k, v, 0.0, False).transpose(1, 2).reshape(b, s, h))
        y = self.ln2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


# Each tensor Block keeps: what it is, how many values (a multiple of sbh, as2b or sb: a per-row statistic),
# Korthikanti's 16-bit bytes for it (0: the paper counts nothing), whether tensor parallelism splits it, whether
# it is a dropout mask (4 bytes a value on a CPU, 1 on a GPU) rather than a float32 tensor.
KEPT = (  # in the order the forward saves them; the last field: how many tensors (storages) the row counts
    (msg("layer norm 1 input"), 1, "sbh", 2, False, False, 1),
    (msg("layer norm 1 mean and 1/std"), 2, "sb", 0, False, False, 2),
    (msg("q/k/v projection input"), 1, "sbh", 2, False, False, 1),
    (msg("q and k"), 2, "sbh", 4, True, False, 2),
    (msg("softmax output (probabilities)"), 1, "as²b", 2, True, False, 1),
    (msg("attention dropout mask"), 1, "as²b", 1, True, True, 1),
    (msg("v"), 1, "sbh", 2, True, False, 1),
    (msg("dropped probabilities (times v)"), 1, "as²b", 2, True, False, 1),
    (msg("output projection input"), 1, "sbh", 2, True, False, 1),
    (msg("attention output dropout mask"), 1, "sbh", 1, False, True, 1),
    (msg("layer norm 2 input"), 1, "sbh", 2, False, False, 1),
    (msg("layer norm 2 mean and 1/std"), 2, "sb", 0, False, False, 2),
    (msg("MLP input (fc1)"), 1, "sbh", 2, False, False, 1),
    (msg("GELU input (fc1 output)"), 4, "sbh", 8, True, False, 1),
    (msg("fc2 input (GELU output)"), 4, "sbh", 8, True, False, 1),
    (msg("MLP dropout mask"), 1, "sbh", 1, False, True, 1),
)
BLOCK_INPUT = msg("block input x")  # all that full recomputation keeps
RECOMPUTED = {"softmax output (probabilities)", "attention dropout mask", "dropped probabilities (times v)"}
CPU_MASK_BYTES = 4  # F.dropout on a CPU multiplies by a float32 tensor of 0 and 1/(1-p), which autograd keeps
GPU_MASK_BYTES = 1  # torch's fused native_dropout (CUDA) keeps a bool mask


def block_terms(s: int, b: int, h: int, a: int, recompute: str = "none", t: int = 1,
                sequence_parallel: bool = False, mask_bytes: int = CPU_MASK_BYTES) -> list[dict]:
    """What :class:`Block` keeps for backward, one row per tensor: ``tensor`` (what it is), ``term`` (its bytes as
    a formula in s, b, h, a), ``paper`` (Korthikanti's 16-bit term for it, "-" where the paper counts nothing)
    ``bytes`` and ``storages`` (how many saved tensors the row counts). ``t``: the tensor-parallel degree (the tensors inside attention and the MLP are split t ways;
    with ``sequence_parallel`` the others too, along the sequence); ``mask_bytes``: 4 on a CPU, 1 on a GPU."""
    if recompute not in RECOMPUTE:
        raise ValueError(tr("recompute={recompute!r} is not one of {allowed}.", recompute=recompute,
                            allowed=", ".join(RECOMPUTE)))
    sizes = {"sbh": s * b * h, "as²b": a * s * s * b, "sb": s * b}
    if recompute == "full":
        return [{"tensor": BLOCK_INPUT, "term": "4sbh", "paper": "2sbh", "bytes": VALUE * sizes["sbh"],
                 "storages": 1}]
    rows = []
    for name, count, unit, paper, split, mask, storages in KEPT:
        if recompute == "selective" and name in RECOMPUTED:
            continue
        coefficient = count * (mask_bytes if mask else VALUE)
        parts = t if split or sequence_parallel else 1
        rows.append({"tensor": name, "term": f"{coefficient if coefficient > 1 else ''}{unit}",
                     "paper": f"{paper if paper > 1 else ''}{unit}" if paper else "-",
                     "bytes": coefficient * sizes[unit] // parts, "storages": storages})
    return rows


def block_bytes(s: int, b: int, h: int, a: int, recompute: str = "none", mask_bytes: int = CPU_MASK_BYTES) -> int:
    """:func:`block_terms` summed. No recomputation: ``s b h (72 + 12 a s / h) + 16 s b`` bytes on a CPU (float32
    dropout masks), ``s b h (66 + 9 a s / h) + 16 s b`` with a GPU's 1-byte masks, where Korthikanti's 16-bit
    count is ``s b h (34 + 5 a s / h)``; selective drops the ``a s^2 b`` terms; full keeps ``4 s b h``."""
    return sum(r["bytes"] for r in block_terms(s, b, h, a, recompute, mask_bytes=mask_bytes))
