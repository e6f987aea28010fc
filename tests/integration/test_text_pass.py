"""One text pass for every text measure: the model loaded once, each batch run once (real MiniLM, real report and explorer).

The counts come from the real loader and the real model: ``load_model`` is wrapped to count its calls and to put
a forward pre-hook on every model it returns; nothing else is replaced.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from posviz.cli.app import app

N, BLOCKS, BATCH = 32, 6, 2


def eager_probe() -> int:
    """Forward calls a Hugging Face model's eager attention path adds per pass: one short probe that finds the modules
    emitting the maps (transformers 4.x, which has no attention interface for the tiles to capture from)."""
    from posviz.observe.tiled.run import can_capture

    return 0 if can_capture() is None else 1


@pytest.fixture
def counted(monkeypatch):
    """``{"loads": k, "forwards": m}``: models posviz's loader read from disk (``from_pretrained`` calls; a model handed
    on within a session of :mod:`posviz.observe.shared_models` is not read again) and forward calls of their base
    module (the bare model, or the base of one loaded with a head), which every run of the model passes once."""
    import posviz.observe.loading as loading

    counts = {"loads": 0, "forwards": 0}
    real = loading._load_weights

    def load_weights(*args, **kwargs):
        weights = real(*args, **kwargs)
        counts["loads"] += 1
        base = weights.module(None)
        base.register_forward_pre_hook(lambda *_: counts.__setitem__("forwards", counts["forwards"] + 1))
        return weights

    monkeypatch.setattr(loading, "_load_weights", load_weights)
    return counts


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    from posviz.train.corpus import DEMO_CORPUS, packaged_corpus

    path = tmp_path_factory.mktemp("text-pass") / "docs.txt"
    path.write_text("\n\n".join(packaged_corpus(DEMO_CORPUS, 40)), encoding="utf-8")
    return path


def _close(got: list[dict], want: list[dict], keys: tuple[str, ...], rtol: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for k in keys:
            np.testing.assert_allclose(g[k], w[k], rtol=rtol, atol=1e-9, err_msg=k)


@pytest.mark.parametrize("exact_maps", [False, True], ids=["tiled", "eager"])
def test_one_pass_feeds_attention_and_hidden_as_they_run_alone(minilm_dir, text, counted, exact_maps):
    """Together: one load and one forward call per batch (plus eager's 16-token probe that finds the maps); each
    result equals the measure run alone (the hidden states to float32 rounding: alone, attention runs without a mask)."""
    import posviz
    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.hidden_pass import HiddenRequest
    from posviz.observe.text_pass import observe_text

    common = dict(corpus=str(text), seq_len=N, max_blocks=BLOCKS, batch_size=BATCH)
    both = observe_text(str(minilm_dir), [AttentionRequest(layers="all", exact_maps=exact_maps), HiddenRequest(probe_blocks=4)],
                        **common)
    batches = -(-BLOCKS // BATCH)
    probe = 1 if exact_maps else eager_probe()
    assert counted == {"loads": 1, "forwards": batches + probe}
    assert both.forward_calls == batches + probe and both.blocks == BLOCKS and both.passes == 1
    alone_a = posviz.attention(str(minilm_dir), layers="all", exact_maps=exact_maps, **common)
    alone_h = posviz.hidden(str(minilm_dir), probe_blocks=4, **common)
    assert counted == {"loads": 3, "forwards": 2 * (batches + probe) + batches}
    a, h = both["attention"], both["hidden"]
    assert a.tiled == (not exact_maps and not eager_probe()) and a.blocks == alone_a.blocks == BLOCKS and a.corpus == alone_a.corpus
    _close(a.records(), alone_a.records(), ("toeplitzness_offdiag", "null_mean_offdiag", "positional_share", "sink_mass"), 1e-5)
    assert h.blocks == alone_h.blocks and h.corpus == alone_h.corpus
    _close(h.records(), alone_h.records(), ("positional_share", "positional_share_null", "toeplitzness_offdiag", "rank90",
                                            "state_norm", "probe_mae"), 1e-5)


def test_a_pass_refuses_a_measure_twice_and_bad_options_before_loading(minilm_dir, counted):
    from posviz.errors import OptionError
    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.text_pass import observe_text

    with pytest.raises(OptionError, match="each measure once"):
        observe_text(str(minilm_dir), [AttentionRequest(), AttentionRequest()])
    with pytest.raises(OptionError, match="--tile 0"):
        observe_text(str(minilm_dir), [AttentionRequest(tile=0)])
    assert counted["loads"] == 0


def test_report_with_one_corpus_loads_each_model_once(minilm_dir, text, counted, tmp_path, monkeypatch):
    """``posviz report MODEL --corpus FILE``: attention and hidden-states sections from one load and one pass,
    and ``--html`` shows the same numbers in the explorer without running the model again."""
    from pypdf import PdfReader

    from tests.checkpoint_factory import isolate_hf_cache

    isolate_hf_cache(monkeypatch, tmp_path / "empty")
    out = tmp_path / "r.pdf"
    res = CliRunner().invoke(app, ["report", str(minilm_dir), "--no-albert", "--corpus", str(text), "--attention-seq-len",
                                   str(N), "--hidden-seq-len", str(N), "--attention-max-blocks", str(BLOCKS),
                                   "--hidden-max-blocks", str(BLOCKS), "--measure", "state-norms", "--html", "-o", str(out)])
    assert res.exit_code == 0, res.output
    sections = res.stderr.split("sections:")[1]
    assert "attention" in sections and "hidden" in sections and "measures" in sections
    assert counted == {"loads": 1, "forwards": -(-BLOCKS // 8) + eager_probe()}  # the default batch of 8: one forward call
    text_ = " ".join(" ".join(p.extract_text() for p in PdfReader(out).pages).split())
    assert f"{BLOCKS} blocks of {N} tokens" in text_ and "Position inside the network" in text_
    assert "Other measures on text" in text_ and "first / median norm" in text_ and "massive activations" in text_
    from tests.integration.test_explore import page_data

    tabs = page_data(out.with_suffix(".html").read_text(encoding="utf-8"))["models"][0]["corpus"]
    assert tabs["attention"]["seq_len"] == N and tabs["attention"]["layers"] == [0]  # the report's layers (--layers 0)
    assert len(tabs["hidden"]["records"]) == 7 and tabs["hidden"]["records"][0]["blocks"] == BLOCKS


def test_report_with_extrapolation_loads_each_model_once(absolute_run, train_corpus, counted, tmp_path):
    """``posviz report RUN --corpus FILE --extrapolate-lengths ...``: the text measures and the extrapolation section
    run one load of the model (with its masked-LM head, whose base runs the text pass), and the section's numbers
    are those of ``posviz.extrapolate`` run alone."""
    from pypdf import PdfReader

    import posviz
    from posviz.report import ReportOptions, build_context
    from posviz.report.sections.running import run_text_passes

    lengths = f"{N // 2},{N}"  # within the run's table of 32 positions
    out = tmp_path / "r.pdf"
    res = CliRunner().invoke(app, ["report", str(absolute_run), "--no-albert", "--corpus", str(train_corpus),
                                   "--attention-seq-len", str(N), "--hidden-seq-len", str(N), "--attention-max-blocks",
                                   str(BLOCKS), "--hidden-max-blocks", str(BLOCKS), "--extrapolate-lengths", lengths,
                                   "--extrapolate-corpus", str(train_corpus), "--extrapolate-max-blocks", "2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    sections = res.stderr.split("sections:")[1]
    assert "attention" in sections and "hidden" in sections and "extrapolate" in sections
    assert counted["loads"] == 1
    assert "Beyond the trained length" in " ".join(p.extract_text() for p in PdfReader(out).pages)
    options = ReportOptions(albert=False, attention_corpus=None, hidden_corpus=None, extrapolate_lengths=lengths,
                            extrapolate_corpus=str(train_corpus), extrapolate_max_blocks=2)
    counted["loads"] = 0
    in_report = run_text_passes(build_context([str(absolute_run)], options))[str(absolute_run)]["extrapolate"]
    alone = posviz.extrapolate(str(absolute_run), corpus=str(train_corpus), lengths=lengths, max_blocks=2)
    assert counted["loads"] == 2 and [r.loss for r in in_report.runs] == [r.loss for r in alone.runs]
    assert all(r.loss is not None for r in alone.runs)  # a trained head: the loss is there
    assert in_report.to_frame().equals(alone.to_frame())


def test_explore_corpus_loads_each_model_once(minilm_dir, text, counted):
    import posviz

    page = posviz.explore(str(minilm_dir), corpus=str(text), heads=False, seq_len=N, max_blocks=BLOCKS,
                          measures=["state-norms"])
    assert counted == {"loads": 1, "forwards": 1 + eager_probe()}
    tabs = page.data["models"][0]["corpus"]
    assert set(tabs["measures"]) == {"state-norms"} and len(tabs["measures"]["state-norms"]["records"]) == 7
    assert tabs["attention"]["seq_len"] == N and len(tabs["hidden"]["records"]) == 7  # embedding output + 6 layers


def test_trajectory_of_attention_and_hidden_runs_each_checkpoint_once(absolute_run, train_corpus, counted, tmp_path):
    """``--measure attention,hidden``: one load and one pass per checkpoint; the rows are those of each measure alone."""
    import json

    import posviz

    common = dict(corpus=str(train_corpus), seq_len=N, max_blocks=BLOCKS, layers="0,1")
    both = posviz.trajectory(str(absolute_run), measure="attention,hidden", **common)
    checkpoints = len({r["step"] for r in both["attention"].rows})
    assert checkpoints >= 2 and counted == {"loads": checkpoints, "forwards": checkpoints}  # 6 blocks: one batch of 8
    alone = {name: posviz.trajectory(str(absolute_run), measure=name, **common).rows for name in ("attention", "hidden")}
    _close(both["attention"].rows, alone["attention"], ("toeplitzness_offdiag", "positional_share", "sink_mass"), 1e-5)
    _close(both["hidden"].rows, alone["hidden"], ("positional_share", "toeplitzness_offdiag", "probe_mae"), 1e-5)
    assert [r["step"] for r in both["hidden"].rows] == [r["step"] for r in alone["hidden"]]

    out = tmp_path / "rows.json"
    res = CliRunner().invoke(app, ["trajectory", str(absolute_run), "--measure", "attention,hidden", "--corpus",
                                   str(train_corpus), "--seq-len", str(N), "--max-blocks", str(BLOCKS), "--layers", "0",
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert not out.exists()
    assert {r["measure"] for r in json.loads((tmp_path / "rows-attention.json").read_text())} == {"attention"}
    assert {r["measure"] for r in json.loads((tmp_path / "rows-hidden.json").read_text())} == {"hidden"}


@pytest.mark.parametrize("measure", ["attention,bands", "hidden,hidden"])
def test_trajectory_refuses_measures_that_cannot_share_a_pass(absolute_run, measure):
    res = CliRunner().invoke(app, ["trajectory", str(absolute_run), "--measure", measure])
    assert res.exit_code == 2
    assert "run together only as text measures on one pass" in res.output and "Traceback" not in res.output


def test_state_norms_equal_the_norms_of_hugging_faces_hidden_states(minilm_dir, counted):
    """The registered measure ``state-norms`` on given token blocks, against the norms computed from the hidden
    states that transformers' own model returns for the same ids."""
    from posviz.measures import SeriesOptions, get_measure
    from posviz.observe.text_pass import observe_text
    from tests.reference import token_blocks_and_hf_hidden_states

    measure = get_measure("state-norms")
    ids, states = token_blocks_and_hf_hidden_states(minilm_dir)
    result = observe_text(str(minilm_dir), [measure.load("request")(SeriesOptions(layers="0,3,6"))], token_blocks=ids,
                          batch_size=2)["state-norms"]
    for row, layer in enumerate((0, 3, 6)):
        h = states[layer].double()
        np.testing.assert_allclose(result.mean_norm[row], h.norm(dim=-1).mean(dim=0).numpy(), rtol=1e-5)
        np.testing.assert_allclose(result.max_abs[row], h.abs().amax(dim=(0, 2)).numpy(), rtol=1e-5)
    values = measure.load("values")(result)
    best = max(result.records(), key=lambda r: r["first_max_ratio"])
    assert values == {"first_norm_ratio": best["first_norm_ratio"], "first_max_ratio": best["first_max_ratio"],
                      "peak_layer": float(best["layer"])}
    assert counted["loads"] == 1 and counted["forwards"] == 3


def test_a_registered_text_measure_joins_the_pass_of_a_series(absolute_run, train_corpus, counted, tmp_path):
    """``--measure attention,state-norms``: still one load and one pass per checkpoint; ``--measure state-norms``
    alone gives a table of its columns."""
    import posviz

    both = posviz.trajectory(str(absolute_run), measure="attention,state-norms", corpus=str(train_corpus), seq_len=N,
                             max_blocks=BLOCKS)
    checkpoints = len(both["state-norms"].rows)
    assert checkpoints >= 2 and counted == {"loads": checkpoints, "forwards": checkpoints}
    assert [r["step"] for r in both["state-norms"].rows] == [r["step"] for r in both["attention"].rows]
    assert all(r["first_norm_ratio"] > 0 for r in both["state-norms"].rows)
    res = CliRunner().invoke(app, ["trajectory", str(absolute_run), "--measure", "state-norms", "--corpus", str(train_corpus),
                                   "--seq-len", str(N), "--max-blocks", str(BLOCKS), "--plot", str(tmp_path / "n.png")])
    assert res.exit_code == 0, res.output
    assert "first / median norm" in res.stdout and "state-norms" in res.stdout and (tmp_path / "n.png").stat().st_size > 0


@pytest.mark.parametrize(("args", "says"), [
    (["--measure", "state-norms"], "--measure state-norms runs on text"),
    (["--measure", "toeplitzness", "--corpus", "x.txt"], "--measure toeplitzness does not run on a text pass"),
    (["--measure", "hidden", "--corpus", "x.txt"], "--measure hidden has its own section"),
])
def test_report_refuses_a_measure_it_cannot_run_in_one_line(minilm_dir, tmp_path, args, says):
    out = tmp_path / "r.pdf"
    res = CliRunner().invoke(app, ["report", str(minilm_dir), "--no-albert", "-o", str(out), *args])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_posviz_measure_runs_attention_as_the_library_does(minilm_dir, text, counted, tmp_path):
    """``posviz measure attention MODEL``, the registry's generic one-model command: one load and one pass, records
    equal to ``posviz.attention`` on every layer (what the measure's request asks for), and its figure."""
    import json

    import matplotlib.image

    import posviz

    out, fig = tmp_path / "a.json", tmp_path / "a.png"
    res = CliRunner().invoke(app, ["measure", "attention", str(minilm_dir), "--corpus", str(text), "--seq-len", str(N),
                                   "--max-blocks", str(BLOCKS), "-o", str(out), "-o", str(fig)])
    assert res.exit_code == 0, res.output
    assert counted["loads"] == 1
    alone = posviz.attention(str(minilm_dir), corpus=str(text), seq_len=N, max_blocks=BLOCKS, layers="all").records()
    _close(json.loads(out.read_text()), alone, ("toeplitzness_offdiag", "positional_share", "sink_mass"), 1e-9)
    assert matplotlib.image.imread(fig).shape[0] > 100


@pytest.mark.parametrize(("args", "says"), [
    (["toeplitzness", "m"], "runs along checkpoints only (posviz trajectory --measure toeplitzness), or with its own "
                            "command: posviz toeplitzness m"),
    (["nope", "m"], "unknown measure 'nope'"),
    (["state-norms", "m", "--seq-len", "1"], "--seq-len"),
    (["state-norms", "m", "--seed", "3"], "--seed does not apply to --measure state-norms"),
])
def test_posviz_measure_refuses_in_one_line(args, says, tmp_path):
    res = CliRunner().invoke(app, ["measure", *args, "-o", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x.json").exists()


def test_a_measure_reading_eager_maps_gets_them_beside_attention(minilm_dir):
    """A request whose ``needs_eager()`` is True (it reads whole attention maps) shares the pass with ``attention``:
    it must see one map per layer, and attention's statistics must be those of the eager maps alone."""
    from dataclasses import dataclass, field
    from typing import Any

    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.hidden_states_measure import HiddenStatesObserver, HiddenStatesRequest
    from posviz.observe.text_pass import observe_text

    class Maps(HiddenStatesObserver):
        def __init__(self) -> None:
            self.seen = 0

        def forward_kwargs(self) -> dict[str, Any]:
            return {**super().forward_kwargs(), "output_attentions": True}

        def after(self, ids: Any, out: Any) -> None:
            self.seen += len(out.attentions or ())

        def finish(self, run: Any) -> int:
            return self.seen

    @dataclass
    class MapsRequest(HiddenStatesRequest):
        layers: Any = "all"
        name: str = field(default="maps", init=False)

        def needs_eager(self) -> bool:
            return True

        def observer(self, run: Any, layers: list[int], batch_size: int) -> Maps:
            return Maps()

    ids = np.random.default_rng(0).integers(1000, 20000, size=(4, 24))
    both = observe_text(str(minilm_dir), [AttentionRequest(layers="all"), MapsRequest()], token_blocks=ids)
    assert both["maps"] == 6  # six layers, one batch
    exact = observe_text(str(minilm_dir), [AttentionRequest(layers="all", exact_maps=True)], token_blocks=ids)
    _close(both["attention"].records(), exact["attention"].records(), ("toeplitzness_offdiag", "sink_mass"), 1e-9)
    refused = _eager_refusal(minilm_dir, both)
    assert refused.startswith("BertModel (") and "eager attention maps of 1000000 positions need about" in refused
    assert "GiB; the pass runs eager attention for maps, which read(s) whole maps (hint:" in refused
    assert "cannot be captured" not in refused


def _eager_refusal(minilm_dir, done) -> str:
    """The one line with which ``attention`` refuses a length whose eager maps cannot fit, when the model runs eager
    for the measures of ``done``'s pass other than attention."""
    from posviz.errors import OptionError
    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.loading import load_model
    from posviz.observe.runner import BlockRun

    others = tuple(name for name in done.results if name != "attention")
    run = BlockRun(load_model(str(minilm_dir), with_tokenizer=False), [], np.zeros((1, 10**6), dtype=np.int64), "", "",
                   (), eager_for=others)
    with pytest.raises(OptionError) as refused:
        AttentionRequest(layers="all").observer(run, list(range(6)), 1)
    return str(refused.value)
