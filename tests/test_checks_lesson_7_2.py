"""Lesson 7.2's checker (``q1``: a mesh and the block's tensor-parallel plan), judged at both mesh shapes it uses
(2 x 2 and 1 x 4) on right answers written differently and on each named mistake. The answers' facts are
gathered in one 4-process launch (``plan_facts`` per answer) and judged here, as ``q1.check`` judges them; one
answer goes through ``q1.check`` whole. A plan parallelize_module cannot use (a style class not called, Hugging
Face's strings, another model's layer names) is named before any process starts, in this process."""

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from effitrain_helpers.processes.launch import launch
from effitrain_helpers.teach.checks import lesson_7_2
from effitrain_helpers.teach.checks.lesson_7_2 import SHAPES, q1
from effitrain_helpers.teach.exercises import Incorrect, ____
from verdicts import assert_refused, assert_verdict, mistake, right, speak


def mesh_a(dp, tp):
    return init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))


def mesh_b(dp, tp):  # the same grid, built by hand
    return DeviceMesh("cpu", torch.arange(dp * tp).reshape(dp, tp), mesh_dim_names=("dp", "tp"))


def mesh_c(dp, tp):  # keywords, the shape and the names as lists
    return init_device_mesh(device_type="cpu", mesh_shape=[dp, tp], mesh_dim_names=["dp", "tp"])


def mesh_swapped(dp, tp):  # shape (tp, dp) under the right names: tp groups are not neighbours
    return init_device_mesh("cpu", (tp, dp), mesh_dim_names=("dp", "tp"))


def mesh_names_swapped(dp, tp):
    return init_device_mesh("cpu", (dp, tp), mesh_dim_names=("tp", "dp"))


def mesh_flat(dp, tp):
    return init_device_mesh("cpu", (dp * tp,), mesh_dim_names=("tp",))


C, R = ColwiseParallel, RowwiseParallel
RIGHT_A = {"q": C(), "k": C(), "v": C(), "out": R(), "up": C(), "down": R()}
RIGHT_B = ({name: C(input_layouts=Replicate()) for name in ("q", "k", "v", "up")}
           | {name: R(input_layouts=Shard(-1), output_layouts=Replicate()) for name in ("out", "down")})
RIGHT_C = {"[qkv]": C(), "out": R(), "up": C(), "down": R()}  # a key that is a pattern, as parallelize_module allows

CASES = {  # name: (make_mesh, plan, words the verdict must contain; None: correct)
    "right": (mesh_a, RIGHT_A, None),
    "right, written differently": (mesh_b, RIGHT_B, None),
    "right, keywords and a pattern": (mesh_c, RIGHT_C, None),
    "both column-wise": (mesh_a, {n: C() for n in ("q", "k", "v", "out", "up", "down")}, "column-wise after"),
    "row before column": (mesh_a, {"q": R(), "k": R(), "v": R(), "out": C(), "up": R(), "down": C()},
                          "row before column"),
    "first layers row-wise": (mesh_a, {"q": R(), "k": R(), "v": R(), "out": R(), "up": R(), "down": R()},
                              "row-wise, but its input"),
    "output projection forgotten": (mesh_a, {"q": C(), "k": C(), "v": C(), "up": C(), "down": R()},
                                    "output projection (out) is whole"),
    "MLP left whole": (mesh_a, {"q": C(), "k": C(), "v": C(), "out": R()}, "up, down stay whole"),
    "outputs gathered": (mesh_a, {n: C(output_layouts=Replicate()) for n in ("q", "k", "v", "up")}
                         | {n: R(input_layouts=Replicate()) for n in ("out", "down")}, "right values, but"),
    "mesh dims swapped": (mesh_swapped, RIGHT_A, "the dimensions are swapped"),
    "mesh names swapped": (mesh_names_swapped, RIGHT_A, "named ('tp', 'dp')"),
    "mesh of the wrong shape": (mesh_flat, RIGHT_A, "made a mesh of shape (4,)"),
}


def _all_facts(cases):
    from effitrain_helpers.training.device_mesh import plan_facts

    return {name: plan_facts(make_mesh, plan, SHAPES) for name, (make_mesh, plan, _) in cases.items()}


@pytest.fixture(scope="module")
def facts():
    return launch(_all_facts, CASES, num_processes=4, cpu=True, quiet=True)


def _judge(ranks: list[dict], name: str) -> str | None:
    """What q1.check says of ``name``'s plan (checked before any process starts) and facts (None: correct)."""
    try:
        lesson_7_2._check_plan_entries(CASES[name][1])
        for i, (dp, tp) in enumerate(SHAPES):
            shape_facts = [rank[name][i] for rank in ranks]
            lesson_7_2._check_mesh(shape_facts, dp, tp)
            lesson_7_2._check_run(shape_facts, dp, tp)
    except Incorrect as err:
        return str(err)
    return None


def _judged(name: str):
    """A case with its census mark: every case but "right" (the solution's own form) is a right answer written
    another way or a likely mistake, named."""
    return name if name == "right" else (right if CASES[name][2] is None else mistake)("7.2 q1", name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [_judged(name) for name in CASES])
def test_q1_judges_each_answer_at_2x2_and_1x4(facts, name):
    verdict, words = _judge(facts, name), CASES[name][2]
    if words is None:
        assert verdict is None, verdict
    else:
        assert verdict is not None and words in verdict, verdict


@pytest.mark.slow
def test_both_shapes_are_run(facts):
    shapes = [(f["shape"], len(f["tp_ranks"])) for f in facts[0]["right"]]
    assert shapes == [((2, 2), 2), ((1, 4), 4)]
    traffic = [f["traffic"]["forward"]["calls"] for f in facts[0]["right"]]
    assert traffic == [{"all_reduce": 2}] * 2


@pytest.mark.slow
@pytest.mark.exhaustive  # the notebook's own q1.check does this in every run (nbval, both languages)
def test_q1_check_runs_the_answer_in_processes():
    assert q1.evaluate(mesh_a, RIGHT_A).status == "correct"


def test_q1_refuses_without_processes():
    from effitrain_helpers.engines.mesh_parallel import make_mesh

    assert "lesson's own answer" in q1.evaluate(make_mesh, RIGHT_A).message
    assert "a dict" in q1.evaluate(mesh_a, [C(), R()]).message
    assert q1.evaluate(mesh_a, ____).status == "not attempted"


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
@pytest.mark.parametrize("plan, words", [
    mistake("7.2 q1", RIGHT_A | {"up": C, "down": R}, {"en": "is the class ColwiseParallel, not a style: call it",
                                                       "pt-BR": "é a classe ColwiseParallel, não um estilo"},
            id="styles-not-called"),
    mistake("7.2 q1", RIGHT_A | {"q": "colwise"}, {"en": "is the string 'colwise' (how a Hugging Face tp_plan",
                                                   "pt-BR": "é a string 'colwise' (como um tp_plan do Hugging Face"},
            id="hugging-face-strings"),
    mistake("7.2 q1", {"q_proj": C(), "k_proj": C(), "v_proj": C(), "o_proj": R()} | RIGHT_A,
            {"en": "plan['q_proj'] names no layer of the block", "pt-BR": "plan['q_proj'] não nomeia nenhuma camada"},
            id="another-model-s-layer-names"),
])
def test_q1_names_a_plan_parallelize_module_cannot_use_without_processes(plan, words, lang, monkeypatch):
    """Caught before any process starts, each named where the library would raise its own error or skip the
    entry with a warning."""
    speak(monkeypatch, lang)
    assert_refused(q1, mesh_a, plan, words=words[lang])


def test_q1_refuses_the_lessons_own_plan():
    from effitrain_helpers.engines.mesh_parallel import block_plan

    assert "the lesson's own (block_plan())" in q1.evaluate(mesh_a, block_plan()).message


def _tp(activation_bytes=4, share=True, forward=2, backward=4):
    """Exercise 2's solution, with a switch for each likely mistake."""
    def tp_bytes(batch, seq, hidden, dp, blocks):
        rows = batch // dp if share else batch
        return activation_bytes * rows * seq * hidden * (forward + backward) * blocks
    return tp_bytes


def tp_bytes_per_layer_count(batch, seq, hidden, dp, blocks):  # right, written another way
    per_block = sum(4 * batch * seq * hidden // dp for _ in ("out", "down", "q", "k", "v", "up"))
    return per_block * blocks


def tp_bytes_in_floats(batch, seq, hidden, dp, blocks):  # right, another way: a float, batch / dp
    rows = batch / dp
    forward, backward = 2.0, 4.0
    return blocks * (forward + backward) * rows * seq * hidden * 4.0


@pytest.mark.parametrize("answer, words", [
    (_tp(), None),
    right("7.2 q2", tp_bytes_per_layer_count, None),
    right("7.2 q2", tp_bytes_in_floats, None),
    mistake("7.2 q2", _tp(backward=0), "forward's two all-reduces alone"),
    mistake("7.2 q2", _tp(backward=2), "three layers here"),
    mistake("7.2 q2", _tp(share=False), "not the global batch"),
    mistake("7.2 q2", _tp(activation_bytes=2), "4 bytes a value"),
    (lambda *a: _tp()(*a) + 1, "count the all-reduces"),
    (12, "function itself"),
])
def test_q2_names_each_mistake(answer, words):
    from effitrain_helpers.teach.checks.lesson_7_2 import q2

    assert_verdict(q2, answer, words=words)


def test_q2_refuses_the_lessons_own_function():
    from effitrain_helpers.teach.checks.lesson_7_2 import q2
    from effitrain_helpers.training.device_mesh import tp_bytes_per_step

    assert "lesson's own answer" in q2.evaluate(tp_bytes_per_step).message
