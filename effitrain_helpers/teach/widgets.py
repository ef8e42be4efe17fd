"""Interactive controls for demos: re-run the matrix benchmark (lesson 1.1), switch chapter 3's techniques (3.3),
compare chapter 4's optimizers (4.3); their labels and lines in the learner's language (``tr``).

``benchmark_widget()`` returns an ipywidgets box: choose sizes, dtypes and device, press *Run*,
and the table and plot below it are redrawn from a fresh measurement.
"""

from __future__ import annotations

from effitrain_helpers.core.language import styled, tr
from effitrain_helpers.measure.bench import DTYPES, results_table, run_benchmark
from effitrain_helpers.core.devices import available_devices


def benchmark_widget(sizes: tuple[int, ...] = (128, 256, 512, 1024, 2048)):
    """An ipywidgets control that re-runs ``run_benchmark`` on demand; ``.run()`` runs it without a click."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from effitrain_helpers.teach.plots import plot_gflops

    size_box = w.SelectMultiple(options=list(sizes), value=tuple(sizes[:3]), description=tr("sizes"), rows=len(sizes))
    dtype_box = w.SelectMultiple(options=list(DTYPES), value=("float32",), description=tr("dtypes"), rows=3)
    families = ["cpu"] + sorted({d.split(":")[0] for d in available_devices() if d != "cpu"}) + ["all"]
    device_box = w.Dropdown(options=families, value="all", description=tr("device"))
    button = w.Button(description=tr("Run"), button_style="primary", icon="play")
    out = w.Output()

    def run(_=None) -> list | None:
        """Measure with the current choices, show table and plot; returns the results (None if nothing ran)."""
        out.clear_output()
        with out:
            if not size_box.value or not dtype_box.value:
                print(tr("Pick at least one size and one dtype."))
                return None
            print(tr("measuring ..."))
            try:
                results, notes = run_benchmark(size_box.value, dtype_box.value, device_box.value, progress=True)
            except ValueError as err:  # e.g. a dtype the chosen GPU cannot run
                out.clear_output()
                print(tr("Cannot run that: {err}", err=err))
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


def efficiency_widget(num_processes: int = 2, steps: int = 8):
    """Chapter 3's controls: switch gradient accumulation, activation checkpointing, mixed precision and local
    SGD on or off, press *Run*: one training run of ``steps`` steps in ``num_processes`` fresh processes,
    shown next to a run with every technique off (measured once, on the first click). ``.run()`` runs it
    without a click and returns ``(baseline, this_run)``."""
    import ipywidgets as w

    from effitrain_helpers.training.techniques import PRECISIONS, Techniques, measure_techniques
    from effitrain_helpers.processes.launch import RankFailed

    accumulation = w.Dropdown(options=[1, 2, 4], value=1, description=tr("accumulation"))
    checkpointing = w.Checkbox(value=False, description="gradient checkpointing")
    precision = w.Dropdown(options=list(PRECISIONS), value="fp32", description=tr("precision"))
    local_sgd = w.Dropdown(options=[(tr("off"), None)] + [(tr("every {k} steps", k=k), k) for k in (2, 4)],
                           value=None, description="local SGD")
    button = w.Button(description=tr("Run"), button_style="primary", icon="play")
    out = w.Output()
    cache: dict = {}

    def run(_=None):
        """Train with the current choices and show the comparison; returns (baseline, this run), or None."""
        out.clear_output()
        with out:
            chosen = Techniques(accumulation_steps=accumulation.value, checkpointing=checkpointing.value,
                                precision=precision.value, local_sgd_steps=local_sgd.value, steps=steps)
            print(tr("training {steps} steps in {n} processes ...", steps=steps, n=num_processes))
            try:
                if "baseline" not in cache:
                    cache["baseline"] = measure_techniques(Techniques(steps=steps), num_processes)
                result = measure_techniques(chosen, num_processes)
            except (ValueError, RankFailed) as err:  # e.g. bf16 on a GPU without it
                out.clear_output()
                print(tr("Cannot run that: {err}", err=err))
                return None
            out.clear_output()
            base = cache["baseline"]
            for note in {result.note} - {""}:
                print(note)
            rows = [(tr("activations saved for backward (MiB, per micro-batch)"), "activation_bytes", 2**-20),
                    (tr("time per optimizer step (ms)"), "seconds_per_step", 1e3)]
            print(f"{'':<55}{tr('all off'):>10}{tr('chosen'):>10}")
            for label, key, scale in rows:
                print(f"{label:<55}{getattr(base, key) * scale:>10.1f}{getattr(result, key) * scale:>10.1f}")
            print(f"{tr('synchronisations'):<55}{base.communication.synchronisations:>10}"
                  f"{result.communication.synchronisations:>10}")
            print(f"{tr('final training loss'):<55}{base.losses[-1]:>10.4f}{result.losses[-1]:>10.4f}")
            print(tr("matrix products ran in {dtypes}; replicas identical at the end: {agree}",
                     dtypes=", ".join(result.compute_dtype), agree=result.replicas_agree))
        return cache["baseline"], result

    button.on_click(run)
    box = w.VBox([w.HBox([w.VBox([accumulation, precision, local_sgd]), w.VBox([checkpointing, button])]), out])
    box.run = run
    box.output = out
    box.controls = {"accumulation": accumulation, "checkpointing": checkpointing, "precision": precision,
                    "local_sgd": local_sgd}
    return box


def optimizer_widget(steps: int = 60, optimizers: tuple[str, ...] = ("adamw", "adafactor", "adamw8bit")):
    """Chapter 4: pick optimizers and a learning rate, press *Run*: the fair comparison of
    ``optimizer_compare.compare_optimizers`` is redrawn below (table and figure). ``.run()`` runs it without a
    click and returns the :class:`~effitrain_helpers.training.optimizer_compare.Comparison` (None if nothing ran)."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from effitrain_helpers.training.optimizer_compare import comparison_caption, comparison_frame, compare_optimizers
    from effitrain_helpers.teach.plots import plot_optimizer_comparison

    labels = {"style": {"description_width": "initial"}}  # whole labels, never cut off
    names = w.SelectMultiple(options=list(optimizers), value=tuple(optimizers), description=tr("optimizers"),
                             rows=len(optimizers), **labels)
    default_lr = w.Checkbox(value=True, description=tr("each optimizer's default learning rate"), indent=False,
                            layout=w.Layout(width="auto"))
    lr = w.FloatLogSlider(value=1e-3, base=10, min=-5, max=-1, step=0.25, description=tr("learning rate"),
                          readout_format=".1e", **labels)
    step_box = w.IntSlider(value=steps, min=5, max=max(400, steps), step=5, description=tr("steps"), **labels)
    button = w.Button(description=tr("Run"), button_style="primary", icon="play")
    out = w.Output()

    def run(_=None):
        """Compare with the current choices, show table and figure; returns the comparison (None if nothing ran)."""
        out.clear_output()
        with out:
            if not names.value:
                print(tr("Pick at least one optimizer."))
                return None
            print(tr("training ..."))
            try:
                result = compare_optimizers(names.value, steps=step_box.value,
                                            learning_rate=None if default_lr.value else lr.value)
            except (ValueError, RuntimeError) as err:
                out.clear_output()
                print(tr("Cannot run that: {err}", err=err))
                return None
            out.clear_output()
            display(styled(comparison_frame(result).round(4)))
            print(comparison_caption(result))
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
