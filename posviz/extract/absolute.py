"""Position-only attention logits of every head of absolute-position models.

For layer ``L`` and head ``h`` the map is

``A_h = (X W_Q^h + b_Q^h)(X W_K^h + b_K^h)^T * scale``

where ``X`` is the position part of the layer's input, built from the learned
position table ``E_P`` in one of the modes of :mod:`posviz.schemes.absolute`:

* ``--ln none``: ``X = E_P``;
* ``--ln ln``: ``E_P`` through the LayerNorm(s) the model applies before the
  attention: the embedding LayerNorm for post-LN encoders (BERT, RoBERTa,
  ALBERT, ELECTRA, DistilBERT, BART), the layer's input LayerNorm for pre-LN
  decoders (GPT-2 and GPT-Neo ``ln_1``, OPT ``self_attn_layer_norm``);
* ``--ln ln+type0``: as ``ln`` with token-type row 0 added to ``E_P`` first (what
  BERT-style models see for a first segment without the word embeddings).

ALBERT and ELECTRA then map the embedding size to the hidden size
(``embedding_hidden_mapping_in`` / ``embeddings_project``, with bias). Deeper
layers get the same position input (exact for layer 0; deeper layers ignore
what earlier layers add), through their own pre-LN LayerNorm where they have one.

Nothing ``n x n`` is built: each layer is a factored
:class:`~posviz.positional_scores.PositionalScores`. The per-layer LayerNorm is folded into
the projection (``LN_L(x) = x_hat * gamma_L + beta_L`` with ``x_hat`` shared by
all layers), so the one expensive step per layer is a single
``(2 H d_h) x d`` by ``d x n`` product. See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from posviz.errors import CheckpointError, OptionError
from posviz.extract.base import HeadsOptions, check_layer, check_ln, read_finite, refuse_synthetic
from posviz.positional_scores import PositionalScores
from posviz.read.families import POSVIZ_MODEL_TYPE, Family
from posviz.read.layouts import AttentionLayout, attention_layout
from posviz.schemes.absolute import LN_MODES, layer_norm

if TYPE_CHECKING:
    from posviz.read.sources import Source
    from posviz.toeplitz.result import ToeplitzScore

LAYER_INPUT_NOTE = "position part only, fed straight into the layer (exact for layer 0)"


@dataclass
class FoldedProjection:
    """Query and key projections of one layer with its LayerNorm and scale folded in.

    ``Q^T = wt[:D] @ x0^T + b[:D]`` and ``K^T = wt[D:] @ x0^T + b[D:]`` where
    ``x0`` is the shared input of :class:`AbsoluteHeads` and ``D = heads * d_h``.
    """

    wt: np.ndarray  # (2D, d)
    b: np.ndarray  # (2D,)
    scale: float
    scale_rule: str
    norms: list[str]


class AbsoluteHeads:
    """Per-head position-only attention maps of an absolute-position model.

    Parameters
    ----------
    model
        Model folder, weight file or hub id (as for
        :func:`~posviz.read.embeddings.load_position_embeddings`), or a resolved
        :class:`~posviz.read.sources.Source`.
    ln
        ``none``, ``ln`` or ``ln+type0`` (see the module docstring).
    bias
        Include the query/key projection biases.
    positions
        Positions to keep, ``"A:B"`` or a slice (after the family's row offset).
    table
        Position table for models with several (BART: ``encoder``/``decoder``).

    Examples
    --------
    >>> heads = AbsoluteHeads("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> from posviz.toeplitz import score
    >>> score(heads.layer(0)).toeplitzness.shape                          # doctest: +SKIP
    (12,)
    """

    scheme = "learned"

    def __init__(
        self,
        model: str | Source,
        *,
        ln: str = "ln",
        bias: bool = True,
        positions: slice | str | None = None,
        table: str | None = None,
    ) -> None:
        from posviz.read.checkpoints import Checkpoint
        from posviz.read.embeddings import load_position_embeddings
        from posviz.read.sources import resolve_source

        check_ln(ln)
        refuse_synthetic(model)
        self.pe = load_position_embeddings(model, table=table, positions=positions)
        self.config: dict[str, Any] = self.pe.config
        self.layout: AttentionLayout = attention_layout(self.config, self.pe.table)
        self.ckpt = Checkpoint(model if not isinstance(model, str) else resolve_source(model))
        self.ln = ln
        self.bias = bias and self.layout.has_bias(self.config)
        self.bias_requested = bias
        self.num_layers = self.layout.num_layers(self.config)
        self.num_heads = self.layout.num_heads(self.config)
        self.eps = self.layout.eps(self.config)
        self._prepare_input()
        self.head_dim = self._hidden // self.num_heads
        if self.head_dim * self.num_heads != self._hidden:
            raise CheckpointError(f"{self.pe.model}: hidden size {self._hidden} is not divisible by {self.num_heads} heads")

    # ---- input shared by all layers -------------------------------------
    def _norm_params(self, module: str) -> tuple[np.ndarray | None, np.ndarray | None, list[str]]:
        names = [self.ckpt.find(f"{module}.{p}") for p in ("weight", "bias")]
        if not any(names) and not self._affine_optional():
            raise CheckpointError(f"{self.pe.model}: no LayerNorm {module!r} in the checkpoint")
        gamma, beta = (read_finite(self.ckpt, n) if n else None for n in names)
        return gamma, beta, [n for n in names if n]

    def _affine_optional(self) -> bool:
        # OPT may be built with layer_norm_elementwise_affine=False: no LayerNorm tensors at all.
        return self.config.get("layer_norm_elementwise_affine", True) is False

    def _prepare_input(self) -> None:
        x = self.pe.matrix
        self.token_type: str | None = None
        if self.ln == "ln+type0":
            suffix = self.layout.token_type
            name = self.ckpt.find(f"{suffix}.weight") if suffix else None
            if name is None:
                raise OptionError(
                    f"{self.pe.model} has no token-type embeddings, so --ln ln+type0 does not apply",
                    "use --ln ln or --ln none",
                )
            x = x + read_finite(self.ckpt, name, slice(0, 1))[0]
            self.token_type = f"{name}[0]"
        norms = self.layout.norms(self.config) if self.ln != "none" else ()
        shared = [m for m in norms if "{layer}" not in m]
        self._layer_norm = next((m for m in norms if "{layer}" in m), None)
        if self._layer_norm is not None and norms[-1] != self._layer_norm:
            raise AssertionError("a per-layer LayerNorm must be the last one applied")
        self.shared_norms: list[str] = []
        for module in shared:
            gamma, beta, names = self._norm_params(module)
            x = layer_norm(x, gamma, beta, self.eps)
            self.shared_norms += names or [f"{module} (no affine parameters)"]
        self.mapping: str | None = None
        if self.layout.mapping:
            w = self.ckpt.find(f"{self.layout.mapping}.weight")
            if w is None and not self.layout.mapping_optional:
                raise CheckpointError(f"{self.pe.model}: no tensor {self.layout.mapping}.weight in the checkpoint")
            if w is not None:
                b = self.ckpt.find(f"{self.layout.mapping}.bias")
                x = x @ read_finite(self.ckpt, w).T + (read_finite(self.ckpt, b) if b else 0.0)
                self.mapping = w + (" (with bias)" if b else "")
        if self._layer_norm is not None:
            x = layer_norm(x, None, None, self.eps)  # x_hat; each layer's gamma/beta is folded into W
        self._hidden = x.shape[1]
        # (d + 1, n): projections are computed transposed; the row of ones carries the bias
        self.x0t = np.concatenate([x.T, np.ones((1, x.shape[0]))])

    # ---- per layer ------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of positions."""
        return self.pe.n

    def check_layer(self, layer: int) -> int:
        """Validate a layer index (clear error, exit code 2 in the CLI)."""
        return check_layer(layer, self.num_layers, self.pe.model)

    def _module(self, pattern: str, layer: int) -> str:
        return pattern.format(layer=self.layout.module_index(self.config, layer))

    def _read(self, module: str, what: str) -> np.ndarray:
        return read_finite(self.ckpt, self.ckpt.require(f"{module}.{what}", f"{what} of {module}"))

    def projection(self, layer: int) -> FoldedProjection:
        """Read layer ``layer``'s Q/K tensors (only those) and fold LayerNorm and scale in."""
        self.check_layer(layer)
        lay, hidden = self.layout, self._hidden
        if lay.fused_conv1d:
            module = self._module(lay.query, layer)
            w = self._read(module, "weight")  # Conv1D: (in, 3 * out)
            if w.shape != (hidden, 3 * hidden):
                raise CheckpointError(f"{self.pe.model}: {module}.weight has shape {w.shape}, expected ({hidden}, {3 * hidden})")
            wt = w[:, : 2 * hidden].T  # a view; every later step makes new arrays or writes into w
            b = self._read(module, "bias")[: 2 * hidden] if self.bias else np.zeros(2 * hidden)
        else:
            parts, biases = [], []
            for pattern in (lay.query, lay.key):
                module = self._module(pattern, layer)
                w = self._read(module, "weight")  # nn.Linear: (out, in)
                if w.shape != (hidden, hidden):
                    raise CheckpointError(f"{self.pe.model}: {module}.weight has shape {w.shape}, expected ({hidden}, {hidden})")
                parts.append(w)
                biases.append(self._read(module, "bias") if self.bias else np.zeros(hidden))
            wt, b = np.concatenate(parts), np.concatenate(biases)
        norms = list(self.shared_norms)
        if self._layer_norm is not None:
            module = self._module(self._layer_norm, layer)
            gamma, beta, names = self._norm_params(module)
            norms += names or [f"{module} (no affine parameters)"]
            if beta is not None:
                b = b + wt @ beta  # before scaling W by gamma
            if gamma is not None:
                wt = wt * gamma[None, :]
        scale, rule = self._scale(layer)
        wt[:hidden] *= scale
        b = b.copy()
        b[:hidden] *= scale
        return FoldedProjection(wt, b, scale, rule, norms)

    def _scale(self, layer: int) -> tuple[float, str]:
        dh = self.head_dim
        rule = self.layout.scale
        if rule == "none":
            return 1.0, "1 (the implementation does not scale Q K^T)"
        if rule == "gpt2":
            s, text = 1.0, []
            if self.config.get("scale_attn_weights", True):
                s, text = dh**-0.5, [f"1/sqrt({dh})"]
            if self.config.get("scale_attn_by_inverse_layer_idx", False):
                s /= layer + 1
                text.append(f"1/{layer + 1} (scale_attn_by_inverse_layer_idx)")
            return s, " * ".join(text) or "1 (scale_attn_weights is false)"
        return dh**-0.5, f"1/sqrt({dh})"

    def _project(self, layer: int, *, reuse: bool = False) -> tuple[np.ndarray, FoldedProjection]:
        """``(2 H d_h, n)`` array: rows head by head (queries then keys), columns positions.

        The layout :func:`posviz.toeplitz.statistics.stacked_statistics` takes, written by one
        matrix product. With ``reuse`` the same work array serves every call (no
        fresh pages per layer); its contents are then only valid until the next call.
        """
        proj = self.projection(layer)
        self.conventions(layer, proj)  # remembered, so that stating them later reads nothing again
        h, dh, n = self.num_heads, self.head_dim, self.n
        # Rows ordered head by head (q_0, k_0, q_1, k_1, ...) and the bias as an extra
        # input column: one product writes the whole layout.
        order = (np.arange(h)[:, None, None] * dh + np.arange(2)[None, :, None] * h * dh + np.arange(dh)).ravel()
        w = np.concatenate([proj.wt[order], proj.b[order, None]], axis=1)
        shape = (2 * h * dh, n)
        if reuse:
            if getattr(self, "_work", None) is None or self._work.shape != shape:
                self._work = np.empty(shape)
            buf = self._work
        else:
            buf = np.empty(shape)
        np.matmul(w, self.x0t, out=buf)
        return buf, proj

    def _stack(self, buf: np.ndarray, proj: FoldedProjection, layer: int) -> PositionalScores:
        h, dh, n = self.num_heads, self.head_dim, self.n
        z = buf.reshape(h, 2, dh, n)
        q = z[:, 0].transpose(0, 2, 1)
        k = z[:, 1].transpose(0, 2, 1)
        meta = {**self.metadata(), **self.conventions(layer, proj), "layer": layer}
        return PositionalScores("factored", n, h, left=q, right=k, meta=meta)

    def layer(self, layer: int) -> PositionalScores:
        """All heads of one layer as a factored ``(heads, n, n)`` stack.

        The factors are ``(heads, n, d_h)`` views of one projected array; the
        scale is folded into the left (query) factor.
        """
        buf, proj = self._project(layer)
        return self._stack(buf, proj, layer)

    def score(
        self, layer: int, *, null_draws: int = 0, seed: int = 0, keep: bool = True
    ) -> tuple[PositionalScores | None, ToeplitzScore]:
        """The layer's stack and its per-head scores (the fast path used by the CLI).

        Parameters
        ----------
        layer
            Layer index.
        null_draws, seed
            See :func:`posviz.toeplitz.engine.score`.
        keep
            Return the stack too; ``False`` returns ``None`` for it and reuses one
            work array for all layers (scoring many layers).
        """
        from posviz.toeplitz.engine import score_stacked

        buf, proj = self._project(layer, reuse=not keep)
        z = buf.reshape(self.num_heads, 2, self.head_dim, self.n)
        scores = score_stacked(z, null_draws=null_draws, seed=seed)
        return (self._stack(buf, proj, layer) if keep else None), scores

    # ---- provenance ------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """Model-level provenance (model, source, family, rows kept, ...)."""
        pe = self.pe
        return {
            "model": pe.model,
            "source": pe.source,
            "family": pe.family,
            "model_type": self.config.get("model_type"),
            "scheme": "learned absolute (position-only Q K^T per head)",
            "table": pe.table,
            "tensor": pe.tensor,
            "positions": pe.n,
            "rows": [pe.rows[0], pe.rows[1]],
            "rows_note": pe.rows_note(),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "head_dim": self.head_dim,
        }

    def conventions(self, layer: int, proj: FoldedProjection | None = None) -> dict[str, Any]:
        """The conventions used for ``layer`` (every output states them)."""
        cache = self.__dict__.setdefault("_conventions", {})
        if proj is None and layer in cache:
            return dict(cache[layer])
        proj = proj or self.projection(layer)
        out: dict[str, Any] = {
            "ln": self.ln,
            "layer_norms": proj.norms,
            "token_type": self.token_type,
            "bias": self.bias,
            "scale": proj.scale,
            "scale_rule": proj.scale_rule,
            "mapping": self.mapping,
            "layer_input": LAYER_INPUT_NOTE,
        }
        if self.ln != "none" and not proj.norms:
            out["ln_note"] = "no LayerNorm precedes this model's attention (post-LN without an embedding LayerNorm)"
        if self.bias_requested and not self.bias:
            out["bias_note"] = "the projections of this model have no biases"
        if self.layout.shared_groups:
            g = self.layout.module_index(self.config, layer)
            out["shared_layer"] = f"albert_layer_groups.{g}.albert_layers.0 (parameters shared across layers)"
        cache[layer] = out
        return dict(out)


# ---- the scheme's entry in posviz.extract.registry ------------------------
def claims(family: Family, config: Mapping[str, Any]) -> bool:
    """Learned absolute tables, except in models trained by ``posviz train`` (their own code)."""
    return family.scheme == "learned" and POSVIZ_MODEL_TYPE not in family.model_types


def open_heads(source: Source, family: Family, options: HeadsOptions) -> AbsoluteHeads:
    """The :class:`AbsoluteHeads` of a resolved source."""
    return AbsoluteHeads(source, ln=options.ln, bias=options.bias, positions=options.positions, table=options.table)


def describe(c: Mapping[str, Any]) -> list[str]:
    """Parts of the conventions line: input, LayerNorms, mapping, shared layer, biases."""
    if c.get("ln") not in LN_MODES or "bias" not in c:
        return []
    inputs = {"none": "raw E_P (no LayerNorm)", "ln": "LN(E_P)", "ln+type0": "LN(E_P + token_type[0])"}
    parts = [f"input {inputs[c['ln']]}"]
    if c.get("layer_norms"):
        parts.append("LayerNorm " + ", ".join(sorted({n.rsplit(".", 1)[0] for n in c["layer_norms"]})))
    elif c.get("ln_note"):
        parts.append(c["ln_note"])
    if c.get("mapping"):
        parts.append(f"mapped by {c['mapping']}")
    if c.get("shared_layer"):
        parts.append(c["shared_layer"])
    parts.append("Q/K biases " + ("on" if c["bias"] else "off"))
    return parts
