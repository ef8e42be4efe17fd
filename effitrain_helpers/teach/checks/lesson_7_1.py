"""Exercises of lesson 7.1 (mixed precision across ranks).

Both checkers judge what ``fully_shard`` does with the learner's answer, on lesson 5.1's model sharded in a fake
world of 2 ranks in the checker's own process (``processes.group.fake_group``: FSDP's real code paths, its
collectives called with their real dtypes, nothing sent): the dtype of the parameters while each module runs
(forward), the dtype the gradients are reduced in, the dtype of the stored (master) parameters, and whether the
root is sharded. q1 judges the learner's ``MixedPrecisionPolicy`` (sharded with the lesson's own wrapping), q2
their ``shard_mixed(model, policy)`` (given a right policy), on two models. Named mistakes: float16 without a
gradient scaler, ``reduce_dtype`` left in bfloat16 (unset or set), the root module not wrapped, a block not
wrapped, a ``fully_shard`` call without the policy, the model cast to 16 bits before sharding.
"""

from __future__ import annotations

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, hands_over_to

WORLD = 2  # the fake world's ranks
MODELS = ({}, {"width": 32, "depth": 3, "classes": 5})  # lesson 5.1's model, and one of another depth
FLOAT16 = msg("the parameters are float16 while the model runs, and nothing scales the loss: float16's "
              "smallest normal number is about 6e-5 and its largest 65504, so small gradients underflow to zero "
              "without a gradient scaler (ShardedGradScaler with FSDP). Use torch.bfloat16: float32's range, no "
              "scaler needed.")
REDUCE_UNSET = msg("reduce_dtype is left unset, so FSDP reduces the gradients in param_dtype (bfloat16): a sum over "
                   "many ranks then keeps 8 significant bits. Set reduce_dtype=torch.float32.")
REDUCE_BF16 = msg("reduce_dtype is bfloat16: the gradients are summed over the ranks with 8 significant bits (the "
                  "lesson measured what that does to a sum over many ranks). Set reduce_dtype=torch.float32.")
ROOT = msg("the root module is not wrapped: the embedding and the head stay whole, in float32, on every rank, and "
           "nothing gathers or casts them. Call fully_shard on the model itself last, with the same policy.")


def _observe(wrap, shape: dict, seed: int = 0) -> dict:
    """In a fake world of :data:`WORLD` ranks: lesson 5.1's model of ``shape`` passed to ``wrap``, then one
    forward and backward watched (``training.precision_across_ranks.observe_step``), plus ``returned`` (whether
    ``wrap`` returned the model), ``blocks`` (how many blocks ``fully_shard`` wrapped, of ``depth``) and
    ``root_sharded`` (whether the root's own parameters, the embedding's and the head's, are sharded)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    from effitrain_helpers.processes.group import fake_group
    from effitrain_helpers.training.model_sharding import sharding_batches, sharding_model
    from effitrain_helpers.training.precision_across_ranks import observe_step

    with fake_group(WORLD):
        model = sharding_model(seed, **shape)
        try:
            returned = wrap(model)
        except Exception as exc:  # the learner's wrapping: say what it raised, in one line
            raise Incorrect(tr("sharding the model raised {error}: {message}", error=type(exc).__name__,
                               message=str(exc).splitlines()[0] if str(exc) else "")) from None
        own = [*model.embed.parameters(), *model.head.parameters()]
        found = {"returned": returned is model, "depth": len(model.blocks),
                 "blocks": sum(isinstance(b, FSDPModule) for b in model.blocks),
                 "root_sharded": all(isinstance(p, DTensor) for p in own)}
        tokens, labels = sharding_batches(1, 4, classes=shape.get("classes", 3))[0]
        return {**observe_step(model, tokens, labels), **found}


def _judge_dtypes(seen: dict, reduce_unset: bool | None = None) -> None:
    """The dtypes a right answer gives: bfloat16 while every module runs, float32 reductions. ``reduce_unset``
    (q1) says whether the learner's policy left ``reduce_dtype`` unset, to name which mistake it is."""
    computed = {d for dtypes in seen["forward"].values() for d in dtypes}
    if "float16" in computed:
        raise Incorrect(tr(FLOAT16))
    if computed == {"float32"}:
        raise Incorrect(tr("the parameters are float32 while the model runs: param_dtype is the dtype FSDP gathers "
                           "them in and computes with; set it to the 16-bit format with float32's range."))
    if seen["error"]:
        raise Incorrect(tr("the forward and backward raised {error}", error=seen["error"]))
    if "bfloat16" in seen["reduced"]:
        raise Incorrect(tr(REDUCE_UNSET if reduce_unset else REDUCE_BF16))
    if seen["reduced"] != ["float32"]:
        raise Incorrect(tr("the gradients are reduced in {dtypes}: reduce in float32 (reduce_dtype).",
                           dtypes=", ".join(seen["reduced"]) or tr("no dtype (nothing was reduced)")))
    if computed != {"bfloat16"}:
        raise Incorrect(tr("the parameters are {dtypes} while the model runs; compute in bfloat16.",
                           dtypes=", ".join(sorted(computed))))


def _check_policy(policy) -> None:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from effitrain_helpers.engines.mixed_precision import shard_in_precision

    if not isinstance(policy, MixedPrecisionPolicy):
        raise Incorrect(tr("pass a MixedPrecisionPolicy(...) (from torch.distributed.fsdp); you gave {kind}.",
                           kind=type(policy).__name__))
    for field in ("param_dtype", "reduce_dtype"):
        given = getattr(policy, field)
        if given is not None and not isinstance(given, torch.dtype):
            raise Incorrect(tr("{field} is {given!r}, a {kind}: FSDP casts with a torch.dtype, so give the dtype "
                               "itself (torch.bfloat16, torch.float32), not its name.", field=field, given=given,
                               kind=type(given).__name__))
    seen = _observe(lambda model: shard_in_precision(model, policy), MODELS[0])
    _judge_dtypes(seen, reduce_unset=policy.reduce_dtype is None)


def _check_wrapping(shard_mixed) -> None:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from effitrain_helpers.engines.mixed_precision import shard_in_precision

    if not callable(shard_mixed):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=shard_mixed))
    if hands_over_to(shard_mixed, shard_in_precision):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the calls "
                           "yourself (the exercise is what that function does).", name="shard_in_precision"))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for shape in MODELS:
        seen = _observe(lambda model: shard_mixed(model, policy), shape)
        if not seen["returned"]:
            raise Incorrect(tr("return the model: fully_shard shards it in place and returns it."))
        if not seen["root_sharded"]:
            raise Incorrect(tr(ROOT))
        if seen["blocks"] < seen["depth"]:
            raise Incorrect(tr("{wrapped} of the {depth} blocks are FSDP groups of their own; the rest are "
                               "gathered with the root, all at once: call fully_shard on each block of "
                               "model.blocks first, then on the model.", wrapped=seen["blocks"],
                               depth=seen["depth"]))
        if seen["master"] != ["float32"]:
            raise Incorrect(tr("the stored parameters are {dtypes}: they are the master weights the optimizer "
                               "updates, and must stay float32. Do not cast the model; the policy casts the "
                               "gathered copies.", dtypes=", ".join(seen["master"])))
        plain = sorted(name or "model" for name, dtypes in seen["forward"].items() if "float32" in dtypes)
        if plain:
            raise Incorrect(tr("{modules} computed in float32: a fully_shard call without the policy keeps its "
                               "group in float32. Pass the policy to every call.", modules=", ".join(plain)))
        _judge_dtypes(seen)


q1 = Exercise(
    "7.1 q1: the mixed-precision policy",
    _check_policy,
    usage="q1.check(policy)",
    api=True,
    checked=("checked in a fake world of 2 ranks, with the lesson's model sharded under your policy: every module "
             "computes in bfloat16 and the gradients are reduce-scattered in float32."),
    hints=["Two choices: the dtype the ranks gather the parameters in and compute with, and the dtype they sum "
           "the gradients in. The first should be cheap and keep float32's range (no loss scaling); the second "
           "should keep what a sum over many ranks needs.",
           "MixedPrecisionPolicy (torch.distributed.fsdp) is a small dataclass; its docstring names one field "
           "for each of the two choices, and what happens when the second is left unset.",
           "Lesson 3.3 compared the 16-bit formats: the one with float32's 8 exponent bits needs no scaler. "
           "The measured sums above show which dtype a reduction needs."],
    solution_code=("policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)\n"
                   "q1.check(policy)"),
)
q2 = Exercise(
    "7.1 q2: shard in mixed precision",
    _check_wrapping,
    usage="q2.check(shard_mixed)",
    api=True,
    checked=("checked in a fake world of 2 ranks on two models (2 and 3 blocks): every block and the root "
             "sharded, each module computing in bfloat16, float32 reductions and master weights."),
    hints=["As in lesson 5.1, shard bottom-up: each block becomes its own group (gathered only while it runs), "
           "then the root takes what no block took (the embedding and the head). Every call gets the same "
           "policy.",
           "fully_shard (torch.distributed.fsdp) takes the policy as a keyword argument: see its signature in "
           "torch/distributed/fsdp/_fully_shard/_fully_shard.py. It works in place and returns the module.",
           "The blocks are model.blocks; the root is the model itself, sharded last. Return what you sharded."],
    solution_code=("def shard_mixed(model, policy):\n"
                   "    for block in model.blocks:\n"
                   "        fully_shard(block, mp_policy=policy)\n"
                   "    fully_shard(model, mp_policy=policy)\n"
                   "    return model\n\n\n"
                   "q2.check(shard_mixed)"),
)
