"""Transport from the Hugging Face Hub: byte ranges of remote weight files (safetensors, torch zip), their local
store, one-request config downloads, and one-line errors for what the Hub answers. No model knowledge lives here
(that is :mod:`posviz.read`); see ARCHITECTURE.md."""
