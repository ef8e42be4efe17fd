"""Exercises of lesson 1.1 (prepare models with AutoModel and Accelerator): q1 writes the lesson's calls
(`from_pretrained`, `Accelerator()`, `prepare`), q3 times a matrix product with `torch.utils.benchmark.Timer`,
q2 and q4 are the number and the order behind them."""

from __future__ import annotations

import contextlib
import math

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number

_ORDER = ("data sharding", "model replication", "gradient aggregation", "parameter synchronization")
STEP_NAMES = tuple(sorted(_ORDER))  # alphabetical: the order is the exercise
_WHY = {
    0: msg("before anything else, each device must get its own slice of the batch"),
    1: msg("a device can only compute gradients once it holds a copy of the model"),
    2: msg("the gradients of all devices are combined before any weight changes"),
    3: msg("the last step makes every copy hold the same updated weights"),
}
_PASS_FUNCTION = msg("pass your function itself (no parentheses); you gave {fn!r}.")


def _close(answer: float, want: float) -> bool:
    """Equal up to 0.1 %, or to rounding at one decimal."""
    return math.isclose(answer, want, rel_tol=1e-3) or abs(answer - want) <= 0.05


def _check_load_and_prepare(fn, path) -> None:
    """Run the learner's ``fn(path)`` for real and judge what it returns: (accelerator, model, tokenizer)."""
    import torch
    from accelerate import Accelerator

    if not callable(fn):
        raise Incorrect(tr(_PASS_FUNCTION, fn=fn))
    with _prepare_wraps_like_several_processes() as wrapper:
        got = fn(path)
    if not isinstance(got, tuple) or len(got) != 3:
        raise Incorrect(tr("your function should return (accelerator, model, tokenizer); it returned {got!r:.80}.",
                           got=got))
    accelerator, model, tokenizer = got
    if not isinstance(accelerator, Accelerator):
        raise Incorrect(tr("the first value should be an Accelerator; it is a {kind}.",
                           kind=type(accelerator).__name__))
    if not isinstance(model, torch.nn.Module):
        raise Incorrect(tr("the second value should be the model; it is a {kind}.", kind=type(model).__name__))
    if not callable(tokenizer) or not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise Incorrect(tr("the third value should be the tokenizer; it is a {kind}.", kind=type(tokenizer).__name__))
    if not any(m is model or m is getattr(model, "module", None) for m in accelerator._models):  # prepare's record
        raise Incorrect(tr("this model was not returned by accelerator.prepare(model): return what prepare gives "
                           "back."))
    if not isinstance(model, wrapper):
        raise Incorrect(tr("you prepared the model but returned the one you passed in: accelerator.prepare(model) "
                           "returns the model to train (in several processes a DistributedDataParallel wrapper "
                           "around yours; this check wraps it the same way), and the one you passed in is not "
                           "it. Keep what prepare gives back: model = accelerator.prepare(model)."))
    model = model.module
    devices = {p.device.type for p in model.parameters()}
    if devices != {accelerator.device.type}:
        raise Incorrect(tr("the parameters are on {devices}, not on the accelerator's {device}.",
                           devices=sorted(devices), device=accelerator.device))
    embeddings = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > embeddings:
        raise Incorrect(tr("the tokenizer has {tokens:,} tokens but the model only {embeddings:,} embeddings: "
                           "load both from the same `path`.", tokens=len(tokenizer), embeddings=embeddings))
    batch = tokenizer(["The engineer trained the model.", "A short one."], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch.to(accelerator.device))
    logits = getattr(out, "logits", None)
    if logits is None:
        raise Incorrect(tr("the model returns hidden states but no logits: AutoModel has no task head; use the "
                           "AutoModelFor... class of the task (sequence classification)."))
    if tuple(logits.shape) != (2, 2):
        raise Incorrect(tr("two sentences gave logits of shape {shape}; expected (2, 2): a classification head "
                           "with num_labels=2.", shape=tuple(logits.shape)))
    _check_pretrained_weights(model, path)


@contextlib.contextmanager
def _prepare_wraps_like_several_processes():
    """While the learner's function runs, ``Accelerator.prepare_model`` returns the model inside a wrapper (an
    ``nn.Module`` holding it as ``.module``, as DistributedDataParallel does in several processes), so a
    function that throws prepare's result away returns another object. Yields the wrapper class."""
    import torch
    from accelerate import Accelerator

    class Prepared(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    original = Accelerator.prepare_model

    def prepare_model(self, model, *args, **kwargs):
        return Prepared(original(self, model, *args, **kwargs))

    Accelerator.prepare_model = prepare_model
    try:
        yield Prepared
    finally:
        Accelerator.prepare_model = original


def _check_pretrained_weights(model, path) -> None:
    """The word embeddings are the checkpoint's (from_pretrained), not fresh random ones (from_config)."""
    import torch
    from transformers import AutoModel

    reference = AutoModel.from_pretrained(path).get_input_embeddings().weight
    mine = model.get_input_embeddings().weight.detach().to("cpu", torch.float32)
    if mine.shape != reference.shape or not torch.equal(mine, reference.detach().float()):
        raise Incorrect(tr("the weights are not the checkpoint's: build the model with from_pretrained(path), "
                           "not from a config (that starts from random weights)."))


def _check_training_mib(answer, model) -> None:
    mib = as_number(answer)
    count = sum(p.numel() for p in model.parameters())
    per_param = {4: msg("that counts only the weights: training keeps weights, gradients and two AdamW states."),
                 8: msg("that counts weights and gradients, but not AdamW's two moving averages: training keeps "
                        "weights, gradients and two AdamW states."),
                 12: msg("that counts three of the four float32 copies: training keeps weights, gradients and two "
                         "AdamW states.")}
    if _close(mib, count * 16 / 2**20):
        return
    if _close(mib, count * 16 / 1e6):
        raise Incorrect(tr("that is megabytes (10^6 bytes); a MiB is 2^20 = 1,048,576 bytes."))
    for size, why in per_param.items():
        if _close(mib, count * size / 2**20):
            raise Incorrect(tr(why))
    if _close(mib, count * 16):
        raise Incorrect(tr("that is bytes; divide by 2**20 for MiB."))
    raise Incorrect(tr("{mib:.3f} MiB is not what training this model's {count:,} parameters keeps in float32.",
                       mib=mib, count=count))


# ---------------------------------------------------------------- q3: the learner times a product with Timer
_FAKE_RUNS = ((100, "float64", 1e-3), (64, "float32", 2e-5))  # (n, dtype, the seconds the stand-in Timer reports)
_REAL_N = 256  # the real run: float32, small enough to take well under a second on a 2-core CPU
_REAL_FACTOR = 20  # the real rate may differ this much from the checker's own: another program may slow one
# of the runs (a correct answer measured 10.8 times below the checker's own while a CI run shared the 2 cores)
_MATMULS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "dot", "mv")


def _product_ops(stmt: str, setup: str, namespace: dict) -> list[tuple[str, list, list, str]]:
    """Run ``setup`` then ``stmt`` once in ``namespace``; the matrix products ``stmt`` did, as
    (op name, shapes of its tensor inputs, their dtypes, device type)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    found = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in _MATMULS:
                tensors = [a for a in args if isinstance(a, torch.Tensor)]
                found.append((name, [tuple(t.shape) for t in tensors], [t.dtype for t in tensors],
                              tensors[0].device.type if tensors else "cpu"))
            return func(*args, **(kwargs or {}))

    exec(compile(setup, "<Timer setup>", "exec"), namespace)  # noqa: S102 - the learner's own Timer
    with Record():
        exec(compile(stmt, "<Timer stmt>", "exec"), namespace)  # noqa: S102
    return found


def _stand_in_timer(seconds: float, seen: list):
    """A ``torch.utils.benchmark.Timer`` whose measurements report ``seconds`` per run of ``stmt``; each one
    runs ``stmt`` once for real and appends to ``seen`` what it multiplied and how it was measured."""
    import inspect
    import textwrap

    import torch
    from torch.utils import benchmark

    signature = inspect.signature(benchmark.Timer.__init__)  # the real one's, read before any patching

    class StandIn(benchmark.Timer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)  # the real Timer's checks of its arguments
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            self._mine = (textwrap.dedent(given["stmt"]).strip(), textwrap.dedent(given["setup"]).strip(),
                          dict(given["globals"] or {}), given["num_threads"])

        def _known(self, method: str, number: int) -> benchmark.Measurement:
            stmt, setup, namespace, threads = self._mine
            namespace.setdefault("torch", torch)
            seen.append({"method": method, "number": number, "threads": threads, "stmt": stmt,
                         "products": _product_ops(stmt, setup, namespace),
                         "setup_products": _product_ops(setup, "pass", dict(namespace))})
            spec = benchmark.TaskSpec(stmt=stmt, setup=setup, num_threads=threads)
            return benchmark.Measurement(number, [seconds * number] * 5, spec)

        def timeit(self, number: int = 1000000):
            return self._known("timeit", number)

        def blocked_autorange(self, callback=None, min_run_time: float = 0.2):
            return self._known("blocked_autorange", 10)

        def adaptive_autorange(self, threshold: float = 0.1, **kwargs):
            return self._known("adaptive_autorange", 10)

    return StandIn


def _with_timer(fn, timer_cls, *args):
    """``fn(*args)`` with ``timer_cls`` in place of ``torch.utils.benchmark.Timer``: in the module, and under any
    global name of ``fn`` bound to the real Timer (``from torch.utils.benchmark import Timer``)."""
    from torch.utils import benchmark
    from torch.utils.benchmark.utils import timer as timer_module

    real = benchmark.Timer
    names = [k for k, v in getattr(fn, "__globals__", {}).items() if v is real]
    benchmark.Timer = timer_module.Timer = timer_cls
    for k in names:
        fn.__globals__[k] = timer_cls
    try:
        return fn(*args)
    finally:
        benchmark.Timer = timer_module.Timer = real
        for k in names:
            fn.__globals__[k] = real


def _rate(got) -> float:
    import torch

    if got is None:
        raise Incorrect(tr("your function returns None: add a `return`."))
    if isinstance(got, torch.utils.benchmark.Measurement):
        raise Incorrect(tr("your function returns the Measurement; return the GFLOP/s computed from its "
                           "`median` (a number)."))
    return as_number(got)


def _judge_stand_in_run(got: float, n: int, dtype: str, seconds: float, seen: list) -> None:
    """The learner's rate and product under the stand-in Timer that reported ``seconds`` per product."""
    want = 2 * n**3 / seconds / 1e9
    if not seen:
        raise Incorrect(tr("your function did not measure with torch.utils.benchmark.Timer: create "
                           "`benchmark.Timer(stmt=..., globals=...)` and call its blocked_autorange() or "
                           "timeit(number)."))
    run = seen[-1]
    products = run["products"]
    if not products:
        if run["setup_products"]:
            raise Incorrect(tr("the product is in `setup`, which the Timer runs once and does not time: put it "
                               "in `stmt`."))
        raise Incorrect(tr("the statement you timed, {stmt!r}, multiplies no matrices: `stmt` should be the "
                           "product of your two n x n matrices.", stmt=run["stmt"]))
    flops = sum(2 * math.prod(shapes[-2]) * (shapes[-1][-1] if len(shapes[-1]) >= 2 else 1)
                for _, shapes, _, _ in products if len(shapes) >= 2)  # the last two inputs are the factors
    if flops != 2 * n**3:
        shapes = " and ".join(" x ".join(map(str, s)) for s in products[0][1])
        raise Incorrect(tr("the statement you timed multiplies {shapes} ({count} product(s)); for n={n} it "
                           "should multiply two {n} x {n} matrices once.", shapes=shapes, count=len(products),
                           n=n))
    used = {str(d).replace("torch.", "") for _, _, dtypes, _ in products for d in dtypes}
    if used != {dtype}:
        raise Incorrect(tr("asked for dtype=torch.{dtype}, your matrices are {used}: make them with "
                           "dtype=dtype.", dtype=dtype, used=", ".join(sorted(used))))
    if _close_rate(got, want):
        return
    number = run["number"] if run["method"] == "timeit" else None
    named = [(want / 2, msg("off by a factor of 2: each of the n^3 multiply-adds counts as 2 floating-point "
                            "operations.")),
             (seconds, msg("that is the time in seconds; return the rate: 2 n^3 FLOPs / seconds / 1e9.")),
             (want * 1e9, msg("that is FLOP/s; divide by 1e9 to get GFLOP/s.")),
             (want * 1e3, msg("1000 times too many: Measurement.median is already in seconds, and a GFLOP is 1e9 "
                              "FLOPs.")),
             (want / 1e3, msg("1000 times too small: Measurement.median is in seconds, not milliseconds."))]
    if number and number > 1:
        named.append((want * number, msg("Measurement.median is already the time of one run of `stmt`: do not "
                                         "divide it by `number` again.")))
    for value, why in named:
        if _close_rate(got, value):
            raise Incorrect(tr(why))
    raise Incorrect(tr("with a stand-in Timer that reports {ms:g} ms per product, n={n} should give {want:.4g} "
                       "GFLOP/s; your function returned {got:.4g}.", ms=seconds * 1e3, n=n, want=want, got=got))


def _close_rate(got: float, want: float) -> bool:
    return math.isclose(got, want, rel_tol=1e-3)


def _reference_gflops(n: int, threads: int, device: str) -> float:
    """The checker's own rate for the same product: torch.mm of two n x n float32 matrices."""
    import torch
    from torch.utils import benchmark

    a = torch.randn(n, n, device=device)
    b = torch.randn_like(a)
    timer = benchmark.Timer("torch.mm(a, b)", globals={"a": a, "b": b}, num_threads=threads)
    return 2 * n**3 / timer.blocked_autorange(min_run_time=0.1).median / 1e9


def _check_matmul_gflops(fn) -> None:
    """Run the learner's ``fn(n, dtype)`` twice with a stand-in Timer (its arithmetic and its product, exactly),
    then once with the real one (its rate, against the checker's own measurement in the same run)."""
    import torch

    if not callable(fn):
        raise Incorrect(tr(_PASS_FUNCTION, fn=fn))
    runs = []
    for n, dtype, seconds in _FAKE_RUNS:
        seen = []
        runs.append((_rate(_with_timer(fn, _stand_in_timer(seconds, seen), n, getattr(torch, dtype))), seen))
    if runs[0][0] == runs[1][0]:
        raise Incorrect(tr("your function returns {got!r} whatever the size and the timing: compute the rate "
                           "from the Timer's measurement.", got=runs[0][0]))
    for (n, dtype, seconds), (got, seen) in zip(_FAKE_RUNS, runs):
        _judge_stand_in_run(got, n, dtype, seconds, seen)
    threads, device = seen[-1]["threads"], seen[-1]["products"][0][3]
    low = high = None
    for _ in range(3):  # twice more before saying no: another program may have slowed one of the runs
        before = _reference_gflops(_REAL_N, threads, device)
        got = _rate(fn(_REAL_N, torch.float32))
        after = _reference_gflops(_REAL_N, threads, device)
        low, high = min(before, after) / _REAL_FACTOR, max(before, after) * _REAL_FACTOR
        if low <= got <= high:
            return
    raise Incorrect(tr("with the real Timer your function gives {got:.3g} GFLOP/s for n={n}, but the checker's own "
                       "measurement of the same product, just before and after, allows {low:.3g} to {high:.3g} "
                       "(a factor of {factor}, as the machine may be busy): return the rate of the product the "
                       "Timer measured.", got=got, n=_REAL_N, low=low, high=high, factor=_REAL_FACTOR))


def _check_steps(steps) -> None:
    if not isinstance(steps, (list, tuple)) or len(steps) != 4:
        raise Incorrect(tr("give a list of the 4 step names; you gave {steps!r}.", steps=steps))
    norm = [str(s).strip().lower().replace("synchronisation", "synchronization") for s in steps]
    unknown = [s for s in norm if s not in _ORDER]
    if unknown:
        raise Incorrect(tr("{name!r} is not one of the four steps; use the names in `STEP_NAMES`.", name=unknown[0]))
    if sorted(norm) != sorted(_ORDER):
        raise Incorrect(tr("each step should appear exactly once."))
    wrong = next((i for i, (a, b) in enumerate(zip(norm, _ORDER)) if a != b), None)
    if wrong is not None:
        raise Incorrect(tr("position {position} is wrong: {why}.", position=wrong + 1, why=tr(_WHY[wrong])))


q1 = Exercise(
    "1.1 q1: load a checkpoint and prepare it",
    _check_load_and_prepare,
    usage="q1.check(load_and_prepare, choice.path)",
    api=True,
    checked=("checked: your function ran; its model has the checkpoint's weights and a 2-label head, and it is "
             "the one accelerator.prepare returned."),
    hints=["Three objects: a model with a classification head and its tokenizer, both read from the folder "
           "`path`, and an Accelerator that places the model. Return what `prepare` gives back, not the model "
           "you passed in.",
           "The Auto classes read `config.json` to pick the architecture. The one for a model with a "
           "sequence-classification head is named after its task (transformers docs, 'Auto Classes': "
           "AutoModelFor...); its `from_pretrained` takes the number of labels. `AutoTokenizer` reads the "
           "tokenizer the same way; then the Accelerator and its `prepare` method (accelerate docs, 'Accelerator').",
           "Load both from `path` with their Auto classes (two labels for the head), make an Accelerator, and"
           " give the model to its prepare: keep what prepare returns as your model, since that is the one "
           "placed on the device."],
    solution_code=(
        "def load_and_prepare(path):\n"
        "    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)\n"
        "    tokenizer = AutoTokenizer.from_pretrained(path)\n"
        "    accelerator = Accelerator()\n"
        "    model = accelerator.prepare(model)\n"
        "    return accelerator, model, tokenizer\n\n"
        "q1.check(load_and_prepare, choice.path)"
    ),
)
q2 = Exercise(
    "1.1 q2: memory to train the model",
    _check_training_mib,
    usage="q2.check(train_mib, model)",
    hints=[
        "Training with AdamW in float32 keeps four numbers per parameter: the weight, its gradient and two "
        "moving averages.",
        "A float32 number takes 4 bytes; `p.numel()` counts the numbers in a parameter tensor "
        "(`model.parameters()` yields them all); one MiB is 2**20 bytes.",
        "Count the model's numbers first (every parameter tensor of the model, all of them), then multiply by "
        "the bytes training keeps for each one, and turn bytes into MiB.",
    ],
    solution_code="train_mib = sum(p.numel() for p in model.parameters()) * 16 / 2**20\nq2.check(train_mib, model)",
)
q3 = Exercise(
    "1.1 q3: time a matrix product with torch.utils.benchmark",
    _check_matmul_gflops,
    usage="q3.check(matmul_gflops)",
    api=True,
    checked=("checked: with a stand-in Timer reporting known times, your statement multiplied two n x n "
             "matrices in dtype and your rate was exactly 2 n^3 / seconds / 1e9; with the real Timer it was "
             "within a factor of 20 of the checker's own measurement (the machine may be busy)."),
    hints=["Make two random n x n matrices in `dtype`, let a Timer run their product many times, and turn "
           "the median time of one product into GFLOP/s as in the 'Measure it' cell: 2 n^3 FLOPs.",
           "`benchmark.Timer` runs the Python statement `stmt` (a string) with the names of the dict `globals`; "
           "its `blocked_autorange()` (or `timeit(number)`) returns a Measurement whose `median` is the seconds "
           "of one run of `stmt` (PyTorch docs, 'Benchmark Utils - torch.utils.benchmark'). A GFLOP is a "
           "billion FLOPs: write that power of ten yourself.",
           "Make both matrices with torch's standard-normal generator in the dtype given, hand the Timer "
           "their product as a string with the two tensors in its globals, and read the median seconds of one"
           " product from its measurement; then FLOPs over seconds, in billions."],
    solution_code=(
        "from torch.utils import benchmark\n\n"
        "def matmul_gflops(n, dtype):\n"
        "    a = torch.randn(n, n, dtype=dtype)\n"
        "    b = torch.randn(n, n, dtype=dtype)\n"
        "    timer = benchmark.Timer(stmt=\"a @ b\", globals={\"a\": a, \"b\": b})\n"
        "    seconds = timer.blocked_autorange().median\n"
        "    return 2 * n**3 / seconds / 1e9\n\n"
        "q3.check(matmul_gflops)"
    ),
)
q4 = Exercise(
    "1.1 q4: the four steps in order",
    _check_steps,
    usage="q4.check(steps)",
    hints=[
        "A device needs its data and its own copy of the model before it can compute anything.",
        "Gradients must be combined before the updated weights can be shared (look at the figure of steps "
        "3 and 4).",
        "Follow one training step in the figure from left to right: what each device must hold before its "
        "forward pass, and what must happen to the gradients before every copy of the weights is the same "
        "again.",
    ],
    solution_code=(
        'steps = ["data sharding", "model replication", "gradient aggregation", "parameter synchronization"]\n'
        "q4.check(steps)"
    ),
)
