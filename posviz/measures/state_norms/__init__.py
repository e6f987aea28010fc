"""``state-norms``: how large the hidden states are at each position, layer by layer ("massive activations").

Sun et al. (2024, "Massive Activations in Large Language Models") found a few activations, up to thousands of times
the median, at the first token (and at delimiters) of most LLMs: they act as fixed biases and go with the attention
sinks at the first position. This measure follows that in position: per layer, the mean norm of the hidden state at
each position, and the largest absolute activation there, over a corpus; its numbers are the first position's
norm and largest activation over the median of the others.

It is a measure in its own folder, registered by one line of pyproject.toml (the ``posviz.measures`` entry point
``state-norms``): a request that joins posviz's one pass over text (:mod:`posviz.observe.text_pass`), its result,
and its views. ``posviz trajectory RUN --measure state-norms`` follows it along training (with
``attention,hidden,state-norms``, on the same pass), ``posviz report --corpus FILE --measure state-norms`` gives
it a page, and ``posviz measures`` lists it.
"""

from posviz.measures.contract import Measure

MEASURE = Measure(
    "state-norms", "Hidden-state norm and largest activation at each position (massive activations, Sun et al. 2024)",
    needs="text", reads=("hidden states",), options=frozenset({"corpus", "seq_len", "max_blocks", "layers"}),
    request="posviz.measures.state_norms.observer:request", values="posviz.measures.state_norms.views:values",
    plot="posviz.measures.state_norms.views:plot",
    columns=(("first_norm_ratio", "first / median norm"), ("first_max_ratio", "first / median max"),
             ("peak_layer", "layer")),
)
