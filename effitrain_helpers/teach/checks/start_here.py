"""The start page's one exercise (notebooks/00_start_here.ipynb): how check, hint and solution work."""

from __future__ import annotations

import math

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number


def _check_matrix_bytes(answer) -> None:
    n = as_number(answer)
    if math.isclose(n, 4_000_000):
        return
    if math.isclose(n, 1_000_000):
        raise Incorrect(tr("that is how many numbers the matrix holds; each float32 number takes 4 bytes."))
    if math.isclose(n, 4_000_000 / 2**20, rel_tol=1e-3) or math.isclose(n, 4.0):
        raise Incorrect(tr("give the answer in bytes, not MiB or MB."))
    if math.isclose(n, 8_000_000):
        raise Incorrect(tr("8 bytes is a float64 number; float32 takes 4."))
    if math.isclose(n, 32_000_000):
        raise Incorrect(tr("that counts bits: float32 is 32 bits, and a byte is 8 bits, so 4 bytes per number."))
    raise Incorrect(tr("{answer!r} bytes is not it: count the numbers, then multiply by the bytes of one float32.",
                       answer=answer))


q1 = Exercise(
    "start: bytes of a float32 matrix",
    _check_matrix_bytes,
    usage="q1.check(matrix_bytes)",
    hints=["A 1000 x 1000 matrix holds a million numbers.",
           "float32 means 32 bits, and a byte is 8 bits. PyTorch tells you too: "
           "torch.zeros(1, dtype=torch.float32).element_size() (see torch.Tensor.element_size in the docs).",
           "matrix_bytes = (number of values) * (bytes per value): 1000 * 1000 * ____."],
    solution_code="matrix_bytes = 1000 * 1000 * 4\nq1.check(matrix_bytes)",
)
