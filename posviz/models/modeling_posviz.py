"""An ALBERT-style encoder whose positional scheme is a config switch.

Module and parameter names mirror :mod:`transformers.models.albert` (``albert.
embeddings.*``, ``albert.encoder.embedding_hidden_mapping_in``,
``albert.encoder.albert_layer_groups.G.albert_layers.0.attention.query``,
``predictions.*``), so with ``position_scheme="absolute"`` an ``AlbertForMaskedLM``
state dict loads unchanged and gives the same logits. Positional schemes other
than the absolute table live in ``albert.encoder.position_scores`` (one module, or
one per layer for unshared TISA) with the common signature
``forward(n) -> (heads, n, n)``; their output is added to the attention logits
through ``torch.nn.functional.scaled_dot_product_attention``'s float mask,
together with the padding mask (and, for a causal model, the causal mask), so
the same code runs the fused kernels on CPU and CUDA and under bf16/fp16
autocast. Two schemes enter elsewhere: ``sinusoidal`` adds its fixed table to
the input as ``absolute`` adds E_P, and ``rope`` rotates q and k in every layer
(``albert.encoder.rotary_emb``, angles computed once per forward). Neither has
parameters, so every scheme's state dict keeps ALBERT's names.

Read top to bottom: embeddings, attention, layer, layer group, encoder (where
the positional scores and the causal mask join), masked-LM head, then the
Hugging Face classes (the causal LM is in :mod:`posviz.models.causal_lm`).
Shapes: ``B`` batch, ``n`` positions, ``H`` heads, ``d_h`` head width. The
scheme modules are in :mod:`posviz.schemes.modules`; see ARCHITECTURE.md.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput

from posviz.models.configuration_posviz import PosvizAlbertConfig
from posviz.schemes.modules import TisaScores, build_position_scores
from posviz.schemes.modules.plugins import is_plugin_module
from posviz.schemes.modules.rope import RotaryEmbedding, apply_rotary
from posviz.schemes.modules.sinusoidal import SinusoidalPositions
from posviz.util.compat import weight_init

init = weight_init()  # transformers 5: initialisers that skip weights loaded from a checkpoint


class PosvizEmbeddings(nn.Module):
    """Word (+ absolute or sinusoidal position) + token-type embeddings, LayerNorm, dropout (ALBERT's layout)."""

    def __init__(self, config: PosvizAlbertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id)
        if config.uses_absolute_table:
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.embedding_size)
        else:
            self.position_embeddings = None
        # no parameters and no buffers: the state dict is that of scheme "none"
        self.sinusoidal = SinusoidalPositions(config.embedding_size, config.sinusoidal_scale) if config.uses_fixed_table else None
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.embedding_size)
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings)[None], persistent=False)

    def forward(
        self,
        input_ids: torch.LongTensor,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
    ) -> torch.Tensor:
        n = input_ids.shape[1]
        x = self.word_embeddings(input_ids)  # (B, n) -> (B, n, embedding_size)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        if self.position_embeddings is not None:
            if n > self.position_embeddings.num_embeddings:
                raise ValueError(f"sequence length {n} exceeds max_position_embeddings {self.position_embeddings.num_embeddings}")
            ids = self.position_ids[:, :n] if position_ids is None else position_ids
            x = x + self.position_embeddings(ids)
        elif self.sinusoidal is not None:
            x = x + self.sinusoidal(n, x.device, x.dtype, position_ids)
        return self.dropout(self.LayerNorm(x))


class PosvizAttention(nn.Module):
    """ALBERT's self-attention block (projections, SDPA, output projection, residual LayerNorm)."""

    def __init__(self, config: PosvizAlbertConfig) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.head_dim
        # TUPE scales the content logits by 1/sqrt(2 d_h) as well as its positional term.
        self.scaling = (2 * config.head_dim if config.uses_tupe else config.head_dim) ** -0.5
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention_dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)
        # Eager attention (attn_implementation="eager") passes the probabilities through this module, where
        # forward hooks can read them (``posviz attention``); SDPA never forms them. No parameters.
        self.attention_probs = nn.Identity()
        self.config = config

    def queries_keys(self, hidden_states: torch.Tensor,
                     rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The queries and keys ``(B, H, n, d_h)`` of :meth:`forward`: projected, split into heads, RoPE-rotated.

        One definition for the model and for ``posviz attention``, which forms them again from a forward pre-hook to
        compute its statistics in tiles (:mod:`posviz.observe.tiled.capture`).
        """
        b, n, _ = hidden_states.shape
        shape = (b, n, self.num_attention_heads, self.attention_head_size)
        q = self.query(hidden_states).view(shape).transpose(1, 2)  # (B, n, hidden) -> (B, H, n, d_h)
        k = self.key(hidden_states).view(shape).transpose(1, 2)
        if rotary is not None:  # RoPE: q and k rotated by position, before either attention path
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        return q, k

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_bias: torch.Tensor | None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """``attention_bias``: the additive mask (positional scores, padding, causal mask);
        ``rotary``: RoPE's ``(cos, sin)``; ``is_causal``: mask ``j > i`` here (only when no bias carries the mask)."""
        b, n, _ = hidden_states.shape
        q, k = self.queries_keys(hidden_states, rotary)
        v = self.value(hidden_states).view(b, n, self.num_attention_heads, self.attention_head_size).transpose(1, 2)
        if attention_bias is not None and attention_bias.dtype != q.dtype:
            attention_bias = attention_bias.to(q.dtype)
        if getattr(self.config, "_attn_implementation", None) == "eager":
            logits = torch.matmul(q, k.transpose(-1, -2)) * self.scaling  # (B, H, n, n)
            if attention_bias is not None:
                logits = logits + attention_bias
            if is_causal:
                logits = logits.masked_fill(_future(n, logits.device), torch.finfo(logits.dtype).min)
            probs = self.attention_probs(torch.softmax(logits, dim=-1))
            out = torch.matmul(self.attention_dropout(probs), v)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v,
                attn_mask=attention_bias,
                dropout_p=self.attention_dropout.p if self.training else 0.0,
                is_causal=is_causal,
                scale=self.scaling,
            )  # (B, H, n, d_h); attn_mask (1 or B, H, n, n) is added to the scaled logits
        out = self.output_dropout(self.dense(out.transpose(1, 2).reshape(b, n, -1)))  # (B, n, hidden)
        return self.LayerNorm(hidden_states + out)


class PosvizLayer(nn.Module):
    """Attention then feed-forward, post-LayerNorm (ALBERT's ``AlbertLayer``)."""

    def __init__(self, config: PosvizAlbertConfig) -> None:
        super().__init__()
        self.full_layer_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = PosvizAttention(config)
        self.ffn = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, attention_bias: torch.Tensor | None,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None, is_causal: bool = False) -> torch.Tensor:
        h = self.attention(hidden_states, attention_bias, rotary=rotary, is_causal=is_causal)
        ffn = self.ffn_output(self.activation(self.ffn(h)))
        return self.full_layer_layer_norm(self.dropout(ffn) + h)


class PosvizLayerGroup(nn.Module):
    """``inner_group_num`` layers applied in turn (ALBERT's ``AlbertLayerGroup``)."""

    def __init__(self, config: PosvizAlbertConfig) -> None:
        super().__init__()
        self.albert_layers = nn.ModuleList([PosvizLayer(config) for _ in range(config.inner_group_num)])

    def forward(self, hidden_states: torch.Tensor, attention_bias: torch.Tensor | None,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None, is_causal: bool = False) -> torch.Tensor:
        for layer in self.albert_layers:
            hidden_states = layer(hidden_states, attention_bias, rotary=rotary, is_causal=is_causal)
        return hidden_states


def _future(n: int, device: torch.device) -> torch.Tensor:
    """``(n, n)`` bool, true above the diagonal: the keys ``j > i`` a causal query may not see."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def _causal_mask(n: int, padding: torch.Tensor | None, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive mask ``(1 or B, 1, n, n)``: the dtype's minimum above the diagonal and on padded keys, else 0."""
    low = torch.finfo(dtype).min
    mask = torch.zeros(n, n, dtype=dtype, device=device).masked_fill(_future(n, device), low)[None, None]
    # the minimum of both rather than their sum: two minima would overflow to -inf
    return mask if padding is None else torch.minimum(mask, padding)


def _with_padding(scores: torch.Tensor | None, padding: torch.Tensor | None) -> torch.Tensor | None:
    """Additive SDPA mask: ``(1, H, n, n)`` positional scores plus ``(B, 1, 1, n)`` padding (or the causal mask)."""
    if scores is None:
        return padding
    scores = scores.unsqueeze(0)
    return scores if padding is None else scores + padding


class PosvizTransformer(nn.Module):
    """Embedding→hidden mapping, the (shared) layer groups, the positional-score modules and RoPE."""

    def __init__(self, config: PosvizAlbertConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        self.albert_layer_groups = nn.ModuleList([PosvizLayerGroup(config) for _ in range(config.num_hidden_groups)])
        count = config.num_position_score_modules
        self.position_scores = nn.ModuleList([build_position_scores(config) for _ in range(count)]) if count else None
        self.rotary_emb = RotaryEmbedding(config.rotary_dim, config.rope_theta) if config.position_scheme == "rope" else None

    def group_of_layer(self, layer: int) -> int:
        """Index of the layer group that runs layer ``layer``."""
        return int(layer / (self.config.num_hidden_layers / self.config.num_hidden_groups))

    def forward(self, hidden_states: torch.Tensor, padding: torch.Tensor | None,
                collect: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Run every layer; ``collect``, when given, receives the mapped embeddings and each layer's output (HF's ``hidden_states``)."""
        hidden_states = self.embedding_hidden_mapping_in(hidden_states)  # (B, n, embedding_size) -> (B, n, hidden)
        if collect is not None:
            collect.append(hidden_states)
        n = hidden_states.shape[1]
        mods = self.position_scores
        per_layer = mods is not None and len(mods) > 1
        causal = bool(getattr(self.config, "is_causal", False))
        # Causal without any other mask: SDPA's own causal kernel (is_causal), no (n, n) mask at all.
        fused_causal = causal and padding is None and mods is None
        mask = _causal_mask(n, padding, hidden_states.dtype, hidden_states.device) if causal and not fused_causal else padding
        rotary = self.rotary_emb(n) if self.rotary_emb is not None else None  # once per forward, for every layer
        # A shared positional term (H, n, n) is computed once per forward and reused by every layer.
        bias = _with_padding(mods[0](n) if mods is not None and not per_layer else None, mask)
        for i in range(self.config.num_hidden_layers):
            if per_layer:
                bias = _with_padding(mods[i](n), mask)
            hidden_states = self.albert_layer_groups[self.group_of_layer(i)](hidden_states, bias, rotary=rotary,
                                                                              is_causal=fused_causal)
            if collect is not None:
                collect.append(hidden_states)
        return hidden_states


class PosvizMLMHead(nn.Module):
    """ALBERT's masked-LM head (hidden → embedding size → vocabulary, decoder tied to the word embeddings)."""

    def __init__(self, config: PosvizAlbertConfig) -> None:
        super().__init__()
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size)
        self.decoder.bias = self.bias
        self.activation = ACT2FN[config.hidden_act]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(B, n, hidden)`` -> logits ``(B, n, vocab)``."""
        return self.decoder(self.LayerNorm(self.activation(self.dense(hidden_states))))

    def _tie_weights(self) -> None:
        # transformers 4.x re-ties through this hook after loading (5.x reads _tied_weights_keys); checkpoints
        # store the shared bias as predictions.bias, so the decoder takes that one
        self.decoder.bias = self.bias


class PosvizPreTrainedModel(PreTrainedModel):
    """Weight initialisation and Auto-class plumbing shared by the posviz models."""

    config_class = PosvizAlbertConfig
    base_model_prefix = "albert"
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # Spelled out rather than left to PreTrainedModel._init_weights, which does this on transformers 5
        # (same calls, same order, so the same weights for a seed) and nothing on transformers 4.
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, PosvizMLMHead):
            init.zeros_(module.bias)
        elif isinstance(module, PosvizEmbeddings):
            init.copy_(module.position_ids, torch.arange(module.position_ids.shape[-1])[None])
        elif isinstance(module, TisaScores):
            for name, (mean, std) in module.INIT.items():
                init.normal_(getattr(module, name), mean=mean, std=std)
        elif hasattr(module, "derived_buffers"):  # T5 buckets, ALiBi slopes, TUPE-R bucket ids
            for name, value in module.derived_buffers().items():
                init.copy_(getattr(module, name), value)
        elif is_plugin_module(module) and hasattr(module, "reset_parameters"):  # a scheme of another package
            module.reset_parameters()


class PosvizModel(PosvizPreTrainedModel):
    """The bare encoder: embeddings, mapping, layers; returns the last hidden states."""

    def __init__(self, config: PosvizAlbertConfig, add_pooling_layer: bool = False) -> None:
        super().__init__(config)
        self.embeddings = PosvizEmbeddings(config)
        self.encoder = PosvizTransformer(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        """Encode ``input_ids`` ``(batch, n)``; ``attention_mask`` is 1 for real tokens, 0 for padding.

        ``position_ids`` only affect the absolute and sinusoidal tables; relative
        schemes and RoPE use the token index. A causal config (``is_causal``)
        lets query ``i`` see keys ``j <= i`` only. With ``output_hidden_states``, ``hidden_states`` holds the
        embeddings mapped to the hidden size and the output of every layer (as
        ALBERT's), ``num_hidden_layers + 1`` tensors.
        """
        x = self.embeddings(input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
        padding = None
        if attention_mask is not None and not bool(attention_mask.all()):
            keep = attention_mask[:, None, None, :].to(x.dtype)  # (B, n) -> (B, 1, 1, n)
            padding = (1.0 - keep) * torch.finfo(x.dtype).min
        collect: list[torch.Tensor] | None = [] if output_hidden_states else None
        last = self.encoder(x, padding, collect)
        return BaseModelOutput(last_hidden_state=last, hidden_states=tuple(collect) if collect is not None else None)


class PosvizForMaskedLM(PosvizPreTrainedModel):
    """The encoder with ALBERT's masked-LM head; loss is cross-entropy over labels != -100."""

    accepts_loss_kwargs = True

    _tied_weights_keys = {
        "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
        "predictions.decoder.bias": "predictions.bias",
    }

    def __init__(self, config: PosvizAlbertConfig) -> None:
        super().__init__(config)
        self.albert = PosvizModel(config)
        self.predictions = PosvizMLMHead(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.albert.embeddings.word_embeddings

    def get_output_embeddings(self) -> nn.Linear:
        return self.predictions.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.predictions.decoder = new_embeddings
        self.predictions.bias = new_embeddings.bias

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> MaskedLMOutput:
        """Logits ``(batch, n, vocab)``, and the masked-LM loss when ``labels`` are given.

        ``num_items_in_batch`` (passed by ``Trainer``) makes the loss a sum over
        the masked tokens divided by their count in the whole accumulated batch,
        so gradient accumulation gives the same gradient as one large batch.
        """
        hidden = self.albert(input_ids, attention_mask, token_type_ids, position_ids).last_hidden_state
        logits = self.predictions(hidden)  # (B, n, vocab)
        loss = None if labels is None else self.lm_loss(logits, labels, num_items_in_batch)
        return self.output_class(loss=loss, logits=logits)

    #: What ``forward`` returns; the causal LM (:mod:`posviz.models.causal_lm`) changes it and :meth:`lm_loss` only.
    output_class: type = MaskedLMOutput

    @staticmethod
    def lm_loss(logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None) -> torch.Tensor:
        """The masked-LM loss: :func:`token_loss` over labels ``!= -100``."""
        return token_loss(logits, labels, num_items_in_batch)


def token_loss(logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy of ``logits`` ``(..., vocab)`` against ``labels`` ``(...)`` over labels ``!= -100``.

    ``num_items_in_batch`` (passed by ``Trainer``) makes it a sum divided by that count, so that gradient
    accumulation gives the gradient of one large batch.
    """
    flat, target = logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).to(logits.device)
    if num_items_in_batch is None:
        return F.cross_entropy(flat, target, ignore_index=-100)
    loss = F.cross_entropy(flat, target, ignore_index=-100, reduction="sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch
