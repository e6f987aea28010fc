"""Published benchmark numbers bundled with posviz, as pandas DataFrames.

* :func:`albert_results`: the ALBERT v1/v2 results table of the google-research/albert
  README ("v2 vs v1"), with the Hugging Face Hub ids of the eight checkpoints.
* :func:`tisa_glue`: GLUE dev results of ALBERT base v2 with and without TISA, Table 3
  of Wennberg & Henter (ACL 2021, arXiv:2106.01950).

The data files (``*.csv`` beside this module) start with ``#`` lines citing their
source. :data:`METRICS` names the columns ``posviz toeplitzness --plot-vs-glue
--metric`` can plot.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

ALBERT_SOURCE = "google-research/albert README, 'v2 vs v1' table"
TISA_SOURCE = "Wennberg & Henter (ACL 2021), Table 3"


@dataclass(frozen=True)
class Metric:
    """A benchmark column of :func:`albert_results` that can go on a plot's y axis.

    Attributes
    ----------
    name
        Column name (and ``--metric`` value).
    label
        Full description, for titles and table notes.
    axis
        Short axis label.
    """

    name: str
    label: str
    axis: str


#: Metrics of the ALBERT table, in ``--metric`` order (dev-set scores in %).
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("average", "Average of SQuAD1.1, SQuAD2.0, MNLI, SST-2, RACE", "Average score (%)"),
        Metric("mnli", "MNLI accuracy", "MNLI accuracy (%)"),
        Metric("sst2", "SST-2 accuracy", "SST-2 accuracy (%)"),
        Metric("squad1", "SQuAD1.1 (F1 + EM) / 2", "SQuAD1.1 (F1 + EM) / 2 (%)"),
        Metric("squad2", "SQuAD2.0 (F1 + EM) / 2", "SQuAD2.0 (F1 + EM) / 2 (%)"),
        Metric("race", "RACE accuracy", "RACE accuracy (%)"),
    )
}


def _read_csv(name: str) -> pd.DataFrame:
    import pandas as pd

    with resources.files(__name__).joinpath(name).open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh, comment="#")


def albert_results() -> pd.DataFrame:
    """The ALBERT v1/v2 results table, one row per checkpoint (v1 first, then v2).

    Returns
    -------
    pandas.DataFrame
        Columns ``version`` (``v1``/``v2``), ``size`` (``base`` ... ``xxlarge``),
        ``hub_id`` (canonical, e.g. ``albert/albert-base-v2``; posviz downloads
        under this id), ``alias`` (legacy short id, e.g. ``albert-base-v2``; also
        looked up in the local cache), ``layers``, ``hidden``, ``heads``,
        ``average`` (the README's Average), ``squad1_f1``, ``squad1_em``,
        ``squad2_f1``, ``squad2_em``, ``mnli``, ``sst2``, ``race`` (dev-set
        scores in %), and the derived ``squad1`` and ``squad2`` = (F1 + EM) / 2,
        the form in which the Average uses them.

    Examples
    --------
    >>> df = albert_results()
    >>> float(df.set_index("alias").loc["albert-base-v2", "average"])
    82.3
    """
    df = _read_csv("albert_v1_v2.csv")
    # (F1 + EM) / 2 of one-decimal numbers has at most two decimals: round away float noise
    df["squad1"] = ((df["squad1_f1"] + df["squad1_em"]) / 2).round(2)
    df["squad2"] = ((df["squad2_f1"] + df["squad2_em"]) / 2).round(2)
    df.attrs["source"] = ALBERT_SOURCE
    return df


def tisa_glue(*, wide: bool = False) -> pd.DataFrame:
    """GLUE dev results of ALBERT base v2 with and without TISA (median of 5 runs).

    Parameters
    ----------
    wide
        Return the table laid out as in the paper (one row per task, columns
        ``a_baseline``, ``a_s1``, ``a_s3``, ``a_s5``, ``b_baseline`` ... ``b_s5``;
        ``a``: position embeddings kept, ``b``: removed).

    Returns
    -------
    pandas.DataFrame
        By default one row per reported cell: ``task``, ``setting`` (``a``/``b``),
        ``position_embeddings`` (bool), ``kernels`` (TISA kernels per head S; 0 for
        the baseline without TISA), ``score``. Cells the paper leaves empty (CoLA
        without position embeddings) are left out.
    """
    df = _read_csv("tisa_glue.csv")
    df.attrs["source"] = TISA_SOURCE
    if wide:
        return df
    long = df.melt(id_vars="task", var_name="column", value_name="score").dropna(subset=["score"])
    parts = long["column"].str.split("_", expand=True)
    long["setting"] = parts[0]
    long["position_embeddings"] = parts[0] == "a"
    long["kernels"] = parts[1].map(lambda s: 0 if s == "baseline" else int(s.lstrip("s")))
    out = long[["task", "setting", "position_embeddings", "kernels", "score"]].reset_index(drop=True)
    out.attrs["source"] = TISA_SOURCE
    return out
