"""Interactive controls for demos (lesson 1.1): re-run the matrix benchmark with other settings.

``benchmark_widget()`` returns an ipywidgets box: choose sizes, dtypes and device, press *Run*,
and the table and plot below it are redrawn from a fresh measurement.
"""

from __future__ import annotations

from .bench import DTYPES, results_table, run_benchmark
from .devices import available_devices


def benchmark_widget(sizes: tuple[int, ...] = (128, 256, 512, 1024, 2048)):
    """An ipywidgets control that re-runs ``run_benchmark`` on demand; ``.run()`` runs it without a click."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .plots import plot_gflops

    size_box = w.SelectMultiple(options=list(sizes), value=tuple(sizes[:3]), description="sizes", rows=len(sizes))
    dtype_box = w.SelectMultiple(options=list(DTYPES), value=("float32",), description="dtypes", rows=3)
    families = ["cpu"] + sorted({d.split(":")[0] for d in available_devices() if d != "cpu"}) + ["all"]
    device_box = w.Dropdown(options=families, value="all", description="device")
    button = w.Button(description="Run", button_style="primary", icon="play")
    out = w.Output()

    def run(_=None) -> list | None:
        """Measure with the current choices, show table and plot; returns the results (None if nothing ran)."""
        out.clear_output()
        with out:
            if not size_box.value or not dtype_box.value:
                print("Pick at least one size and one dtype.")
                return None
            print("measuring ...")
            try:
                results, notes = run_benchmark(size_box.value, dtype_box.value, device_box.value, progress=True)
            except ValueError as err:  # e.g. a dtype the chosen GPU cannot run
                out.clear_output()
                print(f"Cannot run that: {err}")
                return None
            out.clear_output()
            for note in notes:
                print(note)
            print(results_table(results))
            fig = plot_gflops(results)
            display(fig)
            plt.close(fig)
        return results

    button.on_click(run)
    box = w.VBox([w.HBox([size_box, dtype_box, w.VBox([device_box, button])]), out])
    box.run = run  # lets tests and scripted demos trigger a run
    box.output = out
    return box


def optimizer_widget(steps: int = 60, optimizers: tuple[str, ...] = ("adamw", "adafactor", "adamw8bit")):
    """Chapter 4: pick optimizers and a learning rate, press *Run*: the fair comparison of
    ``optimizer_compare.compare_optimizers`` is redrawn below (table and figure). ``.run()`` runs it without a
    click and returns the :class:`~effitrain_helpers.optimizer_compare.Comparison` (None if nothing ran)."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .optimizer_compare import compare_optimizers, comparison_table
    from .plots import plot_optimizer_comparison

    names = w.SelectMultiple(options=list(optimizers), value=tuple(optimizers), description="optimizers",
                             rows=len(optimizers))
    default_lr = w.Checkbox(value=True, description="each optimizer's default learning rate")
    lr = w.FloatLogSlider(value=1e-3, base=10, min=-5, max=-1, step=0.25, description="learning rate",
                          readout_format=".1e")
    step_box = w.IntSlider(value=steps, min=5, max=max(400, steps), step=5, description="steps")
    button = w.Button(description="Run", button_style="primary", icon="play")
    out = w.Output()

    def run(_=None):
        """Compare with the current choices, show table and figure; returns the comparison (None if nothing ran)."""
        out.clear_output()
        with out:
            if not names.value:
                print("Pick at least one optimizer.")
                return None
            print("training ...")
            try:
                result = compare_optimizers(names.value, steps=step_box.value,
                                            learning_rate=None if default_lr.value else lr.value)
            except (ValueError, RuntimeError) as err:
                out.clear_output()
                print(f"Cannot run that: {err}")
                return None
            out.clear_output()
            print(comparison_table(result))
            fig = plot_optimizer_comparison(result)
            display(fig)
            plt.close(fig)
        return result

    button.on_click(run)
    box = w.VBox([w.HBox([names, w.VBox([default_lr, lr, step_box, button])]), out])
    box.run = run
    box.output = out
    box.controls = {"optimizers": names, "default_lr": default_lr, "learning_rate": lr, "steps": step_box}
    return box
