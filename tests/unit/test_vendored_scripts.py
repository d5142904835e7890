"""The scripts the web UI loads are the ones VERSIONS.txt pins: each vendored file has the
sha256 written there, and nothing is vendored unpinned (nothing is ever fetched from a CDN,
so these files are all the code the pages run besides dlscope.js)."""

from __future__ import annotations

import hashlib
import re

from services.gateway.ui.rendering import STATIC

VENDOR = STATIC / "vendor"


def pinned() -> dict[str, str]:
    text = VENDOR.joinpath("VERSIONS.txt").read_text(encoding="utf-8")
    return {name: digest for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", text, re.M)}


def test_every_vendored_script_is_the_one_pinned() -> None:
    digests = pinned()
    scripts = {f.name for f in VENDOR.iterdir() if f.name.endswith(".js")}
    assert scripts == set(digests)
    for name, digest in digests.items():
        assert hashlib.sha256(VENDOR.joinpath(name).read_bytes()).hexdigest() == digest, name


def test_the_pages_load_the_expression_interpreter_after_vega() -> None:
    base = STATIC.parent.joinpath("templates", "base.html").read_text(encoding="utf-8")
    order = re.findall(r'<script src="/static/vendor/([^"]+)"', base)
    assert order == ["vega.min.js", "vega-interpreter.js", "vega-lite.min.js", "vega-embed.min.js"]
