"""Look at the PR comment as a reviewer does: rendered by GitHub's renderer, then screenshotted at a comment's width.

    python scripts/render_comment.py REPORT OUT.png [--width 900]

REPORT is a ``report.md`` (the comment ``hfexport check --report-dir`` writes) or a ``report.json`` (its comment is
rendered here). The markdown goes through cmark-gfm (``pip install cmarkgfm``) with GitHub's extensions (tables,
autolinks, strikethrough, tag filter), into a page styled like a GitHub comment, which headless Chromium (Debian's
``chromium``) screenshots at about a PR comment's width; the page is kept beside the PNG (``OUT.html``).
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import cmarkgfm
from cmarkgfm.cmark import Options

# GitHub's own stylesheet is not public API: enough of its look (fonts, tables, code, details) to judge layout.
STYLE = """
body { font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; color: #1f2328;
       margin: 0; padding: 16px; width: WIDTHpx; box-sizing: border-box; background: #fff; }
table { border-collapse: collapse; display: block; width: max-content; max-width: 100%; overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 6px 13px; }
tr:nth-child(2n) { background: #f6f8fa; }
code, pre { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #eff1f3; border-radius: 6px; }
code { padding: .2em .4em; }
pre { padding: 16px; overflow: auto; }
pre code { padding: 0; background: none; }
details { margin: 8px 0; }
summary { cursor: pointer; font-weight: 600; }
a { color: #0969da; text-decoration: none; }
"""


def to_html(markdown: str) -> str:
    """The comment's HTML as GitHub's renderer makes it (raw HTML such as ``<details>`` passes through, as GitHub's
    sanitizer lets it; the tag filter extension still disarms ``<script>``, ``<iframe>`` and the like)."""
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def comment_of(report: Path, repository: str) -> str:
    """The comment's markdown: the file itself, or the comment rendered from a ``report.json`` (its lines linked in
    ``repository`` on github.com)."""
    if report.suffix != ".json":
        return report.read_text(encoding="utf-8")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from hfexport.gate.escaping import repository_url
    from hfexport.gate.markdown import render_markdown
    from hfexport.gate.schema import load_report

    return render_markdown(load_report(report), repository=repository_url("https://github.com", repository))


def page(markdown: str, width: int) -> str:
    # Every <details> opened: the screenshot shows what a reviewer can expand.
    body = re.sub(r"<details(?![^>]*\bopen\b)", "<details open", to_html(markdown))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape('hfexport comment')}</title>"
        f"<style>{STYLE.replace('WIDTH', str(width))}</style></head><body>{body}"
        "<script>document.body.dataset.height = document.documentElement.scrollHeight</script></body></html>"
    )


def screenshot(page_path: Path, png: Path, width: int) -> None:
    """Headless Chromium, twice: once to measure the page's height, once to shoot the whole page at that height."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium")
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ]
    with tempfile.TemporaryDirectory(prefix="render-comment-") as profile:
        flags.append(f"--user-data-dir={profile}")
        dom = subprocess.run([*flags, "--dump-dom", page_path.as_uri()], capture_output=True, text=True, timeout=120)
        found = re.search(r'data-height="(\d+)"', dom.stdout)
        height = min(int(found.group(1)) if found else 2000, 16000)
        size = f"--window-size={width},{height}"
        subprocess.run([*flags, size, f"--screenshot={png}", page_path.as_uri()], capture_output=True, timeout=120)
    if not png.is_file():
        raise SystemExit(f"chromium wrote no screenshot: {dom.stderr[-500:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="report.md, or a report.json whose comment is rendered")
    parser.add_argument("png", type=Path, help="where the screenshot goes (the page goes beside it, .html)")
    parser.add_argument("--width", type=int, default=900, help="pixels; a PR comment is about 900 wide")
    parser.add_argument("--repository", default="huggingface/transformers", help="OWNER/NAME a report.json links to")
    args = parser.parse_args()
    page_path = args.png.with_suffix(".html").resolve()
    page_path.write_text(page(comment_of(args.report, args.repository), args.width), encoding="utf-8")
    screenshot(page_path, args.png.resolve(), args.width)
    print(f"{args.png} ({args.width} px wide), page {page_path}")


if __name__ == "__main__":
    main()
