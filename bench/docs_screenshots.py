"""Look at the built documentation site in a real headless browser (Chromium).

Builds the site (`mkdocs build --strict`), then for the home page and one tutorial:
- takes a screenshot (`OUT/home.png`, `OUT/tutorial.png`) to look at;
- loads the page with a small probe script added and reads back, from the rendered page:
  * no raw Markdown: the rendered text holds no code fence, no `#` heading line, no `|---|` table row;
  * code highlighted: code blocks carry Pygments' token spans, in more than one colour;
  * pictures aligned: in each code block's computed font, box-drawing characters (`─ │ ┌ ┼`), the
    dims' digits and letters all have the same advance width (a picture drawn in a font whose box
    characters fall back to another width comes apart), and that font is a monospace one.
Exits 1 when a check fails, 2 when no Chromium binary is found (install it from the system
packages: `apt-get install chromium`). It is a bench script, not a test: CI images need not carry a
browser.

Usage:
    python bench/docs_screenshots.py [--out DIR] [--page tutorials/meshes-and-shardings/]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome-headless-shell")
PROBE = """
<script>
window.addEventListener("load", () => {
  const out = {};
  const content = document.querySelector(".md-content") || document.body;
  const prose = content.cloneNode(true);
  prose.querySelectorAll("pre, code").forEach(e => e.remove());
  document.body.appendChild(prose);
  const text = prose.innerText;
  prose.remove();
  out.raw_markdown = [];
  if (text.includes("```")) out.raw_markdown.push("a code fence");
  for (const line of text.split("\\n")) {
    if (/^#{1,6} \\S/.test(line)) out.raw_markdown.push("heading line: " + line.slice(0, 60));
    if (/^\\|\\s*-{3,}/.test(line)) out.raw_markdown.push("table row: " + line.slice(0, 60));
  }
  const blocks = [...document.querySelectorAll(".highlight pre code, pre code")];
  out.code_blocks = blocks.length;
  out.highlighted_blocks = blocks.filter(b => b.querySelector("span[class]")).length;
  // Highlighted: the code's tokens come in more than one colour (a prompt, a comment, a string).
  const colors = new Set(blocks.flatMap(b => [b, ...b.querySelectorAll("span[class]")])
    .map(e => getComputedStyle(e).color));
  out.code_colors = [...colors];
  out.pictures = [];
  const canvas = document.createElement("canvas").getContext("2d");
  for (const b of blocks) {
    if (!/[┌─│┼└]/.test(b.textContent)) continue;
    const style = getComputedStyle(b);
    canvas.font = style.fontSize + " " + style.fontFamily;
    const widths = {};
    for (const ch of ["─", "│", "┌", "┼", "0", "a", "[", " "]) {
      widths[ch] = canvas.measureText(ch.repeat(40)).width / 40;
    }
    const values = Object.values(widths);
    out.pictures.push({
      font: style.fontFamily,
      widths: widths,
      aligned: Math.max(...values) - Math.min(...values) < 0.01,
      monospace: /mono|courier|consolas|menlo|monospace/i.test(style.fontFamily),
    });
  }
  const pre = document.createElement("pre");
  pre.id = "shardcli-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def find_browser() -> str | None:
    """The first Chromium-like binary on PATH (or $CHROMIUM)."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def chromium(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once (as root it needs --no-sandbox)."""
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def check_page(browser: str, page: Path, shot: Path) -> list[str]:
    """Screenshot `page` and return what is wrong with how it renders (empty when nothing)."""
    done = chromium(browser, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri())
    if not shot.is_file():
        return [f"no screenshot of {page}: {done.stderr[-500:]}"]
    probed = page.with_name("probe-" + page.name)
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), "utf-8")
    dom = chromium(browser, "--dump-dom", probed.as_uri()).stdout
    found = re.search(r'<pre id="shardcli-probe">(.*?)</pre>', dom, re.DOTALL)
    if not found:
        return [f"the probe did not run on {page}"]
    import html

    result = json.loads(html.unescape(found.group(1)))
    print(f"{shot.stem}: {json.dumps(result, ensure_ascii=False)}")
    problems = [f"raw Markdown: {what}" for what in result["raw_markdown"]]
    if result["code_blocks"] and result["highlighted_blocks"] < result["code_blocks"]:
        problems.append(
            f"{result['code_blocks'] - result['highlighted_blocks']} code block(s) not highlighted"
        )
    if result["code_blocks"] and len(result["code_colors"]) < 2:
        problems.append(f"code is all one colour ({result['code_colors']}): no syntax highlighting")
    for picture in result["pictures"]:
        if not picture["monospace"]:
            problems.append(f"a picture is drawn in {picture['font']}, not a monospace font")
        if not picture["aligned"]:
            problems.append(f"a picture's characters differ in width: {picture['widths']}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "shardcli-docs", help="screenshots go here"
    )
    parser.add_argument("--page", default="tutorials/meshes-and-shardings/", help="the tutorial to look at")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="where no Chromium is found, say so and exit 0 (CI images have none)",
    )
    args = parser.parse_args()

    browser = find_browser()
    if browser is None and args.quick:
        print("no Chromium found: nothing to look at (apt-get install chromium, or set CHROMIUM)")
        return 0
    if browser is None:
        sys.stderr.write("no Chromium found; install it (apt-get install chromium) or set CHROMIUM\n")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shardcli-site-") as tmp:
        site = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
            cwd=ROOT,
            check=True,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        )
        problems = []
        for name, page in (("home", site / "index.html"), ("tutorial", site / args.page / "index.html")):
            problems += [f"{name}: {p}" for p in check_page(browser, page, args.out / f"{name}.png")]
    for line in problems:
        print(f"FAIL {line}")
    print(f"screenshots: {args.out / 'home.png'}, {args.out / 'tutorial.png'}")
    print("PASS: both pages render" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
