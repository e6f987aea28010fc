"""Load a whole model and its tokenizer for running on text: folders, hub ids, runs, packages.

Unlike the weight readers of :mod:`posviz.read`, running a model needs all its
weights. ``MODEL`` is resolved once (:func:`posviz.read.sources.resolve_source`):
a ``posviz train`` run (``RUN`` or ``RUN@STEP``) loads that checkpoint and the
run's ``tokenizer/``; a local or packaged folder loads from disk; a hub id goes
through ``from_pretrained`` (the Hugging Face cache first; ``HF_HUB_OFFLINE`` is
honoured). Encoder-decoder models (T5, BART) run their encoder alone.

Attention is eager by default, because only eager attention returns the attention
probabilities that ``posviz attention`` and ``posviz extrapolate`` read. ``posviz
hidden`` reads hidden states alone and loads the model's own default (SDPA where the
model supports it), which is what a plain ``from_pretrained`` script runs.

Inside :func:`posviz.observe.shared_models.shared_models` a model is loaded once and handed to every later call for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posviz.errors import OptionError, SourceError, UnsupportedModelError
from posviz.observe.lengths import max_positions, table_length, training_length
from posviz.observe.shared_models import Weights
from posviz.read.families import config_value


@dataclass
class LoadedModel:
    """A model ready to run on token blocks.

    Attributes
    ----------
    model
        The module to call (the encoder alone for encoder-decoder models), in eval mode.
    tokenizer
        The model's tokenizer, or the run's (``None`` when not asked for).
    label
        The model as named in outputs.
    num_layers, num_heads
        Attention layers and heads per layer, from the config.
    max_positions
        The declared length, less padding rows (``None``: none declared;
        :func:`posviz.observe.lengths.max_positions`).
    table_positions
        The longest block the model's learned position table allows (``None``: no
        table, any length runs; :func:`posviz.observe.lengths.table_length`).
    trained_positions
        The length the model was trained at, when its config says
        (:func:`posviz.observe.lengths.training_length`).
    missing_keys
        With a ``head``: parameters the checkpoint did not hold, newly initialised by
        ``from_pretrained`` (an encoder saved without its language-model head, say).
    """

    model: Any
    tokenizer: Any
    label: str
    num_layers: int
    num_heads: int
    max_positions: int | None
    table_positions: int | None = None
    trained_positions: int | None = None
    missing_keys: tuple[str, ...] = ()


def _where(spec: str) -> tuple[str, str | None, str, Path | None]:
    """``(what from_pretrained loads, revision, label, run folder)``."""
    from posviz.read.sources import resolve_source

    source = resolve_source(spec)
    if source.kind == "file":
        raise SourceError(f"{spec} is a weight file; posviz attention runs the model and needs its folder",
                          "give the model folder (config.json beside the weights)")
    if source.kind == "hub":
        return source.repo_id or spec, source.revision, source.label, None
    run = Path(source.run.run) if source.run is not None else None
    return str(source.root), None, source.label if run is None else source.run.describe(), run


def _tokenizer(where: str, revision: str | None, run: Path | None, override: str | None) -> Any:
    from transformers import AutoTokenizer

    place = override or (str(run / "tokenizer") if run is not None else where)
    try:
        return AutoTokenizer.from_pretrained(place, revision=None if override or run else revision)
    except Exception as e:  # transformers raises OSError, ValueError, ... for a missing or broken tokenizer
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceError(f"cannot load the tokenizer of {place}: {first}", "pass --tokenizer FOLDER") from None


def load_tokenizer(spec: str, tokenizer: str | None = None) -> Any:
    """The tokenizer :func:`load_model` would use for ``spec`` (a run's own for ``RUN``), or ``tokenizer``."""
    where, revision, _, run = _where(spec)
    return _tokenizer(where, revision, run, tokenizer)


#: ``head`` of :func:`load_model`: the Auto class of each language-model head.
HEADS = {"causal-lm": "AutoModelForCausalLM", "masked-lm": "AutoModelForMaskedLM"}


def load_model(spec: str, *, device: str | None = None, device_map: str | None = None,
               tokenizer: str | None = None, with_tokenizer: bool = True, head: str | None = None,
               config_edit: Callable[[Any], None] | None = None, attn_implementation: str | None = "eager") -> LoadedModel:
    """Load ``spec`` (eager attention by default), in eval mode, and its tokenizer.

    Parameters
    ----------
    spec
        A model folder, hub id, packaged model, ``RUN`` or ``RUN@STEP``.
    device
        ``cpu`` or ``cuda`` (default: cpu); ignored with ``device_map``.
    device_map
        Passed to ``from_pretrained`` (``"auto"``: accelerate spreads the layers over
        the available devices).
    tokenizer
        A tokenizer folder or id to use instead of the model's.
    with_tokenizer
        Load the tokenizer (``False``: the caller brings token ids; ``tokenizer`` is then ``None``).
    head
        ``None`` (the bare model, ``AutoModel``), or a key of :data:`HEADS` to load the
        model with that language-model head (``posviz extrapolate`` scores its logits);
        the parameters the checkpoint lacked are then listed in ``missing_keys``.
    config_edit
        Called on the config before the weights are loaded (a RoPE-scaling variant, say).
    attn_implementation
        ``"eager"`` (attention probabilities are returned), or ``None`` for the
        model's default (faster where only hidden states are read).

    Raises
    ------
    SourceError, UnsupportedModelError
        The model or its tokenizer cannot be loaded, or has no eager attention (when asked for).
    """
    from transformers import AutoConfig

    import posviz.models  # noqa: F401  (registers posviz-trained models with the Auto classes)
    from posviz.observe.shared_models import shared_load

    where, revision, label, run = _where(spec)
    try:
        config = AutoConfig.from_pretrained(where, revision=revision)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceError(f"cannot read the config of {spec}: {first}") from None
    as_dict = config.to_dict()

    def load(chosen: str | None) -> Weights:
        return _load_weights(spec, where, revision, config, head=chosen, device=device, device_map=device_map,
                             config_edit=config_edit, attn_implementation=attn_implementation)

    if config_edit is None:  # the session's model where one is open (posviz.observe.shared_models)
        weights = shared_load((spec, device, device_map, attn_implementation), head, as_dict, load)
    else:  # an edited config is another model
        weights = load(head)
        as_dict = config.to_dict()  # as edited
    model = weights.module(head)
    missing = weights.missing_keys if head is not None else ()
    layers = config_value(config, ("num_hidden_layers", "n_layer", "num_layers"))
    heads = config_value(config, ("num_attention_heads", "n_head", "num_heads"))
    tok = _tokenizer(where, revision, run, tokenizer) if with_tokenizer else None
    declared = max_positions(config)
    return LoadedModel(model=model, tokenizer=tok, label=label, num_layers=int(layers), num_heads=int(heads),
                       max_positions=declared, table_positions=table_length(as_dict, declared),
                       trained_positions=training_length(as_dict, declared), missing_keys=missing)


def _load_weights(spec: str, where: str, revision: str | None, config: Any, *, head: str | None, device: str | None,
                  device_map: str | None, config_edit: Callable[[Any], None] | None,
                  attn_implementation: str | None) -> Weights:
    """``from_pretrained`` of ``spec`` with ``head`` (``None``: ``AutoModel``), in eval mode, on its device."""
    import transformers

    kwargs: dict[str, Any] = {"revision": revision}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if device_map is not None:
        kwargs["device_map"] = device_map
    if config_edit is not None:
        config_edit(config)
        kwargs["config"] = config
    if head is not None:
        kwargs["output_loading_info"] = True
    missing: tuple[str, ...] = ()
    try:
        model = _quiet_load(getattr(transformers, HEADS[head] if head else "AutoModel"), where, kwargs)
        if head is not None:
            model, info = model
            missing = tuple(sorted(info.get("missing_keys") or ()))
    except (ValueError, ImportError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if attn_implementation is None:
            raise UnsupportedModelError(f"{spec} cannot be loaded: {first}") from None
        raise UnsupportedModelError(f"{spec} cannot be loaded with {attn_implementation} attention: {first}",
                                    "posviz attention needs a model that exposes its attention probabilities") from None
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceError(f"cannot load {spec}: {first}") from None
    if getattr(config, "is_encoder_decoder", False):
        model = model.get_encoder()
    if device_map is None and device:
        model = _to_device(model, device)
    model.eval()
    return Weights(model, head, missing)


def _quiet_load(auto: Any, where: str, kwargs: dict[str, Any]) -> Any:
    """``auto.from_pretrained`` without transformers' weight-loading bar and load report.

    A masked-LM checkpoint loaded as its bare encoder has head weights it does not
    use; transformers lists them as unexpected, which is expected here.
    """
    from transformers.utils import logging as hf_logging

    was, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        return auto.from_pretrained(where, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
        if was:
            hf_logging.enable_progress_bar()


def _to_device(model: Any, device: str) -> Any:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OptionError(f"--device {device}: no CUDA device is available", "use --device cpu")
    return model.to(device)
