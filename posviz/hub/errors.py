"""One-line errors for what the Hub answers: gated, missing repository, revision or file, network failures."""

from __future__ import annotations

from posviz.errors import SourceError

OFFLINE_HINT = "run once online to fill the Hugging Face cache, or pass a local path"


def hub_error(repo_id: str, err: Exception) -> SourceError:
    """The :class:`~posviz.errors.SourceError` for an exception of huggingface_hub (one line, with a hint)."""
    from posviz.util.compat import hub_errors

    errors = hub_errors()  # the module holding them differs between huggingface_hub 0.24 and later

    if isinstance(err, errors.GatedRepoError):
        return SourceError(f"{repo_id} is gated on the Hugging Face Hub", "accept its licence on the Hub and log in with `hf auth login`")
    if isinstance(err, errors.RepositoryNotFoundError):
        return SourceError(f"{repo_id} does not exist on the Hugging Face Hub (or is private)", "check the id, or log in for private models")
    if isinstance(err, errors.RevisionNotFoundError):
        return SourceError(f"{repo_id}: revision not found on the Hub")
    if isinstance(err, errors.EntryNotFoundError):
        return SourceError(f"{repo_id}: file not found on the Hub: {err}")
    return SourceError(f"{repo_id}: download failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", OFFLINE_HINT)
