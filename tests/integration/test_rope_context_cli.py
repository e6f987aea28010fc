"""``posviz heads`` on RoPE models: the band energy beyond the trained context (``beyond_context_share``).

Each model is a real tiny checkpoint (``save_pretrained``) whose W_Q/W_K are planted so
that every band's norm is known: the expected shares are computed here from those
norms and the closed-form wavelengths 2π·base^(2b/d_rot), independently of posviz.
LLaMA (rotate-half, GQA), GPT-J (interleaved pairs, partial rotary) and GPT-NeoX
(fused per-head projection, partial rotary); scaled frequencies against transformers'
own ``inv_freq``.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")

TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5
#: LLaMA: band norms of each query head and of each key/value head (query head h uses key head h // 2).
Q_NORMS = np.array([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 1.0], [0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
K_NORMS = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 2.0, 3.0]])
LLAMA = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, vocab_size=64, bos_token_id=0, eos_token_id=0)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def heads_json(folder, *args: str) -> list[dict]:
    r = invoke("heads", str(folder), "--layer", "1", "--positions", "0:32", "-f", "json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def save_planted(model_type: str, folder, config: dict, rows: dict[str, np.ndarray]):
    """A tiny model whose tensors ending in each key of ``rows`` hold ``diag``-like matrices of the given row norms.

    Row r of a planted ``(out, D)`` weight is ``rows[key][r] * e_(r mod D)``: its norm is exactly the given value.
    """
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.for_model(model_type, **config))
    state = model.state_dict()
    with torch.no_grad():
        for name, p in state.items():
            key = next((k for k in rows if name.endswith(k)), None)
            if key is not None:
                norms = torch.as_tensor(rows[key], dtype=p.dtype)
                w = torch.zeros_like(p)
                w[torch.arange(len(norms)), torch.arange(len(norms)) % p.shape[1]] = norms
                p.copy_(w)
            elif name.endswith("norm.weight") or name.endswith("ln_1.weight"):
                p.fill_(1.0)  # unit gains: the effective weights are the planted ones
    model.save_pretrained(folder)
    return model


def half_rows(norms: np.ndarray) -> np.ndarray:
    """Rotate-half rows (heads * 8) with band b = dims b and b + 4 both of norm ``norms[h, b] / √2``."""
    per_head = np.concatenate([norms, norms], axis=1) / np.sqrt(2)
    return per_head.reshape(-1)


def expected_share(energy: np.ndarray, base: float, rotary_dim: int, context: float) -> np.ndarray:
    wavelength = 2 * np.pi * base ** (2 * np.arange(energy.shape[1]) / rotary_dim)
    return (energy * (wavelength > context)).sum(axis=1) / energy.sum(axis=1)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("context") / "llama"
    save_planted("llama", folder, LLAMA, {"q_proj.weight": half_rows(Q_NORMS), "k_proj.weight": half_rows(K_NORMS)})
    return folder


@pytest.mark.parametrize("args,context,source,boundary", [
    ((), 64, "max_position_embeddings", 2),  # wavelengths 2π·(1, 10, 100, 1000): bands 2 and 3 exceed 64
    (("--context", "1000"), 1000, "--context", 3),
    (("--context", "5"), 5, "--context", 0),  # below 2π: every band is beyond
])
def test_llama_json_gives_the_planted_shares(llama, args, context, source, boundary):
    rows = heads_json(llama, *args)
    energy = Q_NORMS * K_NORMS[[0, 0, 1, 1]]
    want = expected_share(energy, 10000.0, 8, context)
    np.testing.assert_allclose([r["beyond_context_share"] for r in rows], want, rtol=1e-6)
    for r in rows:
        assert r["context"] == context and r["context_source"] == source
        assert r["context_boundary_band"] == boundary and r["bands_beyond_context"] == 4 - boundary
        assert r["critical_dimension"] == 2 * boundary  # unscaled frequencies: d_extra / 2 bands turn fully
    if not args:  # the planted values, written out
        np.testing.assert_allclose(want, [0.5, 0.25, 1.0, 5 / 7])


def test_table_csv_and_figure_through_a_subprocess(llama, tmp_path):
    csv_path, fig = tmp_path / "bands.csv", tmp_path / "bands.png"
    run = subprocess.run([sys.executable, "-m", "posviz", "heads", str(llama), "--layer", "0", "--positions", "0:32",
                          "--context", "1000", "-o", str(csv_path), "-o", str(fig)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert fig.read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader(csv_path.open()))
    np.testing.assert_allclose([float(r["beyond_context_share"]) for r in rows],
                               expected_share(Q_NORMS * K_NORMS[[0, 0, 1, 1]], 10000.0, 8, 1000), rtol=1e-6)
    assert {r["context_boundary_band"] for r in rows} == {"3"} and {r["critical_dimension"] for r in rows} == {"6"}
    table = subprocess.run([sys.executable, "-m", "posviz", "heads", str(llama), "--positions", "0:32", "--context", "1000"],
                           capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr
    text = " ".join(table.stdout.split())  # the footnote wraps
    assert "beyond-T" in table.stdout  # the column
    assert "T = 1000 (--context)" in text and "1 of 4 bands beyond it" in text and "(boundary) band 3" in text
    assert "d_extra = 2⌈(d/2)·log_base(T/2π)⌉ = 6 for d = 8, base 10000" in text
    assert " 0.250 " in table.stdout  # head 0: one of its four equal bands is beyond T = 1000


def test_figure_draws_the_labelled_boundary(llama):
    """The band heatmap gets a dashed line between the last band within T and the first beyond, labelled with T."""
    from matplotlib.collections import LineCollection

    from posviz.plots.rope_bands import plot_rope_bands

    rows = heads_json(llama)
    fig = plot_rope_bands(rows, None, title="t", conventions="c")
    ax = fig.subfigs[0].axes[0]
    lines = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(lines) == 1
    (segment,) = lines[0].get_segments()
    np.testing.assert_allclose(segment[:, 0], [1.5, 1.5])  # left of band 2
    np.testing.assert_allclose(sorted(segment[:, 1]), [-0.5, 3.5])  # all four heads
    assert any("T = 64" in t.get_text() for t in ax.texts)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_gptj_interleaved_pairs_and_partial_rotary(tmp_path):
    """GPT-J: band b = dims 2b, 2b + 1 of the first rotary_dim = 4; the pass-through dims 4-7 do not count."""
    q_head, k_head = np.array([2.0, 2.0, 0.0, 1.0, 5.0, 5.0, 5.0, 5.0]), np.array([1.0] * 4 + [5.0] * 4)
    q_other = np.array([0.0, 0.0, 1.0, 1.0, 5.0, 5.0, 5.0, 5.0])
    config = dict(n_embd=32, n_head=4, n_layer=2, rotary_dim=4, n_positions=64, vocab_size=64, bos_token_id=0, eos_token_id=0)
    save_planted("gptj", tmp_path / "gptj", config, {"q_proj.weight": np.concatenate([q_head, q_other, q_head, q_other]),
                                                    "k_proj.weight": np.tile(k_head, 4)})
    rows = heads_json(tmp_path / "gptj")
    band_q = np.sqrt(np.array([[8.0, 1.0], [0.0, 2.0], [8.0, 1.0], [0.0, 2.0]]))  # (2² + 2², 0² + 1²), (0, 1² + 1²)
    energy = band_q * np.sqrt(2.0)
    want = expected_share(energy, 10000.0, 4, 64)  # wavelengths 2π·(1, 100): band 1 is beyond 64
    np.testing.assert_allclose([r["beyond_context_share"] for r in rows], want, rtol=1e-6)
    np.testing.assert_allclose(want, [1 / (1 + np.sqrt(8)), 1.0, 1 / (1 + np.sqrt(8)), 1.0])
    r = rows[0]
    assert (r["rotary_dim"], len(r["band_energy"]), r["context"], r["context_source"]) == (4, 2, 64, "n_positions")
    assert r["context_boundary_band"] == 1 and r["critical_dimension"] == 2


def test_gpt_neox_fused_projection_and_rotary_pct(tmp_path):
    """GPT-NeoX: per head [q | k | v] rows of the fused query_key_value, rotate-half over the first 4 of 8 dims."""
    q_head, k_head = np.array([2.0, 2.0, 0.0, 1.0, 5.0, 5.0, 5.0, 5.0]), np.array([1.0] * 4 + [5.0] * 4)
    fused = np.tile(np.concatenate([q_head, k_head, np.ones(8)]), 4)
    config = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, rotary_pct=0.5,
                  max_position_embeddings=64, vocab_size=64, bos_token_id=0, eos_token_id=0)
    save_planted("gpt_neox", tmp_path / "neox", config, {"query_key_value.weight": fused})
    rows = heads_json(tmp_path / "neox")
    energy = np.tile(np.array([2.0, np.sqrt(5.0)]) * np.sqrt(2.0), (4, 1))  # bands (dims 0, 2) and (1, 3)
    np.testing.assert_allclose([r["beyond_context_share"] for r in rows], expected_share(energy, 10000.0, 4, 64), rtol=1e-6)
    assert rows[0]["beyond_context_share"] == pytest.approx(np.sqrt(5) / (2 + np.sqrt(5)))
    assert rows[0]["rotary_dim"] == 4 and rows[0]["context_boundary_band"] == 1


@pytest.mark.parametrize("scaling,context", [
    ({"rope_type": "linear", "factor": 2.0}, 64),  # wavelengths doubled: band 1 (4π·10 > 64) joins bands 2, 3
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 16}, 16),  # the original length, not the stretched 64
])
def test_scaled_frequencies_are_the_ones_transformers_applies(scaling, context, tmp_path):
    from tests.checkpoint_factory import rotary_inv_freq

    key = "rope_parameters" if TRANSFORMERS_5 else "rope_scaling"
    model = save_planted("llama", tmp_path / "m", {**LLAMA, key: {**scaling, "rope_theta": 10000.0}},
                         {"q_proj.weight": half_rows(Q_NORMS), "k_proj.weight": half_rows(K_NORMS)})
    wavelength = 2 * np.pi / rotary_inv_freq(model.config)  # transformers' own frequencies
    beyond = wavelength > context
    rows = heads_json(tmp_path / "m")
    energy = Q_NORMS * K_NORMS[[0, 0, 1, 1]]
    np.testing.assert_allclose([r["beyond_context_share"] for r in rows], (energy * beyond).sum(1) / energy.sum(1), rtol=1e-6)
    assert rows[0]["context"] == context and rows[0]["context_boundary_band"] == int(np.argmax(beyond))
    assert rows[0]["critical_dimension"] == 2 * int(np.sum(2 * np.pi * 10000.0 ** (np.arange(4) / 4) <= context))
    if scaling["rope_type"] == "linear":
        assert rows[0]["context_boundary_band"] == 1 and rows[0]["critical_dimension"] == 4  # Liu's d_extra: unscaled


def test_unknown_context_asks_for_the_option(llama, tmp_path):
    folder = tmp_path / "no-max"
    shutil.copytree(llama, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["max_position_embeddings"]
    (folder / "config.json").write_text(json.dumps(config))
    rows = heads_json(folder)
    assert all(r["beyond_context_share"] is None and r["context"] is None for r in rows)
    table = invoke("heads", str(folder), "--positions", "0:32")
    assert table.exit_code == 0, table.output
    assert "give --context N" in " ".join(table.stdout.split()) and "—" in table.stdout
    assert heads_json(folder, "--context", "64")[2]["beyond_context_share"] == pytest.approx(1.0)


def test_content_free_probe_states_the_context_without_shares(llama):
    rows = heads_json(llama, "--probe", "none", "--context", "1000")
    assert "beyond_context_share" not in rows[0] and "band_energy" not in rows[0]
    assert (rows[0]["context"], rows[0]["context_boundary_band"], rows[0]["critical_dimension"]) == (1000, 3, 6)


def test_context_on_a_model_without_rope_is_refused(tiny_checkpoints):
    r = invoke("heads", str(tiny_checkpoints("bert")), "--context", "512")
    assert r.exit_code == 2 and r.output.startswith("error: ") and len(r.output.strip().splitlines()) == 1
    assert "--context applies to RoPE models only, not to bert" in r.output


def test_context_from_python_is_checked(llama):
    from posviz.errors import OptionError
    from posviz.extract.registry import open_heads

    for bad in (0, -3, 2.5, True):
        with pytest.raises(OptionError, match="--context"):
            open_heads(str(llama), context=bad)
    assert open_heads(str(llama), context=np.int64(1000)).conventions(0)["context"] == 1000
