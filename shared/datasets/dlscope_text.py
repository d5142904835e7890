"""dlscope's own text data set: ``dlscope:sentences``, a file shipped inside this package."""

from __future__ import annotations

from importlib import resources

from shared.datasets.provider import BuiltinData

__all__ = ["DlscopeText"]


def read_samples(text: str) -> list[str]:
    """One sample per line; lines starting with ``#`` (the licence) and empty lines are not."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


class DlscopeText:
    """``sentences``: 48 English sentences written for dlscope (Apache-2.0, as dlscope), for
    sentence encoders and short prompts; unlabelled. The file's own header says how it was
    made. Pinned by dlscope's version: change the file, and the manifest's version changes."""

    names: tuple[str, ...] = ("sentences",)

    def load(self, name: str) -> BuiltinData:
        text = resources.files("shared.datasets").joinpath(f"{name}.txt").read_text("utf-8")
        return BuiltinData(samples=read_samples(text))
