"""posviz: analyse and visualise how transformer language models encode position.

The public API is re-exported lazily so that ``import posviz`` (and the CLI's
``--help``) stays fast: numpy, matplotlib and torch load only when used.

Examples
--------
>>> import posviz
>>> pe = posviz.load_position_embeddings("sinusoidal:256x64")
>>> round(posviz.toeplitzness(embeddings=pe.matrix), 6)
1.0
"""

from __future__ import annotations

import warnings
from typing import Any

from posviz.util.lazy import lazy_exports


def _register_notebook_display() -> None:
    """Inside IPython or Jupyter, results show their figure and table when a cell ends with them: HTML formatters
    registered by type name (:data:`posviz.plots.display.FORMATTERS`), so that no result module is imported now."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is None:
        return
    from posviz.plots import display  # standard library only at import

    formatter = shell.display_formatter.formatters["text/html"]
    for module, name, function in display.FORMATTERS:
        formatter.for_type_by_name(module, name, getattr(display, function))


_register_notebook_display()

# In a notebook without ipywidgets, tqdm.auto (which transformers and huggingface_hub import) prints a red
# "IProgress not found" warning, then falls back to its plain text bar: keep the plain bar, without the warning.
warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")

_EXPORTS = {
    "load_position_embeddings": "posviz.read.embeddings",
    "PositionEmbeddings": "posviz.read.embeddings",
    "sinusoidal_embeddings": "posviz.read.embeddings",
    "toeplitzness": "posviz.toeplitz.engine",
    "toeplitz_projection": "posviz.toeplitz.projection",
    "diagonal_profile": "posviz.toeplitz.profile",
    "score_embeddings": "posviz.toeplitz.engine",
    "null_baseline": "posviz.toeplitz.null",
    "gram": "posviz.positional_scores",
    "ToeplitzScore": "posviz.toeplitz.result",
    "PositionalScores": "posviz.positional_scores",
    "score_model": "posviz.scoring.model",
    "plot_heatmap": "posviz.plots.heatmap",
    "build_report": "posviz.report",
    "open_heads": "posviz.extract.registry",
    "AbsoluteHeads": "posviz.extract.absolute",
    "score_layer": "posviz.toeplitz.engine",
    "score": "posviz.toeplitz.engine",
    "plot_heads": "posviz.plots.heads",
    "resolve_source": "posviz.read.sources",
    "Checkpoint": "posviz.read.checkpoints",
    "PosvizError": "posviz.errors",
    "table3": "posviz.finetuning.tables",
    "table3_markdown": "posviz.finetuning.tables",
    "score_by_step": "posviz.finetuning.tables",
    "attention": "posviz.observe.attention",
    "AttentionResult": "posviz.observe.attention_result",
    "hidden": "posviz.observe.hidden",
    "HiddenResult": "posviz.observe.hidden_result",
    "observe_text": "posviz.observe.text_pass",
    "TextInput": "posviz.observe.text_input",
    "AttentionRequest": "posviz.observe.attention_pass",
    "HiddenRequest": "posviz.observe.hidden_pass",
    "ExtrapolationResult": "posviz.extrapolation.result",
    "trajectory": "posviz.series.trajectory",
    "explore": "posviz.explorer.explorer",
    "Explorer": "posviz.explorer.explorer",
    "finetune": "posviz.finetuning.finetune",
    "extrapolate": "posviz.extrapolation.extrapolate",
    "TrajectoryResult": "posviz.series.trajectory",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("posviz")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+unknown"


_lazy_getattr, _ = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # computed on first use: importlib.metadata is slow to import
        globals()[name] = value = _version()
        return value
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    return __all__
