"""Build real, tiny Hugging Face checkpoints and a fake HF cache for tests.

Checkpoints are random-weight models of the real architectures, written with
``save_pretrained``; the fake cache has the exact folder layout huggingface_hub
uses (``models--org--name/{refs,snapshots,blobs}``), so hub ids resolve offline.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Small but real configs for every family in posviz.read.families (plus a few without
# learned positions). Sizes: hidden 16-32, 2 layers, 2-4 heads, 40-ish positions.
TINY_CONFIGS: dict[str, dict[str, Any]] = {
    "bert": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=40, vocab_size=64),
    "roberta": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=42, vocab_size=64, pad_token_id=1),
    "xlm-roberta": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=42, vocab_size=64, pad_token_id=1),
    "longformer": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=42, vocab_size=64, pad_token_id=1, attention_window=4),
    "albert": dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=40, vocab_size=64),
    "distilbert": dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=40, vocab_size=64),
    "electra": dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=40, vocab_size=64),
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, n_positions=40, vocab_size=64, bos_token_id=0, eos_token_id=0),
    "gpt_neo": dict(hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], max_position_embeddings=40, vocab_size=64, bos_token_id=0, eos_token_id=0),
    "opt": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=40, vocab_size=64, pad_token_id=1, bos_token_id=0, eos_token_id=0),
    "bart": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=40, vocab_size=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2),
    "t5": dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=64, relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0),
    "llama": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64, vocab_size=64, bos_token_id=0, eos_token_id=0),
    "bloom": dict(hidden_size=32, n_layer=2, n_head=4, vocab_size=64, bos_token_id=0, eos_token_id=0),
}


def build_tiny_checkpoint(
    model_type: str,
    folder: str | Path,
    *,
    seed: int = 0,
    dtype: str = "float32",
    safe_serialization: bool = True,
    legacy_bin: bool = False,
    max_shard_size: str | None = None,
    plant: dict[str, Any] | None = None,
    **overrides: Any,
) -> Path:
    """Save a random tiny model of ``model_type`` to ``folder`` and return it.

    Parameters
    ----------
    model_type
        A key of :data:`TINY_CONFIGS`.
    dtype
        ``float32``, ``float16`` or ``bfloat16``.
    safe_serialization
        False writes ``pytorch_model.bin`` instead of ``model.safetensors``.
    legacy_bin
        With ``safe_serialization=False``: the pre-1.6 torch format (no zip, no mmap).
    max_shard_size
        e.g. ``"20KB"`` to produce a sharded checkpoint with an index.
    plant
        ``{tensor_suffix: array}``: overwrite parameters (matched by suffix) before saving.
    overrides
        Config overrides.
    """
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, **{**TINY_CONFIGS[model_type], **overrides})
    model = AutoModel.from_config(cfg)
    if plant:
        sd = model.state_dict()
        with torch.no_grad():
            for suffix, value in plant.items():
                names = [n for n in sd if n == suffix or n.endswith("." + suffix)]
                assert names, f"no parameter ends with {suffix}"
                for n in names:
                    sd[n].copy_(torch.as_tensor(np.asarray(value), dtype=sd[n].dtype))
    model = model.to(getattr(torch, dtype))
    folder = Path(folder)
    kwargs: dict[str, Any] = {}
    if max_shard_size:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(folder, **kwargs)
    if not safe_serialization:
        # transformers 5 writes only safetensors; write the classic pytorch_model.bin
        # (a zip-format torch.save of the state dict) as older checkpoints have it.
        from safetensors.torch import load_file

        sd = load_file(folder / "model.safetensors")
        (folder / "model.safetensors").unlink()
        torch.save(sd, folder / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy_bin)
    return folder


def populate_hf_cache(cache_dir: str | Path, repo_id: str, model_folder: str | Path, *, commit: str | None = None,
                      revision: str = "main") -> str:
    """Copy a model folder into a Hugging Face hub cache as if downloaded.

    Files are stored as blobs and linked from ``snapshots/<commit>/`` exactly as
    huggingface_hub does; ``refs/<revision>`` (``refs/main`` by default) names the
    commit. Returns the commit hash.
    """
    cache_dir = Path(cache_dir)
    model_folder = Path(model_folder)
    files = sorted(p for p in model_folder.rglob("*") if p.is_file())
    if commit is None:
        h = hashlib.sha1(repo_id.encode())
        for p in files:
            h.update(p.read_bytes())
        commit = h.hexdigest()
    repo = cache_dir / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for p in files:
        data = p.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            shutil.copyfile(p, blob)
        link = snap / p.relative_to(model_folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(Path("../../blobs") / blob.name if link.parent == snap else blob)
    ref = repo / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)  # a branch name may hold "/"
    ref.write_text(commit)
    return commit


def read_config(folder: str | Path) -> dict[str, Any]:
    """The config.json of a saved checkpoint."""
    return json.loads((Path(folder) / "config.json").read_text())


def isolate_hf_cache(mp, root: str | Path) -> None:
    """Point Hugging Face at an empty cache under ``root`` and go offline (``mp``: a pytest MonkeyPatch).

    For tests whose output would change if the developer's own HF cache held
    checkpoints they look up (e.g. the ALBERT v1/v2 section of a report).
    """
    home = Path(root) / "hf-home"
    (home / "hub").mkdir(parents=True, exist_ok=True)
    mp.setenv("HF_HOME", str(home))
    mp.setenv("HF_HUB_CACHE", str(home / "hub"))
    mp.setenv("HF_HUB_OFFLINE", "1")


def attention_scaling(attention: Any) -> float:
    """The factor an HF attention module multiplies ``Q K^T`` by: its own ``scaling`` attribute (transformers 5).

    transformers 4.x modules divide by ``sqrt(head width)`` inline instead; their head width is read from the module.
    """
    if hasattr(attention, "scaling"):
        return attention.scaling
    head = getattr(attention, "attention_head_size", None) or getattr(attention, "head_dim", None)
    return (head or attention.dim // attention.n_heads) ** -0.5  # DistilBERT: dim, n_heads


def rotary_inv_freq(config: Any) -> Any:
    """The ``inv_freq`` buffer of the first rotary embedding of a model built from ``config`` (float64 numpy).

    Read from the whole model because the rotary module's constructor changed between transformers 4 and 5.
    """
    from transformers import AutoModel

    model = AutoModel.from_config(config)
    return next(m.inv_freq for m in model.modules() if hasattr(m, "inv_freq")).double().numpy()


def save_tiny_model(model_type: str, folder: Path, edit: Callable[[dict[str, Any]], None] | None = None, seed: int = 0,
                    tokenizer: Any = None, lm_head: bool = False, **overrides: Any) -> Path:
    """Save a random tiny ``model_type`` (:data:`TINY_CONFIGS`) in ``folder``, and ``tokenizer`` beside it.

    ``edit(state_dict)`` changes weights before saving; ``lm_head`` saves the model with its
    language-model head (masked for BERT, causal otherwise) and the tokenizer's vocabulary.
    """
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    torch.manual_seed(seed)
    if lm_head:
        overrides = {"vocab_size": len(tokenizer), **overrides}
    cfg = AutoConfig.for_model(model_type, **{**TINY_CONFIGS[model_type], **overrides})
    auto = (AutoModelForMaskedLM if model_type == "bert" else AutoModelForCausalLM) if lm_head else AutoModel
    model = auto.from_config(cfg)
    if edit is not None:
        with torch.no_grad():
            edit(model.state_dict())
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder
