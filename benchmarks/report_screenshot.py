"""Does the report read well in a browser? Builds the report of a workspace (or takes an existing index.html),
renders it in headless Chromium at 1280 px wide, saves a full-page PNG and checks that

* the page is shorter than --max-height (default 6000 px, measured as document.documentElement.scrollHeight),
* every section id of report.build.SECTION_IDS is rendered with visible text,
* every image loaded (natural width > 0).

    .venv/bin/python benchmarks/report_screenshot.py pmdb-workspace [--out shot.png] [--max-height 6000]
    .venv/bin/python benchmarks/report_screenshot.py pmdb-workspace/reports/index.html

Needs the Debian package ``chromium`` (exit 2 without it); ``make test`` does not use this script. Exit 1 when a
check fails. The measurement page is a copy of index.html with one added script (the report itself has none) that
writes the sizes into the document title, read back with ``--dump-dom``.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report.build import PAGE, SECTION_IDS  # noqa: E402

WIDTH = 1280
BUDGET_MS = 5000
TIMEOUT_S = 120
MEASURE = """<script>
window.addEventListener('load', function () {
  var sections = {};
  document.querySelectorAll('section[id]').forEach(function (s) {
    sections[s.id] = {height: s.offsetHeight, text: s.innerText.trim().length};
  });
  var images = Array.prototype.map.call(document.images, function (i) {
    return {src: i.getAttribute('src'), width: i.naturalWidth, shown: i.clientHeight};
  });
  document.title = 'MEASURED' + JSON.stringify({height: document.documentElement.scrollHeight,
                                                 sections: sections, images: images});
});
</script>"""


def chromium() -> str | None:
    """The Chromium binary on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(binary: str, profile: Path, args: list[str]) -> str:
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
               f"--user-data-dir={profile}", f"--virtual-time-budget={BUDGET_MS}", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def measure(binary: str, page: Path, profile: Path) -> dict:
    """Page height, per-section height and text length, and image sizes, as the browser laid them out."""
    probe = page.with_name(".measure_" + page.name)
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    try:
        dom = _run(binary, profile, [f"--window-size={WIDTH},1000", "--dump-dom", probe.resolve().as_uri()])
    finally:
        probe.unlink(missing_ok=True)
    found = re.search(r"<title>MEASURED(.*?)</title>", dom, re.S)
    if not found:
        raise RuntimeError("the measuring script did not run (no MEASURED title in the dumped DOM)")
    return json.loads(html.unescape(found.group(1)))


def screenshot(binary: str, page: Path, out: Path, height: int, profile: Path) -> None:
    _run(binary, profile, [f"--window-size={WIDTH},{height}", f"--screenshot={out.resolve()}",
                           page.resolve().as_uri()])


def build(target: Path, platform: str | None) -> Path:
    """index.html of ``target``: the file itself, or the report built into ``<workspace>/reports``."""
    if target.is_file() and target.suffix == ".html":
        return target
    from pmdb.config import Workspace
    from pmdb.store import Store
    from report.build import build_report

    ws = Workspace(target)
    with Store.open(ws.require(), read_only=True) as store:
        return build_report(store, ws.reports_dir, platform).page


def check(measured: dict, max_height: int) -> list[str]:
    """Failures: a page too tall, a section absent or empty, an image not loaded."""
    fails = []
    if measured["height"] >= max_height:
        fails.append(f"page is {measured['height']} px tall (bound {max_height})")
    for key in SECTION_IDS:
        got = measured["sections"].get(key)
        if got is None:
            fails.append(f"section #{key} not rendered")
        elif got["height"] <= 0 or got["text"] == 0:
            fails.append(f"section #{key} is empty")
    fails += [f"image {i['src']} did not load" for i in measured["images"] if i["width"] <= 0]
    return fails


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path, help="A pmdb workspace folder (the report is built into its "
                                                  "reports/) or a report's index.html.")
    parser.add_argument("--out", type=Path, help="Screenshot PNG (default: screenshot.png beside index.html).")
    parser.add_argument("--max-height", type=int, default=6000, help="Page height bound in px at 1280 wide.")
    parser.add_argument("--platform", help="Build the report for this platform only.")
    args = parser.parse_args(argv)
    binary = chromium()
    if binary is None:
        print("chromium not found on PATH (install the Debian package: apt-get install chromium)", file=sys.stderr)
        return 2
    if not args.target.exists():
        print(f"no such workspace or page: {args.target}", file=sys.stderr)
        return 2
    page = build(args.target, args.platform)
    if page.name != PAGE:
        print(f"note: {page.name} is not the report's {PAGE}", file=sys.stderr)
    out = args.out or page.with_name("screenshot.png")
    with tempfile.TemporaryDirectory(prefix="pmdb-chromium-") as profile:
        measured = measure(binary, page, Path(profile))
        screenshot(binary, page, out, min(max(int(measured["height"]), 600), 16000), Path(profile))
    from PIL import Image

    with Image.open(out) as image:
        size = image.size
    print(f"page {page}: {measured['height']} px tall at {WIDTH} px wide; screenshot {out} {size[0]}x{size[1]}")
    for key, got in measured["sections"].items():
        print(f"  #{key:14s} {got['height']:6d} px, {got['text']:6d} characters")
    for image in measured["images"]:
        print(f"  {image['src']:36s} natural width {image['width']}, shown {image['shown']} px tall")
    fails = check(measured, args.max_height)
    for fail in fails:
        print(f"FAIL: {fail}", file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
