"""The viewer's HTML: Jinja2 templates (autoescaped: model text is never markup) filled from ``Loaded``.

One template set serves both modes. ``static_page`` writes one self-contained file: the list, the plots and
every episode's detail inline (hidden until chosen), with its CSS and a few lines of plain JS inline too, so
it opens from ``file://`` with no network. For a file too large to inline, ``index_page`` leaves the details
out and the page fetches ``episode/<n>`` from the local server (``viewer.serve``) when one is chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import jinja2

from toolgym.viewer import episode_view
from toolgym.viewer.load import Loaded

Decode = Callable[[Sequence[int]], list[str]]


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("toolgym.viewer", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def static_page(loaded: Loaded, decode: Decode | None) -> str:
    """The whole report in one file, every episode's detail inline."""
    details = [episode_view.build(i, e, decode) for i, e in enumerate(loaded.episodes)]
    return _index(loaded, details=details, decoded=decode is not None)


def index_page(loaded: Loaded, decoded: bool) -> str:
    """The list and plots only; details come from ``episode_page`` on demand (the server)."""
    return _index(loaded, details=None, decoded=decoded)


def episode_page(loaded: Loaded, index: int, decode: Decode | None) -> str:
    """One episode's detail (an HTML fragment the index page inserts)."""
    view = episode_view.build(index, loaded.episodes[index], decode)
    return _environment().get_template("episode.html.j2").render(ep=view)


def _index(loaded: Loaded, details: list[episode_view.EpisodeView] | None, decoded: bool) -> str:
    rows = [episode_view.row(i, e) for i, e in enumerate(loaded.episodes)]
    return (
        _environment()
        .get_template("index.html.j2")
        .render(
            title=f"toolgym view: {loaded.path.name}",
            loaded=loaded,
            rows=rows,
            envs=sorted({r["env"] for r in rows}),
            stops=sorted({r["stop"] for r in rows}),
            steps=any(r["step"] is not None for r in rows),
            plots=_plots(loaded, rows),
            details=details,
            decoded=decoded,
            summary=_summary(rows),
        )
    )


def _plots(loaded: Loaded, rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The summary plots; without matplotlib (not a dependency of a bare ``pip install toolgym``) the page
    says how to get them and shows everything else."""
    try:
        from toolgym.viewer.plots import plots

        return [(title, _markup(svg)) for title, svg in plots(rows)]
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        loaded.notes.append("the summary plots need matplotlib: pip install matplotlib")
        return []


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows) or 1
    return {
        "episodes": len(rows),
        "reward": sum(r["reward"] for r in rows) / n,
        "passed": sum(r["passed"] for r in rows),
        "errors": sum(bool(r["errors"]) for r in rows),
        "prefix_errors": sum(r["prefix_error"] for r in rows),
    }


def _markup(svg: str) -> Any:
    """matplotlib's own SVG, trusted: it is drawn here from numbers, never from model text."""
    from markupsafe import Markup

    return Markup(svg)


__all__ = ["episode_page", "index_page", "static_page"]
