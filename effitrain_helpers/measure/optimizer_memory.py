"""How many bytes does this optimizer keep? (lessons 4.1 AdamW, 4.2 Adafactor, 4.3 8-bit Adam)

Two answers that the lessons put side by side:

- **measured**: :func:`state_bytes` adds up the bytes of every tensor in ``optimizer.state`` (after at least
  one ``optimizer.step()``: optimizers create their state lazily). A tensor that several parameters share
  (bitsandbytes' quantisation maps) is counted once. Python numbers in the state (Adafactor's and
  bitsandbytes' ``step`` counters) hold no tensor memory and count 0.
- **theory**: what each optimizer's source says it stores, from the parameter shapes alone
  (:func:`adamw_state_bytes`, :func:`adafactor_state_bytes`, :func:`adamw8bit_state_bytes`):

  ============  =====================================================================================
  AdamW         ``exp_avg`` and ``exp_avg_sq``: 2 x 4 bytes per parameter, plus a float32 ``step``
                tensor (4 bytes) per parameter tensor (torch >= 1.12, not fused or capturable).
  Adafactor     ``transformers.Adafactor``: for a tensor with 2 or more dimensions, ``exp_avg_sq_row``
                (shape ``shape[:-1]``) and ``exp_avg_sq_col`` (shape ``shape[:-2] + shape[-1:]``)
                instead of a full second moment; for a vector, the full ``exp_avg_sq``. Plus ``RMS``,
                a float32 0-d tensor, per tensor. ``exp_avg`` (4 bytes per parameter) only when
                ``beta1`` is set (default ``None``: no first moment).
  AdamW8bit     ``bitsandbytes.optim.AdamW8bit``: tensors with at least ``min_8bit_size`` (4096)
                elements keep ``state1``/``state2`` as uint8 (1 byte per parameter each) plus one
                float32 ``absmax`` per block of 256 values for each; smaller tensors keep float32
                ``state1``/``state2`` (8 bytes per parameter). The two 256-entry float32 quantisation
                maps (``qmap1``, ``qmap2``) are shared by all tensors of one optimizer: 2 KiB once.
  ============  =====================================================================================

Nothing here imports bitsandbytes: the theory needs only shapes.
"""

from __future__ import annotations

import math
from typing import Iterable

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.validate import positive_int, whole_number

STEP_TENSOR_BYTES = 4  # torch.optim.AdamW keeps `step` as a float32 0-d tensor per parameter tensor
ADAFACTOR_RMS_BYTES = 4  # transformers.Adafactor keeps `RMS` as a float32 0-d tensor per parameter tensor
BNB_BLOCK_SIZE = 256  # bitsandbytes Optimizer2State.init_state: one absmax per 256 values
BNB_MIN_8BIT_SIZE = 4096  # bitsandbytes default min_8bit_size: smaller tensors keep 32-bit state
BNB_QMAP_BYTES = 2 * 256 * 4  # qmap1 ("dynamic") and qmap2 ("udynamic"): 256 float32 each, once per optimizer
OPTIMIZER_NAMES = ("adamw", "adafactor", "adamw8bit")


def _shape(shape) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(tr("shape={shape!r} must be a tuple of whole numbers, e.g. (768, 3072) or (768,).",
                           shape=shape)) from None
    if not dims or any(d < 1 for d in dims):
        raise ValueError(tr("shape={shape!r} must have at least one dimension, all >= 1 (e.g. (768, 3072)).",
                            shape=shape))
    return dims


def _trainable(params) -> list:
    """The distinct trainable tensors of a module or an iterable of tensors (tied weights once)."""
    import torch

    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    if isinstance(params, torch.Tensor):
        params = [params]
    seen, out = set(), []
    for p in params:
        if isinstance(p, dict):  # a parameter group
            out.extend(q for q in _trainable(p["params"]) if id(q) not in seen and not seen.add(id(q)))
            continue
        if not isinstance(p, torch.Tensor):
            raise TypeError(tr("expected a module, tensors or parameter groups; got {kind} {value!r}.",
                               kind=type(p).__name__, value=p))
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def n_parameters(params) -> int:
    """Number of trainable values in a module or an iterable of tensors."""
    return sum(p.numel() for p in _trainable(params))


def parameter_bytes(params) -> int:
    """Bytes of the trainable parameters themselves (float32: 4 per value)."""
    return sum(p.numel() * p.element_size() for p in _trainable(params))


def _state_tensors(optimizer):
    import torch

    for param_state in optimizer.state.values():
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor):
                yield key, value


def state_bytes(optimizer) -> int:
    """Measured: bytes of all tensors in ``optimizer.state``, each storage counted once (lessons 4.1-4.3).

    Call it after ``optimizer.step()``: before the first step the state is empty and this returns 0.
    """
    return sum(state_bytes_by_key(optimizer).values())


def state_bytes_by_key(optimizer) -> dict[str, int]:
    """Measured bytes per state name (``exp_avg``, ``state1``, ``absmax1``, ...), shared storages once."""
    if not hasattr(optimizer, "state") or not hasattr(optimizer.state, "values"):
        raise TypeError(tr("expected a torch optimizer (with .state); got {kind}.", kind=type(optimizer).__name__))
    seen: set[tuple[int, int]] = set()
    out: dict[str, int] = {}
    for key, t in _state_tensors(optimizer):
        storage = t.untyped_storage()
        ident = (storage.data_ptr(), storage.nbytes())
        if ident in seen:
            continue
        seen.add(ident)
        out[key] = out.get(key, 0) + storage.nbytes()
    return out


def state_dtypes(optimizer) -> dict[str, str]:
    """The dtype of each state name, e.g. ``{'state1': 'uint8', 'absmax1': 'float32'}`` (mixed: 'a, b')."""
    found: dict[str, set[str]] = {}
    for key, t in _state_tensors(optimizer):
        found.setdefault(key, set()).add(str(t.dtype).replace("torch.", ""))
    return {k: ", ".join(sorted(v)) for k, v in found.items()}


def adamw_state_bytes(params, step_bytes: int = STEP_TENSOR_BYTES) -> int:
    """Theory for ``torch.optim.AdamW`` (lesson 4.1): 8 bytes per parameter + ``step_bytes`` per tensor."""
    tensors = _trainable(params)
    return sum(8 * p.numel() for p in tensors) + step_bytes * len(tensors)


def adafactor_second_moment_numel(shape) -> int:
    """How many values Adafactor keeps for the second moment of a tensor of ``shape`` (lesson 4.2).

    2 or more dimensions: row statistics (``shape[:-1]``) + column statistics (``shape[:-2] + shape[-1:]``);
    a vector: all its values. ``(r, c)`` gives ``r + c`` instead of Adam's ``r * c``.
    """
    dims = _shape(shape)
    if len(dims) < 2:
        return dims[0]
    return math.prod(dims[:-1]) + math.prod(dims[:-2]) * dims[-1]


def adafactor_state_bytes(params, beta1: float | None = None) -> int:
    """Theory for ``transformers.Adafactor`` (lesson 4.2): factored second moment, RMS, and ``exp_avg`` if
    ``beta1`` is set; float32 (4 bytes) each."""
    total = 0
    for p in _trainable(params):
        total += 4 * adafactor_second_moment_numel(p.shape) + ADAFACTOR_RMS_BYTES
        if beta1 is not None:
            total += 4 * p.numel()
    return total


def adamw8bit_tensor_bytes(numel: int, min_8bit_size: int = BNB_MIN_8BIT_SIZE, block_size: int = BNB_BLOCK_SIZE) -> int:
    """Theory for one tensor under ``bitsandbytes.optim.AdamW8bit`` (lesson 4.3), without the shared maps:
    ``numel < min_8bit_size``: 2 float32 states (8 bytes per value); otherwise 2 uint8 states (2 bytes per
    value) plus 2 float32 absmax per block of ``block_size`` values."""
    positive_int("numel", numel, hint=tr("numel=768 * 3072, the values in one tensor"))
    whole_number("min_8bit_size", min_8bit_size, minimum=0,
                 hint=tr("{call}, bitsandbytes' default", call=f"min_8bit_size={BNB_MIN_8BIT_SIZE}"))
    positive_int("block_size", block_size,
                 hint=tr("{call}, bitsandbytes' default", call=f"block_size={BNB_BLOCK_SIZE}"))
    if numel < min_8bit_size:
        return 8 * numel
    return 2 * numel + 2 * 4 * math.ceil(numel / block_size)


def adamw8bit_state_bytes(params, min_8bit_size: int = BNB_MIN_8BIT_SIZE, block_size: int = BNB_BLOCK_SIZE,
                          keep_32bit: Iterable = ()) -> int:
    """Theory for ``bitsandbytes.optim.AdamW8bit`` (lesson 4.3): :func:`adamw8bit_tensor_bytes` per tensor,
    plus the two shared quantisation maps (2 KiB) once if any tensor is 8-bit. ``keep_32bit``: tensors forced
    to 32-bit state (``Trainer(optim="adamw_bnb_8bit")`` does that for embedding weights)."""
    forced = {id(p) for p in keep_32bit}
    total, any_8bit = 0, False
    for p in _trainable(params):
        size = min_8bit_size if id(p) not in forced else p.numel() + 1
        total += adamw8bit_tensor_bytes(p.numel(), size, block_size)
        any_8bit |= p.numel() >= size
    return total + (BNB_QMAP_BYTES if any_8bit else 0)


def check_optimizer_name(name) -> str:
    """``name`` lower-cased if it is one of :data:`OPTIMIZER_NAMES`; otherwise a ``ValueError`` saying which are."""
    if not isinstance(name, str) or name.strip().lower() not in OPTIMIZER_NAMES:
        raise ValueError(tr("optimizer {name!r} is not known; allowed: {allowed}. Fix: pick one of those names "
                            "(e.g. 'adamw').", name=name, allowed=", ".join(OPTIMIZER_NAMES)))
    return name.strip().lower()


def expected_state_bytes(name: str, params, **options) -> int:
    """Theory for optimizer ``name`` (one of :data:`OPTIMIZER_NAMES`); ``options`` go to the matching function
    (``beta1`` for Adafactor; ``min_8bit_size``, ``block_size``, ``keep_32bit`` for AdamW8bit)."""
    name = check_optimizer_name(name)
    return {"adamw": adamw_state_bytes, "adafactor": adafactor_state_bytes,
            "adamw8bit": adamw8bit_state_bytes}[name](params, **options)


def state_table(optimizer, model) -> list[dict]:
    """One row per named parameter of ``model``: its shape and dtype, and what the optimizer keeps for it
    (state names with dtypes, bytes not counting shared maps). Lesson 4.3 shows it: parameters float32,
    states uint8."""
    import torch

    rows = []
    shared = {id(v) for s in optimizer.state.values() for k, v in s.items() if k.startswith("qmap")}
    for name, p in model.named_parameters():
        state = optimizer.state.get(p, {})
        tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor) and id(v) not in shared}
        rows.append({"name": name, "shape": tuple(p.shape), "numel": p.numel(),
                     "param_dtype": str(p.dtype).replace("torch.", ""),
                     "state": {k: str(v.dtype).replace("torch.", "") for k, v in tensors.items()},
                     "state_bytes": sum(v.untyped_storage().nbytes() for v in tensors.values())})
    return rows
