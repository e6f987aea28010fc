"""Atomic output: interrupted or failed writes leave the previous file intact."""

from __future__ import annotations

import errno
import os
import stat

import pytest
from matplotlib.artist import Artist

from posviz.errors import OptionError
from posviz.plots.common import new_figure, save_figure
from posviz.util.atomic import atomic_path, check_output_path


class _InterruptingArtist(Artist):
    """Raises KeyboardInterrupt while the figure is being rendered (mid-write)."""

    def draw(self, renderer):
        raise KeyboardInterrupt


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("ext", ["png", "pdf", "svg"])
def test_interrupt_during_savefig_keeps_old_file(tmp_path, ext):
    target = tmp_path / f"fig.{ext}"
    target.write_bytes(b"previous")
    fig = new_figure(3, 3)
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1])
    fig.add_artist(_InterruptingArtist())
    with pytest.raises(KeyboardInterrupt):
        save_figure(fig, target)
    assert target.read_bytes() == b"previous"
    assert _leftovers(tmp_path) == []


def test_success_replaces_and_uses_normal_permissions(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_text("new")
        assert target.read_text() == "old"  # not visible until the end
    assert target.read_text() == "new"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_disk_full_becomes_one_line_error(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(OptionError, match="No space left on device"):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_check_output_path(tmp_path):
    assert check_output_path(tmp_path / "a.png", (".png",)) == tmp_path / "a.png"
    with pytest.raises(OptionError, match="is a directory"):
        check_output_path(tmp_path, (".png",))
    with pytest.raises(OptionError, match="unknown output extension '.jpg'"):
        check_output_path(tmp_path / "a.jpg", (".png", ".pdf"))
    with pytest.raises(OptionError, match="does not exist"):
        check_output_path(tmp_path / "missing" / "a.png", (".png",))
    taken = tmp_path / "taken"
    taken.write_text("kept")
    for folder in (taken, taken / "sub"):  # a file where a folder should be, or above it
        with pytest.raises(OptionError) as e:
            check_output_path(folder / "a.png", (".png",))
        assert str(e.value).startswith(f"output folder {folder} cannot be created: {taken} is a file")
    assert taken.read_text() == "kept"
