"""Reports with their plots inside (flows/analysis/render.py): data URIs for Prefect, one HTML page for MLflow."""

from __future__ import annotations

import base64

from flows.analysis.render import data_uri, embed_images, linked_images, to_html, write_html

PNG = base64.b64decode(  # a 1x1 PNG: enough to check the bytes travel, no plotting needed
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def page(tmp_path):
    (tmp_path / "plot.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path.parent / "outside.png").write_bytes(PNG)
    return tmp_path


def test_relative_links_to_local_images_become_data_uris(tmp_path):
    base = page(tmp_path)
    md = ("![a plot](plot.png)\n![titled](plot.png \"t\")\n![remote](https://example.org/x.png)\n"
          "![missing](gone.png)\n![text](notes.txt)\n![escape](../outside.png)\n")
    out = embed_images(md, base)
    uri = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert f"![a plot]({uri})" in out and f"![titled]({uri} \"t\")" in out
    # what is not a local image inside the report's directory stays exactly as written
    for kept in ("(https://example.org/x.png)", "(gone.png)", "(notes.txt)", "(../outside.png)"):
        assert kept in out
    assert linked_images(md, base) == [(base / "plot.png").resolve()] * 2
    assert data_uri(base / "plot.png") == uri


def test_the_html_page_is_self_contained(tmp_path):
    base = page(tmp_path)
    md = "# Report <script>x</script>\n\n| a | b |\n|---|---:|\n| 1 | 2 |\n\n> **warning**\n\n![a plot](plot.png)\n"
    text = to_html(md, base, "a <title>")
    assert text.startswith("<!DOCTYPE html>") and "<title>a &lt;title&gt;</title>" in text
    assert "<table>" in text and '<td style="text-align:right">2</td>' in text and "<blockquote>" in text
    assert f'<img src="{data_uri(base / "plot.png")}" alt="a plot"' in text
    assert "plot.png" not in text  # no link left that MLflow's sandboxed preview could not follow
    assert "<script>" not in text and "&lt;script&gt;" in text  # raw HTML in the markdown stays text
    path = write_html(md, base, base / "r.html", "t")
    assert path.read_text(encoding="utf-8").count("data:image/png;base64,") == 1
