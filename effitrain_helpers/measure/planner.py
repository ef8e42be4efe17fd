"""Which parallel configuration fits, and how fast? (lesson 7.3, ``effitrain plan``)

Given a transformer (parameters Ψ, layers L, hidden size h, heads a, sequence s, vocabulary V), a cluster (N
devices of M bytes, n per node, two link bandwidths, a peak FLOP/s) and a global batch in tokens, :func:`plan`
lists every configuration ``DP x TP x PP x CP`` (x ZeRO stage x activation recomputation) whose memory fits,
with its memory per device by part, its communication per step by dimension, its pipeline bubble, an estimated
step time and MFU, ranked fastest first. The arithmetic, and what it leaves out:

**Memory per device** (bytes; the ZeRO paper's p, g, K bytes per parameter, :mod:`.memory_estimate`):

- parameters held by the busiest rank: ``Ψ_stage / TP`` where ``Ψ_stage = (Ψ - 2·V·h) / PP + V·h`` when
  ``PP > 1`` (the input embedding sits on the first stage, the output projection on the last; untied, each
  ``V·h``), ``Ψ`` otherwise. Norms and biases are counted as split by TP too (they are replicated: the
  fake-world check measures what that costs);
- ZeRO shards over the ``DP·CP`` ranks that hold the same parameters (as Megatron's distributed optimizer):
  stage 1 the optimizer state, 2 also the gradients, 3 also the parameters.
- activations (Korthikanti et al. 2022, *Reducing Activation Recomputation in Large Transformer Models*,
  sections 4-5; the Ultra-Scale Playbook uses the same), 16-bit, per layer and micro-batch of ``b`` sequences:
  ``s·b·h·(34 + 5·a·s/h)`` without recomputation, divided by ``TP`` (tensor parallelism with sequence
  parallelism, Megatron's default) and by ``CP`` (each rank keeps ``s/CP`` tokens, its queries' scores against
  every key); selective recomputation (attention's scores, softmax and dropout recomputed) drops the ``5·a·s/h``
  term: ``34·s·b·h / (TP·CP)``; full recomputation keeps only each layer's input: ``2·s·b·h / (TP·CP)``.
  A pipeline stage holds ``L/PP`` layers for every micro-batch in flight: under 1F1B the first stage holds
  ``min(PP, m)`` micro-batches, the last one; the last also keeps the logits (``4·s·b·V / (TP·CP)``, as the
  paper counts the output layer and cross-entropy). The device is the busier of the two.
- A configuration fits when the total is at most ``(1 - RESERVED)`` of the device's memory: :data:`RESERVED`
  is left for what is not counted (buffers gathered while a layer runs, the allocator's fragmentation, the
  framework).

**Communication per step** (bytes each device sends; ring collectives: an all-reduce sends ``2(n-1)/n`` of its
payload, an all-gather or reduce-scatter ``(n-1)/n``; activations and gradients travel in 16 bits):

- TP: per layer and micro-batch, two all-gathers and two reduce-scatters of ``s·b·h`` values in forward and as
  many in backward (sequence parallelism, Korthikanti et al. 2022: four of each, the same bytes as Megatron's two
  all-reduces forward and two backward), six of each with full recomputation (the forward runs again);
- CP: per layer and micro-batch, each rank's keys and values (``2·s·b·h / (TP·CP)`` values) go round the ring
  to the other ``CP - 1`` ranks in forward, and in backward both again and their gradients (ring attention's
  backward recomputes with the travelling keys and values and sends the accumulating dK, dV round too): three
  times the forward's bytes in all (multi-head attention; grouped-query attention would send less);
- PP: per micro-batch one activation forward and one gradient backward of ``s·b·h / (TP·CP)`` values;
- DP: the gradients of the rank's parameters (16 bits) all-reduced over ``DP·CP`` once per step (ZeRO 0-1),
  reduce-scattered and the new parameters all-gathered (ZeRO-2, the same bytes); under ZeRO-3, for every
  micro-batch, the parameters all-gathered in forward and again in backward and the gradients reduce-scattered
  (no full gradient is kept between micro-batches): ``3m`` times ``(n-1)/n`` of the parameters' bytes, the ZeRO
  paper's 1.5x of DP's for ``m = 1``.

**Time**: compute is ``6·Ψ'·tokens`` FLOPs (Kaplan et al. 2020's 6ND: forward 2, backward 4 per parameter and
token, ``Ψ' = Ψ - V·h`` leaving out the input embedding, a lookup rather than a product; the output layer's
``V·h`` is a product and counts; attention's ``s²`` work left out, as MFU counts it), plus one forward more
(``2·Ψ'·tokens``) for full recomputation and attention's score products again for selective, run at
``peak x efficiency`` on every device; the bubble ``(PP - 1) / (m + PP - 1)`` stretches it by
``1 / (1 - bubble)``; TP, CP and PP traffic waits on the critical
path; DP traffic overlaps with the backward pass (its excess over the backward's time is exposed). A dimension's
link is the node's (``intra``) while its group fits in one node, the network's (``inter``) otherwise; ranks are
placed TP innermost, then CP, DP, PP outermost (Megatron's order). MFU = ``6·Ψ'·tokens / (step time x
N x peak)``. These are estimates to rank configurations, not promises: kernels, overlap and the network
decide the real figure.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from effitrain_helpers.core.language import msg, number, tr
from effitrain_helpers.core.validate import positive_int, positive_number
from effitrain_helpers.measure.memory_estimate import (GB, RECOMPUTE, STAGES, check_optimizer, count_parameters,
                                                       layer_activation_bytes, stage_bytes)

RESERVED = 0.10  # share of each device's memory left for what the plan does not count
ACTIVATION_BYTES = 2  # activations, their gradients and what travels between ranks: 16-bit
PARTS = ("parameters", "gradients", "optimizer state", "activations")
PART_TERMS = (msg("parameters"), msg("gradients"), msg("optimizer state"), msg("activations"))  # shown translated
TABLE_TERMS = PART_TERMS + (msg("configuration"), msg("bubble"), msg("step s"), msg("first pick"), msg("model"),
                            msg("devices"), msg("GB per device"))  # lesson 7.3's table labels
# defaults: an H100 SXM node (bf16 dense peak, NVLink 4 per direction) and one 400 Gb/s InfiniBand link per GPU
PEAK_TFLOPS = 989.0
INTRA_GBPS = 450.0
INTER_GBPS = 50.0
EFFICIENCY = 0.6  # share of the peak the matrix products reach


@dataclass(frozen=True)
class Model:
    """A transformer's shape: ``parameters`` in all (embeddings included), ``layers``, ``hidden`` size,
    attention ``heads``, ``seq`` (sequence length in tokens) and ``vocab`` (vocabulary size)."""

    parameters: float
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int

    def __post_init__(self) -> None:
        count_parameters(self.parameters)
        for name in ("layers", "hidden", "heads", "seq", "vocab"):
            positive_int(name, getattr(self, name), example=f"--{name} {EXAMPLE[name]}")
        if self.hidden % self.heads:
            raise ValueError(tr("hidden={hidden} is not a multiple of heads={heads}: each head gets hidden/heads "
                                "values. Fix: e.g. --hidden 8192 --heads 64.", hidden=self.hidden, heads=self.heads))
        if self.parameters <= 2 * self.vocab * self.hidden:
            raise ValueError(tr("parameters={parameters:g} leave nothing for the layers: the embeddings alone "
                                "(2 x vocab x hidden) are {embeddings:g}. Fix: give the whole model's count, "
                                "e.g. --parameters 70e9.", parameters=self.parameters,
                                embeddings=2 * self.vocab * self.hidden))


@dataclass(frozen=True)
class Cluster:
    """``devices`` of ``memory_gb`` (10⁹ bytes) each, ``devices_per_node`` per node, links of ``intra_gbps``
    inside a node and ``inter_gbps`` between nodes (GB/s each device sends), ``peak_tflops`` per device (16-bit)
    of which the matrix products reach ``efficiency``."""

    devices: int
    memory_gb: float
    devices_per_node: int = 8
    intra_gbps: float = INTRA_GBPS
    inter_gbps: float = INTER_GBPS
    peak_tflops: float = PEAK_TFLOPS
    efficiency: float = EFFICIENCY

    def __post_init__(self) -> None:
        positive_int("devices", self.devices, example="--devices 64")
        positive_int("devices_per_node", self.devices_per_node, example="--devices-per-node 8")
        for name in ("memory_gb", "intra_gbps", "inter_gbps", "peak_tflops", "efficiency"):
            positive_number(name, getattr(self, name), example=f"--{name.replace('_', '-')} {EXAMPLE[name]}")
        if self.efficiency > 1:
            raise ValueError(tr("efficiency={value:g} is above 1: it is the share of the peak reached. Fix: e.g. "
                                "--efficiency 0.6.", value=self.efficiency))


EXAMPLE = {"layers": 80, "hidden": 8192, "heads": 64, "seq": 4096, "vocab": 128256, "memory_gb": 80,
           "intra_gbps": INTRA_GBPS, "inter_gbps": INTER_GBPS, "peak_tflops": PEAK_TFLOPS,
           "efficiency": EFFICIENCY}


@dataclass(frozen=True)
class Layout:
    """One configuration: the four degrees, the ZeRO stage (0-3), the recomputation and the micro-batch size."""

    dp: int
    tp: int
    pp: int
    cp: int
    zero: int
    recompute: str
    micro_batch: int = 1

    def name(self) -> str:
        return (f"DP{self.dp} TP{self.tp} PP{self.pp} CP{self.cp} ZeRO-{self.zero} "
                f"recompute {self.recompute}")


@dataclass
class Estimate:
    """What :func:`estimate` says of one :class:`Layout`: bytes per device by part, whether it fits, micro-batches
    ``m`` per step and tokens per step, bubble, bytes sent per step and seconds by dimension, step time, MFU."""

    layout: Layout
    memory: dict[str, float]
    total: float
    fits: bool
    micro_batches: int
    tokens_per_step: int
    bubble: float
    communication: dict[str, float]
    communication_seconds: dict[str, float]
    compute_seconds: float
    step_seconds: float
    mfu: float
    links: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.layout.name(), **asdict(self.layout), "memory_bytes": self.memory,
                "total_bytes": self.total, "fits": self.fits, "micro_batches": self.micro_batches,
                "tokens_per_step": self.tokens_per_step, "bubble": self.bubble,
                "communication_bytes": self.communication, "communication_seconds": self.communication_seconds,
                "links": self.links, "compute_seconds": self.compute_seconds, "step_seconds": self.step_seconds,
                "mfu": self.mfu}


def bubble(pp: int, micro_batches: int) -> float:
    """The share of a step a pipeline stage idles, for equal stages (GPipe and 1F1B alike):
    ``(pp - 1) / (m + pp - 1)``."""
    return (pp - 1) / (micro_batches + pp - 1)


def parameters_per_rank(model: Model, layout: Layout, stage: int = 0) -> float:
    """Parameters a rank of pipeline ``stage`` holds before ZeRO: its layers' share and, on the first and the last
    stage, an embedding of ``V·h``, all split by TP (stage 0 is the busiest; see the module docstring)."""
    embedding = model.vocab * model.hidden
    ends = (stage == 0) + (stage == layout.pp - 1)
    return ((model.parameters - 2 * embedding) / layout.pp + ends * embedding) / layout.tp


def memory_per_device(model: Model, layout: Layout, micro_batches: int, optimizer: str = "mixed") -> dict:
    """Bytes per device of parameters, gradients, optimizer state and activations for ``layout`` with
    ``micro_batches`` per step: the busier of the first and the last pipeline stage."""
    held = stage_bytes(parameters_per_rank(model, layout), layout.dp * layout.cp, STAGES[layout.zero], optimizer)
    per_layer = layer_activation_bytes(model.hidden, model.heads, model.seq, layout.micro_batch, layout.tp,
                                       layout.cp, layout.recompute)
    layers = model.layers / layout.pp
    logits = 4 * model.seq * layout.micro_batch * model.vocab / (layout.tp * layout.cp)
    first = layers * per_layer * min(layout.pp, micro_batches)
    last = layers * per_layer + logits
    return {"parameters": held["parameters"], "gradients": held["gradients"],
            "optimizer state": held["optimizer state"], "activations": max(first, last)}


def micro_batches_per_step(model: Model, layout: Layout, global_batch_tokens: float) -> int:
    """``m``, the micro-batches each data-parallel rank runs per step: the global batch in sequences of
    ``model.seq`` tokens (rounded, at least one), split over the DP ranks, ``layout.micro_batch`` at a time."""
    sequences = max(1, round(global_batch_tokens / model.seq))
    return max(1, round(sequences / (layout.dp * layout.micro_batch)))


def _link(group_span: int, cluster: Cluster) -> str:
    return "intra" if group_span <= cluster.devices_per_node else "inter"


def estimate(model: Model, cluster: Cluster, layout: Layout, global_batch_tokens: float,
             optimizer: str = "mixed") -> Estimate:
    """Memory, communication, bubble, step time and MFU of ``layout`` (see the module docstring for every
    formula). ``ValueError`` naming the dimension when the layout does not divide the model or the cluster."""
    _check_layout(model, cluster, layout)
    m = micro_batches_per_step(model, layout, global_batch_tokens)
    tokens = m * layout.dp * layout.micro_batch * model.seq
    memory = memory_per_device(model, layout, m, optimizer)
    total = sum(memory.values())
    tp, cp, dp, pp, b = layout.tp, layout.cp, layout.dp, layout.pp, layout.micro_batch
    values = model.seq * b * model.hidden  # one micro-batch's activations of one layer, all ranks together
    layers = model.layers / pp
    sent = {"tp": 0.0, "cp": 0.0, "pp": 0.0, "dp": 0.0}
    if tp > 1:
        passes = 12 if layout.recompute == "full" else 8  # all-gathers + reduce-scatters, forward and backward
        sent["tp"] = layers * m * passes * (tp - 1) / tp * values / cp * ACTIVATION_BYTES
    if cp > 1:
        rounds = 3  # keys and values forward; keys, values and their gradients backward
        sent["cp"] = layers * m * rounds * (cp - 1) * 2 * values / (tp * cp) * ACTIVATION_BYTES
    if pp > 1:
        sent["pp"] = m * 2 * values / (tp * cp) * ACTIVATION_BYTES
    replicas = dp * cp
    if replicas > 1:
        gradient_bytes = parameters_per_rank(model, layout) * ACTIVATION_BYTES
        payloads = 3 * m if layout.zero == 3 else 2  # see the module docstring
        sent["dp"] = payloads * (replicas - 1) / replicas * gradient_bytes
    links = {"tp": _link(tp, cluster), "cp": _link(tp * cp, cluster), "dp": _link(tp * cp * dp, cluster),
             "pp": _link(cluster.devices, cluster)}
    rate = {"intra": cluster.intra_gbps * GB, "inter": cluster.inter_gbps * GB}
    seconds = {k: v / rate[links[k]] for k, v in sent.items()}
    flops = 6 * (model.parameters - model.vocab * model.hidden) * tokens
    extra = {"none": 0.0, "selective": 4 * model.seq ** 2 * model.hidden * model.layers * tokens / model.seq,
             "full": flops / 3}[layout.recompute]  # one forward more: 2·Ψ'·tokens
    speed = cluster.devices * cluster.peak_tflops * 1e12
    compute = (flops + extra) / (speed * cluster.efficiency)
    stage_bubble = bubble(pp, m)
    backward = compute * 2 / 3
    step = (compute / (1 - stage_bubble) + seconds["tp"] + seconds["cp"] + seconds["pp"]
            + max(0.0, seconds["dp"] - backward))
    return Estimate(layout, memory, total, total <= (1 - RESERVED) * cluster.memory_gb * GB, m, tokens,
                    stage_bubble, sent, seconds, compute, step, flops / (step * speed), links)


def _check_layout(model: Model, cluster: Cluster, layout: Layout) -> None:
    for name in ("dp", "tp", "pp", "cp", "micro_batch"):
        positive_int(name, getattr(layout, name), example=f"--{name.replace('_', '-')} 1")
    if layout.zero not in range(4):
        raise ValueError(tr("zero={value!r} is not a ZeRO stage: 0, 1, 2 or 3. Fix: e.g. --zero 1.",
                            value=layout.zero))
    product = layout.dp * layout.tp * layout.pp * layout.cp
    if product != cluster.devices:
        raise ValueError(tr("DP x TP x PP x CP = {dp} x {tp} x {pp} x {cp} = {product}, not the {devices} devices. "
                            "Fix: choose degrees whose product is --devices.", dp=layout.dp, tp=layout.tp,
                            pp=layout.pp, cp=layout.cp, product=product, devices=cluster.devices))
    for name, degree, whole, what in (("tp", layout.tp, model.heads, "heads"),
                                      ("pp", layout.pp, model.layers, "layers"),
                                      ("cp", layout.cp, model.seq, "seq")):
        if whole % degree:
            raise ValueError(tr("{name}={degree} does not divide {what}={whole}: each rank needs an equal share. "
                                "Fix: choose a divisor of {whole}.", name=name, degree=degree, what=what,
                                whole=whole))


def _powers_of_two(limit: int) -> list[int]:
    return [2 ** k for k in range(int(math.log2(limit)) + 1)]


def layouts(model: Model, cluster: Cluster, fixed: dict | None = None) -> list[Layout]:
    """Every layout the search tries: TP and CP powers of two dividing the heads and the sequence, PP a divisor
    of the layers, DP the rest of the devices; ZeRO 0-3 and each recomputation; ``fixed`` (``{"tp": 8, ...}``,
    keys dp, tp, pp, cp, zero, recompute, micro_batch) pins dimensions instead of searching them."""
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    unknown = set(fixed) - {"dp", "tp", "pp", "cp", "zero", "recompute", "micro_batch"}
    if unknown:
        raise ValueError(tr("cannot fix {names}: the dimensions are dp, tp, pp, cp, zero, recompute, "
                            "micro_batch.", names=", ".join(sorted(unknown))))
    n = cluster.devices
    choices = {"tp": [t for t in _powers_of_two(n) if model.heads % t == 0],
               "cp": [c for c in _powers_of_two(n) if model.seq % c == 0],
               "pp": [p for p in range(1, min(n, model.layers) + 1) if model.layers % p == 0 and n % p == 0],
               "zero": list(range(4)), "recompute": list(RECOMPUTE), "micro_batch": [1]}
    for name, value in fixed.items():
        if name != "dp":
            choices[name] = [value]
    found = []
    for tp in choices["tp"]:
        for cp in choices["cp"]:
            for pp in choices["pp"]:
                if n % (tp * cp * pp):
                    continue
                dp = n // (tp * cp * pp)
                if fixed.get("dp", dp) != dp:
                    continue
                found += [Layout(dp, tp, pp, cp, z, r, b) for z in choices["zero"] for r in choices["recompute"]
                          for b in choices["micro_batch"]]
    return found


def plan(model: Model, cluster: Cluster, global_batch_tokens: float, fixed: dict | None = None,
         optimizer: str = "mixed") -> dict:
    """Every configuration that fits, ranked fastest first (then the fewest bytes sent, the lowest ZeRO stage, the
    least memory: among equals, the simplest), with the reason for the first
    pick in one line. With every dimension ``fixed`` it judges that one configuration, fitting or not.
    ``ValueError`` with one line when nothing fits, saying by how much the smallest configuration misses."""
    positive_number("global_batch_tokens", global_batch_tokens, example="--global-batch-tokens 4e6")
    check_optimizer(optimizer)
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    if set(fixed) >= {"dp", "tp", "pp", "cp", "zero", "recompute"}:  # all fixed: judge that one configuration
        layout = Layout(fixed["dp"], fixed["tp"], fixed["pp"], fixed["cp"], fixed["zero"], fixed["recompute"],
                        fixed.get("micro_batch", 1))
        one = estimate(model, cluster, layout, global_batch_tokens, optimizer)
        return _report(model, cluster, global_batch_tokens, optimizer, [one], 1, judged=True)
    candidates = layouts(model, cluster, fixed)
    if not candidates:
        raise ValueError(tr("no layout of {devices} devices matches the fixed dimensions {fixed}: DP x TP x PP x CP "
                            "must equal the devices, TP divide the heads, PP the layers, CP the sequence. Fix: "
                            "loosen or change them.", devices=cluster.devices, fixed=fixed))
    sequences = max(1, round(global_batch_tokens / model.seq))
    estimates = [estimate(model, cluster, layout, global_batch_tokens, optimizer) for layout in candidates
                 if layout.dp * layout.micro_batch <= sequences]
    if not estimates:
        raise ValueError(tr("a global batch of {tokens:g} tokens is {sequences} sequence(s) of {seq}: fewer than the "
                            "data-parallel ranks of every layout. Fix: a larger --global-batch-tokens.",
                            tokens=global_batch_tokens, sequences=sequences, seq=model.seq))
    fitting = [e for e in estimates if e.fits]
    if not fitting:
        least = min(estimates, key=lambda e: e.total)
        raise ValueError(tr("{parameters:,.0f} parameters do not fit on {devices} devices of {memory:g} GB in any "
                            "configuration: the smallest ({name}) needs {need:.1f} GB per device, {usable:.1f} GB "
                            "usable. Fix: more devices, more memory per device, or a smaller model or sequence.",
                            parameters=model.parameters, devices=cluster.devices, memory=cluster.memory_gb,
                            name=least.layout.name(), need=least.total / GB,
                            usable=(1 - RESERVED) * cluster.memory_gb))
    fitting.sort(key=lambda e: (e.step_seconds, sum(e.communication.values()), e.layout.zero, e.total))
    return _report(model, cluster, global_batch_tokens, optimizer, fitting, len(estimates), judged=False)


def reason(first: Estimate, runner_up: Estimate | None, cluster: Cluster, judged: bool = False) -> str:
    """One line: why the first configuration is picked (fastest estimated step, where its dimensions sit), or,
    for one ``judged`` configuration, whether it fits."""
    if judged and not first.fits:
        return tr("does not fit: {gb:.1f} GB per device, {usable:.1f} GB usable of {memory:g}",
                  gb=first.total / GB, usable=(1 - RESERVED) * cluster.memory_gb, memory=cluster.memory_gb)
    where = [tr("TP {tp} on the node's links", tp=first.layout.tp)] if first.layout.tp > 1 else []
    if first.layout.cp > 1:
        where.append(tr("CP {cp}", cp=first.layout.cp))
    if first.layout.pp > 1:
        where.append(tr("PP {pp} with a bubble of {bubble:.0%}", pp=first.layout.pp, bubble=first.bubble))
    where.append(tr("DP {dp} for the rest", dp=first.layout.dp))
    what = tr("fits") if judged else tr("fastest estimated step")
    line = tr("{what} ({seconds:.2f} s, MFU {mfu:.0%}) in {gb:.0f} of {memory:g} GB: {where}",
              what=what, seconds=first.step_seconds, mfu=first.mfu, gb=first.total / GB, memory=cluster.memory_gb,
              where=", ".join(where))
    if runner_up is not None:
        line += tr("; next: {name} at {seconds:.2f} s", name=runner_up.layout.name(), seconds=runner_up.step_seconds)
    return line


def _report(model, cluster, tokens, optimizer, ranked, tried, judged) -> dict:
    return {"model": asdict(model), "cluster": asdict(cluster), "global_batch_tokens": tokens,
            "optimizer": optimizer, "reserved": RESERVED, "tried": tried, "fitting": len(ranked), "judged": judged,
            "reason": reason(ranked[0], ranked[1] if len(ranked) > 1 else None, cluster, judged),
            "configurations": [e.to_dict() for e in ranked]}


def plan_table(report: dict, top: int = 10) -> str:
    """:func:`plan` 's report as text: the reason, then one line per configuration (GB per part, bubble, step
    time, MFU), the ``top`` first, numbers and labels in the learner's language."""
    lines = [tr("{fitting} of {tried} configurations fit ({reserved:.0%} of each device's memory kept free); "
                "first pick: {reason}", fitting=report["fitting"], tried=report["tried"],
                reserved=report["reserved"], reason=report["reason"]), ""]
    labels = [tr(term) for term in PART_TERMS] + [tr("total GB"), tr("fits"), "m", tr("bubble"), tr("step s"), "MFU"]
    widths = [max(8, len(label) + 2) for label in labels]
    lines.append(f"{tr('configuration'):<46}" + "".join(f"{label:>{w}}" for label, w in zip(labels, widths)))
    for row in report["configurations"][:top]:
        cells = [number(row["memory_bytes"][p] / GB, ".1f") for p in PARTS]
        cells += [number(row["total_bytes"] / GB, ".1f"), tr("yes") if row["fits"] else tr("no"),
                  str(row["micro_batches"]), number(row["bubble"], ".1%"), number(row["step_seconds"], ".2f"),
                  number(row["mfu"], ".0%")]
        lines.append(f"{row['name']:<46}" + "".join(f"{cell:>{w}}" for cell, w in zip(cells, widths)))
    return "\n".join(lines)
