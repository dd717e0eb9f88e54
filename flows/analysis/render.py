"""What the run's report and the seed comparison both render with: table cells, figures, and the page.

Two readers write markdown with plots: the run's report (`flows/analysis/report.py`, one run from its
directory) and the seed comparison (`flows/analysis/comparison.py`, several runs from MLflow). What they
share lives here, so the two read alike:

- table cells: `fmt` (a value, `—` when missing), `change` (after − before with its sign) and `interval`
  (`estimate [low, high]`, and how many seeds had the number when not all did);
- the policy note: `policy_note(model.source)`, the one wording of what a policy built here is (the
  tiny random model, the synthetic SFT policy), which the report, the comparison, the dry-run plan
  and the console (`ExperimentConfig.policy_note`) all print;
- figures: `pyplot()` (matplotlib without a display), `SIDES` (where and in which colour the before and
  after bars of a pair go) and `save`;
- the page. Both write their markdown with relative image links, right for a reader on disk or a
  repository viewer. Two viewers cannot follow those links:
  - a Prefect markdown artifact is a string stored in Prefect's database, with no directory beside it,
    so `embed_images` (and `artifact_markdown`, for a rendered report or comparison) rewrites each link
    to a local PNG into a `data:image/png;base64,...` URI. The Prefect UI renders such images;
    flint-crew/flint#38 reports Prefect's developers calling this the expected way to show images in
    an artifact;
  - MLflow's artifact view previews `.html` in a sandboxed iframe that cannot load sibling artifacts
    (mlflow/mlflow#5410), so `write_html` writes one self-contained page: the markdown rendered by
    markdown-it-py (CommonMark plus tables; installed with rich, which Prefect needs) with the images
    embedded the same way and a small inline stylesheet.

Covered by the page: `![alt](name.png)` links (png, jpeg, gif, svg, webp) to files that exist in the
report's directory. Not covered: remote or absolute images (left as they are), image size limits (the
plots are tens of kilobytes; nothing here shrinks them), scripts (the page has none, and MLflow's
sandbox would block them). Not here at all: which tables and plots a report holds (report.py,
comparison.py decide), and publishing (Prefect artifacts: flows/artifacts.py; MLflow: the stages).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from flows.analysis.statistics import Interval

# -- table cells -----------------------------------------------------------------------------------


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: — for a missing value, yes/no for a boolean, `digits` decimals for a float."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def change(before: float | int | None, after: float | int | None, digits: int = 3) -> str:
    """after - before with its sign (`+2`, `-0.300`, `0`); — when either side is missing."""
    if before is None or after is None:
        return "—"
    d = after - before
    if d == 0:
        return "0"
    return f"{d:+d}" if isinstance(d, int) else f"{d:+.{digits}f}"


def interval(d: Mapping[str, Any], seeds: int | None = None, digits: int = 2) -> str:
    """`estimate [low, high]` of an `Interval.to_dict()`, plus `(k of N seeds)` when only k of the N runs have it."""
    iv = Interval(**d)
    text = iv.format(digits)
    if seeds is not None and 0 < iv.n < seeds:
        text += f" ({iv.n} of {seeds} seeds)"
    return text


# -- the policy note -------------------------------------------------------------------------------

# What a policy built here is, by `model.source` (a hub model gets no note). Its only wording: the report,
# the comparison, the plan and the console (ExperimentConfig.policy_note) print it from here, so they
# cannot drift apart.
POLICY_NOTES = {
    "tiny": "a tiny random model: it writes no working kernels, so its numbers are zero",
    "sft": ("a small model pre-trained here on a synthetic corpus (docs/learnability.md): it writes real kernels, "
            "some wrong on purpose; its numbers show whether the loop learns, nothing about a real model"),
}


def policy_note(source: str) -> str | None:
    """The note on a policy built here, from its `model.source`; None for a real model."""
    return POLICY_NOTES.get(source)


# -- figures ---------------------------------------------------------------------------------------

# A before/after pair of bars: (side, x offset from the slot's centre, colour); each bar is BAR_WIDTH wide.
SIDES = (("before", -0.2, "#9aa5b1"), ("after", 0.2, "#2f6fb0"))
BAR_WIDTH = 0.4


def pyplot():
    """matplotlib's pyplot on the Agg backend: files only, no display on a server or in CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path, dpi: int) -> None:
    """Write the figure to `path` and free it (pyplot keeps every open figure alive otherwise)."""
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


# -- the page --------------------------------------------------------------------------------------

MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
        ".svg": "image/svg+xml", ".webp": "image/webp"}
# `![alt](target)` or `![alt](target "title")`, target without spaces: what our reports write.
IMAGE_LINK = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 72em;
       padding: 0 1em; color: #1f2328; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.6em; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
blockquote { margin: 0.8em 0; padding: 0.4em 1em; border-left: 4px solid #d29922; background: #fff8e6; }
img { max-width: 100%; height: auto; display: block; margin: 0.5em 0 1em; }
code { background: #f6f8fa; padding: 0.1em 0.3em; border-radius: 4px; }
"""


def data_uri(path: Path) -> str:
    """The file as a base64 `data:` URI (its MIME type from the suffix)."""
    mime = MIME[path.suffix.lower()]
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _local_image(target: str, base: Path) -> Path | None:
    """The image file a relative link names inside `base`, or None (remote, absolute, missing, not an image)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith(("/", "#")):
        return None  # a URL (http:, data:, ...) or an absolute path: not ours to inline
    path = (base / target).resolve()
    if path.suffix.lower() not in MIME or not path.is_file() or not path.is_relative_to(base.resolve()):
        return None
    return path


def embed_images(markdown: str, base: Path) -> str:
    """`markdown` with every relative image link to a file under `base` replaced by its data URI."""

    def inline(m: re.Match) -> str:
        path = _local_image(m["target"], base)
        if path is None:
            return m[0]
        return f"![{m['alt']}]({data_uri(path)}{m['title'] or ''})"

    return IMAGE_LINK.sub(inline, markdown)


def linked_images(markdown: str, base: Path) -> list[Path]:
    """The local image files the markdown links to (what `embed_images` inlines)."""
    found = (_local_image(m["target"], base) for m in IMAGE_LINK.finditer(markdown))
    return [p for p in found if p is not None]


class Rendered(Protocol):
    """A rendered report or comparison: its markdown and the file it was written to (plots beside it)."""

    path: Path
    markdown: str


def artifact_markdown(rendered: Rendered) -> str:
    """The markdown with its plots inlined as data URIs: a Prefect artifact has no directory beside it."""
    return embed_images(rendered.markdown, rendered.path.parent)


def to_html(markdown: str, base: Path, title: str) -> str:
    """One self-contained HTML page: the markdown rendered, its local images inlined, an inline stylesheet."""
    from markdown_it import MarkdownIt

    # CommonMark with GFM tables and strikethrough; raw HTML in the markdown stays text (html=False),
    # so a task id or feedback with `<` in it cannot inject markup into the page.
    renderer = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    body = renderer.render(embed_images(markdown, base))
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")


def write_html(markdown: str, base: Path, path: Path, title: str) -> Path:
    """Write `to_html(markdown, base, title)` to `path` and return it."""
    path.write_text(to_html(markdown, base, title), encoding="utf-8")
    return path
