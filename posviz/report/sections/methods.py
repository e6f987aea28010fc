"""Methods section: the definitions behind every included section, with citations.

Each section contributes its own definitions (``Section.methods``), so the page
states exactly what the report shows; this module adds the references.
"""

from __future__ import annotations

from posviz.report.context import ReportContext
from posviz.report.layout import BODY_SIZE, Block, flow_blocks, new_page
from posviz.report.section import Section

# Cited works, in the order they are listed. Sections cite them by key.
REFERENCES: dict[str, str] = {
    "wennberg2021": (
        "U. Wennberg and G. E. Henter. The Case for Translation-Invariant Self-Attention in Transformer-Based "
        "Language Models. ACL 2021. arXiv:2106.01950."
    ),
    "ke2021": (
        "G. Ke, D. He and T.-Y. Liu. Rethinking Positional Encoding in Language Pre-training. ICLR 2021. "
        "arXiv:2006.15595."
    ),
    "lan2020": (
        "Z. Lan, M. Chen, S. Goodman, K. Gimpel, P. Sharma and R. Soricut. ALBERT: A Lite BERT for Self-supervised "
        "Learning of Language Representations. ICLR 2020. arXiv:1909.11942."
    ),
    "barbero2025": (
        "F. Barbero, A. Vitvitskyi, C. Perivolaropoulos, R. Pascanu and P. Veličković. Round and Round We Go! What "
        "makes Rotary Positional Encodings useful? ICLR 2025. arXiv:2410.06205."
    ),
    "song2023": (
        "J. Song and Y. Zhong. Uncovering hidden geometry in Transformers via disentangling position and context. "
        "arXiv:2310.04861, 2023."
    ),
    "haviv2022": (
        "A. Haviv, O. Ram, O. Press, P. Izsak and O. Levy. Transformer Language Models without Positional Encodings "
        "Still Learn Positional Information. Findings of EMNLP 2022. arXiv:2203.16634."
    ),
    "press2022": (
        "O. Press, N. A. Smith and M. Lewis. Train Short, Test Long: Attention with Linear Biases Enables Input Length "
        "Extrapolation. ICLR 2022. arXiv:2108.12409."
    ),
    "wang2024": (
        "J. Wang, T. Ji, Y. Wu, H. Yan, T. Gui, Q. Zhang, X. Huang and X. Wang. Length Generalization of Causal "
        "Transformers without Position Encoding. ACL 2024. arXiv:2404.12224."
    ),
    "albert-readme": (
        "google-research/albert, README: results table 'v2 vs v1' (github.com/google-research/albert)."
    ),
}


def build(ctx: ReportContext) -> list:
    """Definitions of the included sections, then the references (one or more pages)."""
    included = [s for s in ctx.sections if s.key in ctx.included]
    blocks: list[Block] = []
    cited: set[str] = set()
    for section in included:
        if section.methods is not None:
            blocks += section.methods(ctx)
            cited |= set(section.references)
    if not blocks:
        return []
    blocks.append(Block("References", tuple(text for key, text in REFERENCES.items() if key in cited)))

    def page(index: int):
        return new_page(SECTION.title + (" (continued)" if index else ""), "Definitions used in this report")

    return flow_blocks(blocks, page, fontsize=BODY_SIZE - 0.5)


SECTION = Section("methods", "Methods", build)
