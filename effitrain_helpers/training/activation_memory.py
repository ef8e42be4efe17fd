"""What does one transformer block keep for backward, tensor by tensor, next to its formula? (lesson 8.2)

- :func:`traced_terms`: :class:`~effitrain_helpers.engines.recomputation.Block` run once in training mode under
  :class:`~effitrain_helpers.measure.saved_memory.SavedTensors`; each tensor it saved (in order) is matched to its
  row of :func:`~effitrain_helpers.engines.recomputation.block_terms`: tensor, formula term, shape, bytes measured
  and predicted;
- :func:`measured_bytes`: the total a block (any module) keeps for one ``(b, s, h)`` input, parameters apart;
- :func:`recomputation_compared`: no, selective and full recomputation, measured and predicted;
- :func:`split_compared`: one tensor-parallel rank's share measured, and what sequence parallelism would keep;
- :func:`code_of`: a function's code without its docstring (what the lesson prints of the blocks).
"""

from __future__ import annotations

import torch

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.engines.recomputation import BLOCK_INPUT, KEPT, RECOMPUTE, Block, block_terms
from effitrain_helpers.measure.saved_memory import SavedTensors

# lesson 8.2's table labels (styled(..., terms=TABLE_TERMS) shows them in the learner's language)
TABLE_TERMS = (msg("tensor"), msg("term"), msg("paper"), msg("shape"), msg("measured"), msg("predicted"),
               msg("recompute"), msg("of none"), msg("tensor parallel, measured"), msg("tensor parallel, predicted"),
               msg("sequence parallel too, predicted"), BLOCK_INPUT, *(row[0] for row in KEPT))


def measured_bytes(block, s: int, b: int, seed: int = 0) -> SavedTensors:
    """Run ``block`` (training mode) on a ``(b, s, hidden)`` input that requires grad; the
    :class:`SavedTensors` count of what it kept for backward, its parameters apart."""
    generator = torch.Generator().manual_seed(seed)
    hidden = next(block.parameters()).shape[-1]
    x = torch.randn(b, s, hidden, generator=generator, requires_grad=True)
    block.train()
    with SavedTensors(block.parameters()) as counter:
        out = block(x)
    del out
    return counter


def traced_terms(s: int, b: int, h: int, a: int, recompute: str = "none", tensor_parallel: int = 1) -> list[dict]:
    """Each tensor a :class:`Block` of shape (s, b, h, a) kept, next to the formula's term for it: rows of
    ``tensor, term, paper, shapes, measured, predicted`` (bytes)."""
    torch.manual_seed(0)
    counter = measured_bytes(Block(h, a, recompute=recompute, tensor_parallel=tensor_parallel), s, b)
    terms = block_terms(s, b, h, a, recompute, t=tensor_parallel)
    if len(counter.saved) != sum(r["storages"] for r in terms):
        raise RuntimeError(tr("the block kept {got} tensors, its formula counts {want}: this torch saves other "
                              "tensors than torch 2.13 did. Compare SavedTensors.saved with block_terms().",
                              got=len(counter.saved), want=sum(r["storages"] for r in terms)))
    rows, saved = [], iter(counter.saved)
    for term in terms:
        kept = [next(saved) for _ in range(term["storages"])]
        rows.append({"tensor": term["tensor"], "term": term["term"], "paper": term["paper"],
                     "shape": " + ".join("x".join(map(str, shape)) + f" {dtype}" for shape, dtype, _ in kept),
                     "measured": sum(nbytes for *_, nbytes in kept), "predicted": term["bytes"]})
    return rows


def recomputation_compared(s: int, b: int, h: int, a: int) -> list[dict]:
    """For each recomputation mode: the bytes the block keeps, measured and predicted."""
    rows = []
    for mode in RECOMPUTE:
        torch.manual_seed(0)
        block = Block(h, a, recompute=mode)
        rows.append({"recompute": mode, "measured": measured_bytes(block, s, b).activation_bytes,
                     "predicted": sum(r["bytes"] for r in block_terms(s, b, h, a, mode))})
    return rows


def split_compared(s: int, b: int, h: int, a: int, degrees=(1, 2, 4)) -> list[dict]:
    """Per rank, for each tensor-parallel degree t: a rank's share measured (its a/t heads and 4h/t MLP columns,
    built in this process), predicted, and sequence parallelism's prediction (the rest split along the sequence)."""
    rows = []
    for t in degrees:
        torch.manual_seed(0)
        measured = measured_bytes(Block(h, a, tensor_parallel=t), s, b).activation_bytes
        rows.append({"t": t, "tensor parallel, measured": measured,
                     "tensor parallel, predicted": sum(r["bytes"] for r in block_terms(s, b, h, a, t=t)),
                     "sequence parallel too, predicted": sum(r["bytes"] for r in block_terms(
                         s, b, h, a, t=t, sequence_parallel=True))})
    return rows


def code_of(fn) -> str:
    """``fn``'s source, dedented, without its docstring: the block's code as the lesson prints it (the docstring is
    English prose; the code reads the same in every language)."""
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(fn))
    body = ast.parse(source).body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0].value, "value", None), str):
        lines = source.splitlines()
        del lines[body[0].lineno - 1:body[0].end_lineno]
        source = "\n".join(lines) + "\n"
    return source
