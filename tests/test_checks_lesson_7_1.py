"""Lesson 7.1's checkers with right and wrong answers, each named mistake a test; and the lesson's measurements.

The checkers shard the model in a fake world of 2 ranks in this process (no process started, but a few seconds
each: marked slow). Every run judges the right answers and the mistakes the lesson names (float16 without a
scaler, reduce_dtype left in bfloat16, the root not wrapped, a call without the policy, the model cast first);
the other wrong answers are in the exhaustive tier. The ring sums and the theory are arithmetic (fast)."""

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from effitrain_helpers.engines import mixed_precision
from effitrain_helpers.teach.checks.lesson_7_1 import q1, q2
from effitrain_helpers.training import precision_across_ranks as pa
from verdicts import mistake, right, speak

BF16, FP32, FP16 = torch.bfloat16, torch.float32, torch.float16
EXHAUSTIVE = pytest.mark.exhaustive  # a wrong answer beyond the named mistakes


def _verdict(exercise, answer):
    result = exercise.evaluate(answer)
    return result.status, result.message


@pytest.mark.slow
@pytest.mark.parametrize("policy", [
    MixedPrecisionPolicy(param_dtype=BF16, reduce_dtype=FP32),  # the solution's own form
    right("7.1 q1", MixedPrecisionPolicy(BF16, FP32, cast_forward_inputs=True)),  # positional, a default spelled out
    # keywords in another order, torch.float (float32's alias), the outputs' dtype spelled out
    right("7.1 q1", MixedPrecisionPolicy(reduce_dtype=torch.float, param_dtype=torch.bfloat16,
                                         output_dtype=torch.bfloat16), marks=EXHAUSTIVE),
], ids=["keywords", "positional", "bfloat16 outputs spelled out"])
def test_q1_accepts_bf16_compute_with_a_float32_reduction(policy):
    status, message = _verdict(q1, policy)
    assert status == "correct", message


@pytest.mark.slow
@pytest.mark.parametrize("policy, words", [
    mistake("7.1 q1", MixedPrecisionPolicy(param_dtype=FP16, reduce_dtype=FP32), "without a gradient scaler"),
    mistake("7.1 q1", MixedPrecisionPolicy(param_dtype=BF16), "reduce_dtype is left unset"),
    mistake("7.1 q1", MixedPrecisionPolicy(param_dtype=BF16, reduce_dtype=BF16), "reduce_dtype is bfloat16"),
    mistake("7.1 q1", MixedPrecisionPolicy(), "the parameters are float32 while the model runs",
            marks=EXHAUSTIVE),
    mistake("7.1 q1", MixedPrecisionPolicy(param_dtype=BF16, reduce_dtype=FP16), "reduced in float16",
            marks=EXHAUSTIVE),
], ids=["float16 without a scaler", "reduce unset", "reduce bf16", "no param dtype", "reduce float16"])
def test_q1_names_each_mistake(policy, words):
    status, message = _verdict(q1, policy)
    assert status == "incorrect" and words in message, message


@pytest.mark.parametrize("lang, words", [("en", "param_dtype is 'bfloat16', a str: FSDP casts with a torch.dtype"),
                                         ("pt-BR", "param_dtype é 'bfloat16', um str: o FSDP converte com")])
@pytest.mark.parametrize("policy", [
    mistake("7.1 q1", MixedPrecisionPolicy(param_dtype="bfloat16", reduce_dtype="float32"), id="names"),
    mistake("7.1 q1", MixedPrecisionPolicy(param_dtype="bfloat16", reduce_dtype=FP32), id="one-name"),
])
def test_q1_names_a_dtype_given_by_its_name(policy, lang, words, monkeypatch):
    """Refused before any sharding (it was the library's TypeError from inside FSDP)."""
    speak(monkeypatch, lang)
    status, message = _verdict(q1, policy)
    assert status == "incorrect" and words in message, message


def test_q1_refuses_what_is_not_a_policy():
    status, message = _verdict(q1, {"param_dtype": BF16, "reduce_dtype": FP32})
    assert status == "incorrect" and "MixedPrecisionPolicy" in message, message


def _right(model, policy):
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def _right_by_type(model, policy):
    layers = [m for m in model.modules() if isinstance(m, torch.nn.TransformerEncoderLayer)]
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def _right_by_named_children(model, policy):
    """Right, another way: the blocks found by name among the model's children, each sharded; the root last,
    its result returned."""
    for _, child in model.named_children():
        if isinstance(child, torch.nn.ModuleList):
            for block in child:
                fully_shard(block, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def _root_not_wrapped(model, policy):
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    return model


def _root_only(model, policy):
    return fully_shard(model, mp_policy=policy)


def _root_without_policy(model, policy):
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    return fully_shard(model)


def _cast_first(model, policy):
    return _right(model.bfloat16(), policy)


def _own_bf16_reduce(model, policy):
    return _right(model, MixedPrecisionPolicy(param_dtype=BF16))


def _own_float16(model, policy):
    return _right(model, MixedPrecisionPolicy(param_dtype=FP16, reduce_dtype=FP32))


def _not_returned(model, policy):
    _right(model, policy)


def _first_block_only(model, policy):
    fully_shard(model.blocks[0], mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def _hands_over(model, policy):
    return mixed_precision.shard_in_precision(model, policy)


@pytest.mark.slow
@pytest.mark.parametrize("fn", [_right, right("7.1 q2", _right_by_type),
                                right("7.1 q2", _right_by_named_children, marks=EXHAUSTIVE)],
                         ids=["model.blocks", "by type", "by named children"])
def test_q2_accepts_each_block_then_the_root(fn):
    status, message = _verdict(q2, fn)
    assert status == "correct", message


@pytest.mark.slow
@pytest.mark.parametrize("fn, words", [
    mistake("7.1 q2", _root_not_wrapped, "the root module is not wrapped"),
    mistake("7.1 q2", _root_only, "0 of the 2 blocks are FSDP groups of their own", marks=EXHAUSTIVE),
    mistake("7.1 q2", _first_block_only, "1 of the 2 blocks", marks=EXHAUSTIVE),
    mistake("7.1 q2", _root_without_policy, "embed, head computed in float32"),
    mistake("7.1 q2", _cast_first, "the stored parameters are bfloat16"),
    mistake("7.1 q2", _own_bf16_reduce, "reduce_dtype is bfloat16"),
    mistake("7.1 q2", _own_float16, "without a gradient scaler", marks=EXHAUSTIVE),
    mistake("7.1 q2", _not_returned, "return the model", marks=EXHAUSTIVE),
    pytest.param(_hands_over, "the lesson's own answer",
                 marks=EXHAUSTIVE),
], ids=["root not wrapped", "root only", "one block", "root without policy", "cast first", "bf16 reduce",
        "float16", "not returned", "hands over"])
def test_q2_names_each_mistake(fn, words):
    status, message = _verdict(q2, fn)
    assert status == "incorrect" and words in message, message


def test_the_ring_sum_drifts_in_bfloat16_and_not_in_float32():
    bf16 = [pa.ring_sum_error(n, BF16) for n in (2, 64, 512)]
    fp32 = [pa.ring_sum_error(n, FP32) for n in (2, 64, 512)]
    assert bf16 == sorted(bf16) and bf16[0] < 2 ** -8 < bf16[-1], bf16  # one rounding, then piled up
    assert max(fp32) < 1e-5, fp32
    with pytest.raises(ValueError, match="ranks"):
        pa.ring_sum_error(0, BF16)


def test_the_theory_halves_what_bfloat16_moves():
    groups = [[(8, 4), (8,)], [(3, 4)]]  # a block's group, then the root's (not gathered again)
    policies = {"FSDP float32": MixedPrecisionPolicy(),
                "FSDP bf16, float32 reduce": MixedPrecisionPolicy(BF16, FP32),
                "FSDP bf16, bf16 reduce": MixedPrecisionPolicy(BF16)}
    theory = pa.theory_communication(groups, 2, policies)
    block, root = 8 * 4 + 8, 4 * 4  # values moved: the root's 3 rows padded to 2 x 2 for 2 ranks
    assert theory["FSDP float32"] == {"all_gather_single": (2 * block + root) * 4,
                                      "reduce_scatter_single": (block + root) * 4}
    assert theory["FSDP bf16, float32 reduce"] == {"all_gather_single": (2 * block + root) * 2,
                                                   "reduce_scatter_single": (block + root) * 4}
    assert theory["FSDP bf16, bf16 reduce"]["reduce_scatter_single"] == (block + root) * 2
    assert theory["DDP bf16 hook"] == {"all_reduce": (block + 12) * 2}  # DDP: no padding


@pytest.mark.slow
def test_a_fake_world_refuses_to_start_beside_a_group():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from effitrain_helpers.processes.group import fake_group

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        with pytest.raises(RuntimeError, match="a process group exists"):
            with fake_group(2):
                pass
    finally:
        dist.destroy_process_group()


def _observe_in_ranks(policy):
    """What the checkers observe, in a real gloo rank (see the exhaustive test)."""
    import torch.distributed as dist

    from effitrain_helpers.engines.mixed_precision import shard_in_precision
    from effitrain_helpers.training.model_sharding import sharding_batches, sharding_model

    model = shard_in_precision(sharding_model(), policy)
    tokens, labels = sharding_batches(1, 4)[0]
    rank = dist.get_rank()
    return pa.observe_step(model, tokens.chunk(2)[rank], labels.chunk(2)[rank])


@pytest.mark.slow
@pytest.mark.exhaustive
def test_the_fake_world_sees_what_real_ranks_see():
    """The checkers' fake world of 2 ranks observes the same dtypes as 2 real gloo processes."""
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.teach.checks.lesson_7_1 import MODELS, _observe

    for policy in (MixedPrecisionPolicy(BF16, FP32), MixedPrecisionPolicy(BF16)):
        real = launch(_observe_in_ranks, policy, num_processes=2, cpu=True, quiet=True)
        fake = _observe(lambda model, p=policy: _right(model, p), MODELS[0])
        for rank in real:
            for key in ("forward", "reduced", "gathered", "master", "output", "error"):
                assert rank[key] == fake[key], (key, rank[key], fake[key])
