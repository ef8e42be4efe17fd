import pytest

from effitrain_helpers.measure import bench
from effitrain_helpers.teach import plots
from effitrain_helpers.teach.widgets import benchmark_widget


def test_gflops_plot_has_one_line_per_device_and_dtype():
    results, _ = bench.run_benchmark([32, 64], ["float32", "bfloat16"], "cpu", repeats=1)
    fig = plots.plot_gflops(results)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["cpu float32", "cpu bfloat16"]


def test_gflops_plot_needs_results():
    with pytest.raises(ValueError, match="no results"):
        plots.plot_gflops([])


def test_four_steps_figure_names_each_step():
    fig = plots.plot_four_steps(2)
    text = " ".join(t.get_text() for t in fig.axes[0].texts)
    for word in ("shard", "replicate", "aggregate", "synchronise"):
        assert word in text
    with pytest.raises(ValueError, match="num_devices=9"):
        plots.plot_four_steps(9)


def test_widget_reruns_the_benchmark_with_its_choices(capsys):
    box = benchmark_widget(sizes=(32, 64, 128))
    results = box.run()
    assert [(r.size, r.dtype) for r in results] == [(32, "float32"), (64, "float32"), (128, "float32")]
    assert "GFLOP/s" in capsys.readouterr().out  # outside a kernel the Output widget lets prints through


def test_widget_with_nothing_selected_says_so(capsys):
    box = benchmark_widget(sizes=(32, 64))
    size_box = box.children[0].children[0]
    size_box.value = ()
    assert box.run() is None
    assert "Pick at least one size" in capsys.readouterr().out


def test_chapter_3_figures_have_their_panels():
    from effitrain_helpers.measure.communication import CommunicationSummary
    from effitrain_helpers.training.checkpointing import CheckpointingRow
    from effitrain_helpers.training.local_sgd import WaySummary
    from effitrain_helpers.training.techniques import Techniques, TechniquesRun

    rows = [CheckpointingRow(n, 8, 8e6 * n, 1e6 * n, 1.1e6 * n, 0.1 * n, 0.13 * n) for n in (32, 64)]
    way = WaySummary(2, 2, True, [1, 2], 2, 2**21, 0, 2**20, 0.1, [1, 2], True, [0.7, 0.6])
    run = TechniquesRun(0, 1, Techniques(), "fp32", "", ["float32"], "float32", False, [0.7, 0.65], ["a", "b"], 0.2,
                        10**6, CommunicationSummary(2, [], 0, 0, 0.0), 0, 4 * 10**6, 10**6, "b")
    figures = [plots.plot_saved_bytes(["b", "k*b"], [1e6, 4e6], "t"), plots.plot_checkpointing(rows),
               plots.plot_local_sgd({"data_parallel": way, "local_sgd": way}), plots.plot_precision({"fp32": run, "bf16": run})]
    assert [len(f.axes) for f in figures] == [1, 2, 2, 2]
    assert len(figures[1].axes[0].lines) == 3 and len(figures[3].axes[0].lines) == 2  # off, on, theory; 2 curves
    assert "(ran as fp32)" in figures[3].axes[0].get_legend().get_texts()[1].get_text()
    assert [t.get_text() for t in figures[3].axes[1].get_xticklabels()] == ["fp32"]  # bf16 ran as fp32: no bar


@pytest.mark.slow
def test_efficiency_widget_compares_a_chosen_run_with_everything_off(capsys):
    from effitrain_helpers.teach.widgets import efficiency_widget

    box = efficiency_widget(num_processes=2, steps=2)
    box.controls["local_sgd"].value = 2
    box.controls["accumulation"].value = 2
    baseline, chosen = box.run()
    assert baseline.communication.synchronisations == 2 and chosen.communication.synchronisations == 1
    assert chosen.activation_bytes < baseline.activation_bytes and chosen.replicas_agree
    assert "synchronisations" in capsys.readouterr().out


# --- chapter 4 ---------------------------------------------------------------------------------------------------

def test_state_bytes_plot_labels_the_ratio():
    fig = plots.plot_state_bytes([("AdamW", 8 * 2**20, 8 * 2**20), ("Adafactor", 2**19, 2**20)])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["1.000x theory", "0.500x theory"]
    with pytest.raises(ValueError, match="unit='GB' is not allowed"):
        plots.plot_state_bytes([("x", 1, 1)], unit="GB")
    with pytest.raises(ValueError, match="no rows"):
        plots.plot_state_bytes([])


@pytest.mark.slow  # trains for many steps in this process
def test_optimizer_widget_runs_the_comparison_with_its_choices(capsys, monkeypatch):
    import IPython.display

    from effitrain_helpers.teach.widgets import optimizer_widget

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, *a, **k: shown.append(obj))
    box = optimizer_widget(steps=5)
    box.controls["optimizers"].value = ("adamw", "adafactor")
    box.controls["default_lr"].value = False
    box.controls["learning_rate"].value = 2e-3
    result = box.run()
    assert [r.name for r in result.runs] == ["adamw", "adafactor"]
    assert all(r.learning_rate == pytest.approx(2e-3) and r.steps == 5 for r in result.runs)
    tables = [obj.data for obj in shown if hasattr(obj, "data")]  # the comparison, a styled() table
    assert any("final loss" in table.columns for table in tables), shown
    fig = plots.plot_optimizer_comparison(result)
    assert len(fig.axes) == 3 and len(fig.axes[2].get_lines()) == 2
    for run in result.runs:  # the time panel's error bars are the measured quartiles: never below 0
        q1, q3 = run.seconds_per_step_quartiles
        assert 0 < q1 <= run.seconds_per_step <= q3
    bars = fig.axes[1].collections[0].get_segments()
    drawn = [y for s in bars for y in s[:, 1]]
    assert drawn == pytest.approx([q * 1e3 for r in result.runs for q in r.seconds_per_step_quartiles])
    controls = [c for c in box.controls.values() if c.description != "each optimizer's default learning rate"]
    assert all(c.style.description_width == "initial" for c in controls), "labels shown whole"
    assert not box.controls["default_lr"].indent and box.controls["default_lr"].layout.width == "auto"
    box.controls["optimizers"].value = ()
    assert box.run() is None and "Pick at least one optimizer" in capsys.readouterr().out


def test_adafactor_factors_figure_rebuilds_from_the_means():
    import numpy as np

    full = np.outer(np.arange(1, 5), np.arange(1, 4)).astype(float)  # rank 1: the rebuild is exact
    fig = plots.plot_adafactor_factors(full, full.mean(axis=1), full.mean(axis=0), title="t")
    images = [ax.get_images()[0].get_array() for ax in fig.axes if ax.get_images()]
    assert np.allclose(images[0], np.log10(full)) and np.allclose(images[-1], np.log10(full))
    with pytest.raises(ValueError, match="row of shape"):
        plots.plot_adafactor_factors(full, full.mean(axis=0), full.mean(axis=1))


def test_blockwise_quantisation_figure_decodes_with_the_block_scales():
    import numpy as np

    qmap = np.linspace(-1, 1, 256)
    values = np.concatenate([np.linspace(-0.5, 0.5, 256), np.linspace(-2, 2, 256)])
    absmax = np.array([0.5, 2.0])
    codes = np.abs((values / np.repeat(absmax, 256))[:, None] - qmap[None, :]).argmin(axis=1).astype(np.uint8)
    fig = plots.plot_blockwise_quantisation(values, codes, absmax, qmap, blocks=2)
    decoded = fig.axes[0].get_lines()[1].get_ydata()
    assert np.abs(decoded - values).max() <= 2.0 / 255 + 1e-9
    with pytest.raises(ValueError, match="one absmax per block"):
        plots.plot_blockwise_quantisation(values, codes, absmax[:1], qmap)


def test_plot_rank_bytes_draws_one_bar_per_rank_and_refuses_nothing():
    import pytest

    from effitrain_helpers.teach.plots import plot_rank_bytes

    ddp = [{"parameters": 4, "gradients": 4, "optimizer state": 8}] * 2
    fsdp = [{"parameters": 2, "gradients": 2, "optimizer state": 4}] * 2
    fig = plot_rank_bytes({"DDP": ddp, "FSDP": fsdp}, theory={"DDP": ddp, "FSDP": fsdp})
    ax = fig.axes[0]
    assert len(ax.patches) == 4 * 3 and [t.get_text() for t in ax.get_xticklabels()][2] == "rank 0"
    assert [t.get_text() for t in ax.texts if t.get_text() in ("DDP", "FSDP")] == ["DDP", "FSDP"]  # once each
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_rank_bytes({})


def test_plot_rank_bytes_names_six_strategies_without_overlapping_them():
    """Lesson 6.3's six strategies: their names under the bars overlapped in a 10-inch figure."""
    import matplotlib.pyplot as plt

    from effitrain_helpers.teach.plots import plot_rank_bytes

    held = [{"parameters": 4, "gradients": 4, "optimizer state": 8}] * 2
    for first in ("AdamW, averaged gradients", "AdamW, gradientes em média"):
        names = [first, "ZeRO-1 by hand", "ZeRO-2 by hand", "ZeRO-3 by hand", "ZeroRedundancyOptimizer", "fully_shard"]
        fig = plot_rank_bytes({name: held for name in names})
        fig.canvas.draw()
        boxes = [t.get_window_extent() for t in fig.axes[0].texts if t.get_text().replace("\n", " ") in names]
        assert len(boxes) == 6 and not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])), first
        plt.close(fig)
