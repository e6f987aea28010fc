"""``posviz heads`` on RoPE models: the JSON interface, table, figures, errors and range reads from the Hub.

Band energies are checked against an independent numpy computation straight from
the saved safetensors file (rotate-half pairs, GQA groups, the input RMSNorm's gain).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app

pytestmark = pytest.mark.usefixtures("one_thread")

LLAMA = dict(num_key_value_heads=2, vocab_size=3000)  # GQA; a 3000-row embedding that a token probe must not read


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from tests.checkpoint_factory import build_tiny_checkpoint

    return build_tiny_checkpoint("llama", tmp_path_factory.mktemp("rope") / "llama", **LLAMA)


def expected_band_energy(folder, layer: int) -> np.ndarray:
    """E[h, b] from the file: (W * gamma) rows b and b + 4 of head h, times those of key head h // 2."""
    from safetensors.numpy import load_file

    sd = load_file(str(folder / "model.safetensors"))
    gamma = sd[f"layers.{layer}.input_layernorm.weight"].astype(np.float64)
    wq = (sd[f"layers.{layer}.self_attn.q_proj.weight"] * gamma).reshape(4, 8, -1)
    wk = (sd[f"layers.{layer}.self_attn.k_proj.weight"] * gamma).reshape(2, 8, -1)
    energy = np.zeros((4, 4))
    for h in range(4):
        for b in range(4):
            nq = np.sqrt(np.sum(wq[h, [b, b + 4]] ** 2))
            nk = np.sqrt(np.sum(wk[h // 2, [b, b + 4]] ** 2))
            energy[h, b] = nq * nk
    return energy


def test_json_gives_band_energy_and_wavelengths_per_head(llama):
    r = invoke("heads", str(llama), "--layer", "1", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [x["head"] for x in rows] == [0, 1, 2, 3] and {x["layer"] for x in rows} == {1}
    energy = np.array([x["band_energy"] for x in rows])
    np.testing.assert_allclose(energy, expected_band_energy(llama, 1), rtol=1e-6)
    for x in rows:
        assert len(x["band_wavelength"]) == len(x["band_energy"]) == 4
        np.testing.assert_allclose(x["band_wavelength"], 2 * np.pi * 10000.0 ** (np.arange(4) / 4), rtol=1e-12)
        assert x["dominant_band"] == int(np.argmax(x["band_energy"]))
        share = np.array(x["band_energy"]) / np.sum(x["band_energy"])
        assert x["high_share"] == pytest.approx(share[:2].sum()) and x["low_share"] == pytest.approx(share[2:].sum())
        assert x["probe"] == "mean" and -511 <= x["peak_offset"] <= 0 and 0 < x["weight_prev"] < 1
        assert x["locality"] >= 1 and x["toeplitzness"] == 1.0
    assert len({x["peak_offset"] for x in rows} | {x["logit_prev"] for x in rows}) > 2  # heads differ


def test_table_figure_and_csv_through_a_subprocess(llama, tmp_path):
    fig, csv = tmp_path / "bands.png", tmp_path / "bands.csv"
    run = subprocess.run([sys.executable, "-m", "posviz", "heads", str(llama), "--layers", "0-1", "--probe", "token:7",
                          "-o", str(fig), "-o", str(csv)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert fig.stat().st_size > 10_000 and fig.read_bytes()[:4] == b"\x89PNG"
    import csv as csv_module

    rows = list(csv_module.DictReader(csv.open()))
    assert {"band_energy", "band_wavelength", "dominant_band", "high_share", "probe", "weight_prev"} <= set(rows[0])
    assert [(r["layer"], r["probe"]) for r in rows] == [(str(L), "token:7") for L in (0, 1) for _ in range(4)]
    assert all(len(r["band_energy"].split(":")) == 4 for r in rows)
    table = invoke("heads", str(llama), "--probe", "token:7", "--positions", "0:64")
    assert table.exit_code == 0, table.output
    assert "dominant band" in table.stdout and "probe token:7" in table.stdout and "E[h, b]" in table.stdout


def test_content_free_probe_keeps_the_weight_free_kernel(llama):
    r = invoke("heads", str(llama), "--probe", "content-free", "--positions", "0:16", "-f", "json", "--profiles")
    rows = json.loads(r.stdout)
    assert r.exit_code == 0 and "band_energy" not in rows[0] and rows[0]["probe"] == "content-free"
    assert rows[0]["profile"] == rows[3]["profile"]


@pytest.mark.parametrize(("args", "message"), [
    (["--probe", "bogus"], "--probe 'bogus' is not"),
    (["--probe", "token:5000"], "outside the vocabulary"),
    (["--probe", "corpus:missing.txt"], "no such file"),
])
def test_bad_probes_are_one_line_errors(llama, args, message):
    r = invoke("heads", str(llama), *args)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
    assert r.output.startswith("error: ")


def test_probe_on_a_model_without_rope_is_refused(tiny_checkpoints):
    r = invoke("heads", str(tiny_checkpoints("bert")), "--probe", "mean")
    assert r.exit_code == 2 and "--probe applies to RoPE models only" in r.output


def test_hub_reads_only_the_layers_qk_norms_and_probe_row(fake_hub, llama):
    """From the Hub: byte ranges of layer 1's q/k/input norm and one embedding row, plus the header."""
    fake_hub.add("org/rope", llama)
    r = invoke("heads", "org/rope", "--layer", "1", "--probe", "token:7", "-f", "json")
    assert r.exit_code == 0, r.output
    local = json.loads(invoke("heads", str(llama), "--layer", "1", "--probe", "token:7", "-f", "json").stdout)
    np.testing.assert_allclose([x["band_energy"] for x in json.loads(r.stdout)], [x["band_energy"] for x in local])
    path = llama / "model.safetensors"
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header, start = json.loads(raw[8 : 8 + size]), 8 + size
    hit = {name for name, e in header.items() if name != "__metadata__"
           for a, b in fake_hub.ranges("org/rope", "model.safetensors")
           if a < start + e["data_offsets"][1] and b > start + e["data_offsets"][0]}
    assert hit == {"layers.1.self_attn.q_proj.weight", "layers.1.self_attn.k_proj.weight",
                   "layers.1.input_layernorm.weight", "embed_tokens.weight"}, hit
    needed = sum(4 * int(np.prod(header[n]["shape"])) for n in hit - {"embed_tokens.weight"}) + 4 * 32
    assert fake_hub.file_bytes("org/rope", "model.safetensors") <= needed + start + 64 * 1024


def test_report_has_a_bands_page_naming_the_probe(llama, tmp_path):
    from pypdf import PdfReader

    out = tmp_path / "rope.pdf"
    r = invoke("report", str(llama), "--positions", "0:64", "-o", str(out))
    assert r.exit_code == 0, r.output
    pages = [p.extract_text() for p in PdfReader(out).pages]
    bands = [t for t in pages if "RoPE bands" in t]
    assert len(bands) == 1 and "probe mean" in bands[0] and "wavelength" in bands[0]


def test_hub_reads_through_a_cdn_redirect(fake_hub, llama):
    """Weight files answered with a 302 to another host, as the Hub serves LFS files: same numbers, same ranges."""
    fake_hub.add("org/rope-cdn", llama)
    fake_hub.cdn = True
    r = invoke("heads", "org/rope-cdn", "--layer", "1", "--probe", "token:7", "-f", "json")
    assert r.exit_code == 0, r.output
    assert any(q.status == 302 for q in fake_hub.requests) and any(q.path.startswith("/cdn/") for q in fake_hub.requests)
    local = json.loads(invoke("heads", str(llama), "--layer", "1", "--probe", "token:7", "-f", "json").stdout)
    assert [x["band_energy"] for x in json.loads(r.stdout)] == [x["band_energy"] for x in local]
    assert fake_hub.file_bytes("org/rope-cdn", "model.safetensors") < (llama / "model.safetensors").stat().st_size / 4
