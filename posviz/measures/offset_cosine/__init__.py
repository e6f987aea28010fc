"""``offset-cosine``: how alike the hidden states of two positions are, by their distance, layer by layer.

Per layer, the mean cosine similarity of the hidden states at positions ``i`` and ``i + k`` of the same block, for
every offset ``k``, over a corpus: the distance over which a layer's representations of neighbouring tokens stay
alike (content and position together; ``posviz hidden`` separates the positional part). It costs no n × n matrix:
the sums over ``i`` for every ``k`` are one autocorrelation along the positions (an FFT per block), so it runs at any
length the model does.

A measure in its own folder, registered by one line of pyproject.toml (the ``posviz.measures`` entry point
``offset-cosine``): its request joins posviz's one pass over text, so ``posviz measure``, ``trajectory``,
``report --measure`` and ``explore --measure`` run it beside ``attention`` and ``hidden`` on the same forward calls.
"""

from posviz.measures.contract import Measure

MEASURE = Measure(
    "offset-cosine", "Cosine similarity of hidden states k positions apart, by layer and offset (how fast they decorrelate)",
    needs="text", reads=("hidden states",), options=frozenset({"corpus", "seq_len", "max_blocks", "layers"}),
    request="posviz.measures.offset_cosine.observer:request", values="posviz.measures.offset_cosine.views:values",
    plot="posviz.measures.offset_cosine.views:plot",
    columns=(("cos_1", "cosine at offset 1"), ("cos_8", "cosine at offset 8"), ("cos_far", "cosine past n/2")),
)
