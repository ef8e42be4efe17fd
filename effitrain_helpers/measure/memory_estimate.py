"""Will it fit? Bytes per device of a model trained with DDP or ZeRO stages 1-3 (lesson 5.1, ``effitrain memory``).

Parameters, gradients and optimizer state per device, from the ZeRO paper's accounting (Rajbhandari et al.,
*ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, 2020, section 3 and figure 1), for
``Ψ`` parameters on ``N`` devices with ``p`` bytes per parameter, ``g`` per gradient and ``K`` of optimizer
state per parameter:

===========  ==========================  ============================================
DDP          p·Ψ + g·Ψ + K·Ψ              every device keeps full copies (ZeRO stage 0)
ZeRO-1       p·Ψ + g·Ψ + K·Ψ/N            the optimizer state is sharded
ZeRO-2       p·Ψ + (g + K)·Ψ/N            + the gradients
ZeRO-3       (p + g + K)·Ψ/N              + the parameters (FSDP)
===========  ==========================  ============================================

The optimizers (:data:`OPTIMIZERS`): ``mixed`` is mixed-precision Adam as the paper counts it (16-bit
parameters and gradients, float32 master weights and two float32 moments: p, g, K = 2, 2, 12); ``fp32`` is
Adam in float32 (4, 4, 8, what lesson 5.1 trains); ``8bit`` is mixed precision with bitsandbytes' 8-bit moments
(lesson 4.3: 1 byte per value and one float32 ``absmax`` per block of 256, for each moment) next to the float32
master weights: K = 4 + 2 x (1 + 4/256).

The paper's example (7.5 B parameters, 64 devices, ``mixed``): 120 GB per device under DDP, 31.4 GB with
ZeRO-1, 16.6 GB with ZeRO-2, 1.9 GB with ZeRO-3 (1 GB = 10⁹ bytes).

Activations (:func:`activation_bytes`), when the transformer's shape is given, are the estimate of
Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models* (2022, section 4.1),
the formula the Ultra-Scale Playbook (Hugging Face, 2025, "Memory usage in Transformers") uses:
``L · s · b · h · (34 + 5 · a · s / h)`` bytes for ``L`` layers, sequence ``s``, micro-batch ``b`` per device,
hidden size ``h`` and ``a`` attention heads, with 16-bit activations, no recomputation and no tensor
parallelism. Data parallelism and ZeRO do not shard activations: every device keeps its micro-batch's.
Not counted: temporary buffers (a ZeRO-3 device also holds its gathered layers while they run), the memory
allocator's fragmentation and the framework's own few hundred MB.
"""

from __future__ import annotations

from dataclasses import dataclass

from effitrain_helpers.core.language import msg, number, tr
from effitrain_helpers.core.validate import positive_int
from effitrain_helpers.measure.optimizer_memory import BNB_BLOCK_SIZE

GB = 1e9  # the ZeRO paper's and the Playbook's gigabyte
# Bounds far above any model trained so far (a few 10¹² parameters, 10⁵ GPUs), so that every figure stays finite
MAX_PARAMETERS = 1e15
MAX_DEVICES = 10**7
MAX_SHAPE = {"layers": 10**5, "hidden": 10**7, "heads": 10**5, "sequence": 10**8, "micro_batch": 10**6}
ABSMAX_BYTES = 4  # bitsandbytes' float32 absmax, one per block of BNB_BLOCK_SIZE values


@dataclass(frozen=True)
class OptimizerBytes:
    """Bytes per parameter: ``parameter`` (p), ``gradient`` (g) and ``state`` (K) as the ZeRO paper counts."""

    parameter: float
    gradient: float
    state: float
    what: str


OPTIMIZERS = {
    "mixed": OptimizerBytes(2, 2, 12, msg("mixed-precision Adam: 16-bit parameters and gradients, float32 master "
                                          "weights and two float32 moments (the ZeRO paper's K = 12)")),
    "fp32": OptimizerBytes(4, 4, 8, msg("Adam in float32: parameters, gradients and two moments in float32")),
    "8bit": OptimizerBytes(2, 2, 4 + 2 * (1 + ABSMAX_BYTES / BNB_BLOCK_SIZE),
                           msg("mixed precision with 8-bit Adam: float32 master weights and two 8-bit moments, "
                               "each with a float32 absmax per block of 256 values (bitsandbytes)")),
}
STAGES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")
FORMULAS = {"DDP": "p·Ψ + g·Ψ + K·Ψ", "ZeRO-1": "p·Ψ + g·Ψ + K·Ψ/N", "ZeRO-2": "p·Ψ + (g + K)·Ψ/N",
            "ZeRO-3": "(p + g + K)·Ψ/N"}
ACTIVATION_FORMULA = "L·s·b·h·(34 + 5·a·s/h)"
RECOMPUTE = ("none", "selective", "full")  # activation recomputation: what a layer keeps for backward
KINDS = (msg("parameters"), msg("gradients"), msg("optimizer state"), msg("total"))  # keys, shown translated
WITH_ACTIVATIONS = (msg("activations"), msg("total with activations"))


def count_parameters(parameters) -> float:
    """``parameters`` as a number >= 1 (a float: ``7.5e9`` is a fine count); ``ValueError`` naming it otherwise."""
    try:
        value = float(parameters)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(parameters, bool) or not 1 <= value <= MAX_PARAMETERS:
        raise ValueError(tr("parameters={value!r} must be a number of parameters from 1 to {most:g}. Fix: e.g. "
                            "--parameters 7.5e9.", value=parameters, most=MAX_PARAMETERS))
    return value


def check_optimizer(optimizer) -> OptimizerBytes:
    """The bytes per parameter of ``optimizer`` (a key of :data:`OPTIMIZERS`); ``ValueError`` naming it otherwise."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(tr("optimizer={value!r} is not one of {allowed}. Fix: e.g. --optimizer mixed.",
                            value=optimizer, allowed=", ".join(OPTIMIZERS)))
    return OPTIMIZERS[optimizer]


def stage_bytes(parameters, devices: int, stage: str, optimizer: str = "mixed") -> dict[str, float]:
    """Bytes per device of parameters, gradients and optimizer state (and their ``total``) for ``parameters``
    trained on ``devices`` devices under ``stage`` (one of :data:`STAGES`) with ``optimizer``."""
    psi = count_parameters(parameters)
    n = positive_int("devices", devices, maximum=MAX_DEVICES, example="--devices 64")
    bytes_per = check_optimizer(optimizer)
    if stage not in STAGES:
        raise ValueError(tr("stage={value!r} is not one of {allowed}. Fix: e.g. stage='ZeRO-3'.",
                            value=stage, allowed=", ".join(STAGES)))
    level = STAGES.index(stage)  # 0 = DDP: nothing sharded; 1 state; 2 + gradients; 3 + parameters
    held = {"parameters": psi * bytes_per.parameter / (n if level >= 3 else 1),
            "gradients": psi * bytes_per.gradient / (n if level >= 2 else 1),
            "optimizer state": psi * bytes_per.state / (n if level >= 1 else 1)}
    return {**held, "total": sum(held.values())}


def activation_bytes(layers: int, hidden: int, heads: int, sequence: int, micro_batch: int) -> float:
    """Activation bytes one device keeps for backward (Korthikanti et al. 2022, see the module docstring):
    ``layers · sequence · micro_batch · hidden · (34 + 5 · heads · sequence / hidden)``."""
    positive_int("layers", layers, maximum=MAX_SHAPE["layers"], example="--layers 1")
    return layers * layer_activation_bytes(hidden, heads, sequence, micro_batch)


def layer_activation_bytes(hidden: int, heads: int, sequence: int, micro_batch: int, tp: int = 1, cp: int = 1,
                           recompute: str = "none", sequence_parallel: bool = True) -> float:
    """Bytes one transformer layer keeps for backward for one micro-batch, 16-bit, after Korthikanti et al. 2022
    (sections 4-5): ``s·b·h·(34 + 5·a·s/h)`` divided by ``tp`` (tensor parallelism with sequence parallelism) and
    by ``cp`` (context parallelism: ``s/cp`` tokens per rank, their scores against every key); ``recompute``
    ``"selective"`` drops the attention's ``5·a·s/h`` term (scores, softmax, dropout recomputed), ``"full"`` keeps
    only the layer's input, ``2·s·b·h``. ``sequence_parallel=False`` is tensor parallelism alone, whose layer
    norms, dropouts and residuals stay whole on every rank: ``s·b·h·(10 + 24/t + 5·a·s/(h·t))`` (equation 2)."""
    for name, value in (("hidden", hidden), ("heads", heads), ("sequence", sequence), ("micro_batch", micro_batch),
                        ("tp", tp), ("cp", cp)):
        positive_int(name, value, maximum=MAX_SHAPE.get(name), example=f"--{name.replace('_', '-')} 1")
    if recompute not in RECOMPUTE:
        raise ValueError(tr("recompute={value!r} is not one of {allowed}. Fix: e.g. --recompute selective.",
                            value=recompute, allowed=", ".join(RECOMPUTE)))
    s, b, h = sequence / cp, micro_batch, hidden
    scores = 0 if recompute == "selective" else 5 * heads * sequence / h
    if recompute == "full":
        return 2 * s * b * h / (tp if sequence_parallel else 1)
    if sequence_parallel:
        return s * b * h * (34 + scores) / tp
    return s * b * h * (10 + 24 / tp + scores / tp)


def will_it_fit(parameters, devices: int, optimizer: str = "mixed", shape: dict | None = None) -> dict:
    """The table ``effitrain memory`` prints: per stage, bytes per device by kind and in total (plus the
    activations of ``shape``, a dict of :func:`activation_bytes` 's arguments, when given), with the formula."""
    psi = count_parameters(parameters)
    bytes_per = check_optimizer(optimizer)
    activations = activation_bytes(**shape) if shape else None
    rows = []
    for stage in STAGES:
        row = {"stage": stage, **stage_bytes(psi, devices, stage, optimizer), "formula": FORMULAS[stage]}
        if activations is not None:
            row["activations"] = activations
            row["total with activations"] = row["total"] + activations
        rows.append(row)
    return {"parameters": psi, "devices": devices, "optimizer": optimizer,
            "bytes_per_parameter": {"p": bytes_per.parameter, "g": bytes_per.gradient, "K": bytes_per.state},
            "shape": shape, "activation_formula": ACTIVATION_FORMULA if shape else None, "rows": rows}


def fit_table(report: dict) -> str:
    """:func:`will_it_fit` 's report as text: what was assumed, one line per stage in GB with its formula."""
    k = report["bytes_per_parameter"]
    lines = [tr("{parameters:,.0f} parameters (Ψ) on {devices} devices (N); {what}",
                parameters=report["parameters"], devices=report["devices"],
                what=tr(OPTIMIZERS[report["optimizer"]].what)),
             tr("bytes per parameter: p = {p:g}, g = {g:g}, K = {K:g}; 1 GB = 10⁹ bytes", **k), ""]
    kinds = KINDS + (WITH_ACTIVATIONS if report["shape"] else ())
    cells = [[number(row[k] / GB, ",.2f") for k in kinds] for row in report["rows"]]
    widths = [max(12, 2 + max(len(tr(kind)), *(len(c[i]) for c in cells))) for i, kind in enumerate(kinds)]
    lines.append(f"{tr('GB per device'):<16}" + "".join(f"{tr(k):>{w}}" for k, w in zip(kinds, widths))
                 + f"   {tr('formula')}")
    for row, values in zip(report["rows"], cells):
        lines.append(f"{row['stage']:<16}" + "".join(f"{v:>{w}}" for v, w in zip(values, widths))
                     + f"   {row['formula']}")
    if report["shape"]:
        s = report["shape"]
        lines += ["", tr("activations: {formula} with L = {layers}, s = {sequence}, b = {micro_batch}, "
                         "h = {hidden}, a = {heads} (Korthikanti et al. 2022, as in the Ultra-Scale Playbook; "
                         "16-bit, no recomputation)", formula=report["activation_formula"], **s)]
    lines += ["", tr("Not counted: buffers gathered while a layer runs, allocator fragmentation, the framework.")]
    return "\n".join(lines)
