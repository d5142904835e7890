"""``--served-model NAME --tokenizer FILE``: benchmark a model a server serves that no manifest
names. dlscope writes its manifest (``dlscope.served``), registers it where the evaluation
runs (the embedded registry, or the gateway's, the tokenizer uploaded with it) and evaluates
it on the endpoint framework, so the evaluation records it like any other model."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from dlscope.cli.client import Client
from dlscope.cli.options import EvaluationOptions
from dlscope.cli.terminal import fail
from shared.errors import DlscopeError
from shared.manifests.model import SERVED_BY

__all__ = ["OptionalModelArg", "ServedOptions"]

OptionalModelArg = Annotated[
    str | None,
    typer.Argument(help="model name, e.g. squeezenet (left out with --served-model)"),
]
ServedModel = Annotated[
    str | None,
    typer.Option(
        "--served-model",
        help="benchmark the model the --endpoint server serves under this name, with no "
        "manifest (needs --tokenizer); dlscope registers one for it, named served-NAME",
    ),
]
TokenizerOpt = Annotated[
    Path | None,
    typer.Option(
        "--tokenizer",
        help="with --served-model: the model's Hugging Face tokenizer.json, which makes the "
        "prompts and counts the tokens",
    ),
]
ContextLength = Annotated[
    int,
    typer.Option(
        min=16,
        max=1_048_576,
        help="with --served-model: the model's context (a prompt and its answer must fit)",
    ),
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServedOptions:
    """A served model named by its server's name rather than by a manifest."""

    served_model: ServedModel = None
    tokenizer: TokenizerOpt = None
    context_length: ContextLength = 4096

    def resolve(
        self, model: str | None, options: EvaluationOptions, client: Client
    ) -> tuple[str, EvaluationOptions]:
        """The model to evaluate and the options to evaluate it with: ``model`` as given,
        or the served model's manifest, registered through ``client`` first, on the
        endpoint framework."""
        if self.served_model is None:
            if self.tokenizer is not None:
                raise fail("--tokenizer goes with --served-model NAME", 2)
            if model is None:
                raise fail(
                    "name a model (e.g. squeezenet; `dlscope models list` lists them), or a "
                    "served one: --served-model NAME --tokenizer FILE --endpoint URL",
                    2,
                )
            return model, options
        if model is not None:
            raise fail(f"--served-model names the model: leave out {model!r}", 2)
        if self.tokenizer is None:
            raise fail(
                "--served-model needs --tokenizer FILE: the model's tokenizer.json, which makes "
                "the prompts and counts the tokens",
                2,
            )
        if options.framework not in ("onnxruntime", SERVED_BY):  # onnxruntime: the default
            raise fail(
                f"--served-model runs on the {SERVED_BY} framework, not {options.framework!r}",
                2,
            )
        from dlscope.served import served_manifest

        try:
            manifest = served_manifest(
                self.served_model, self.tokenizer, context_length=self.context_length
            )
        except DlscopeError as exc:
            raise fail(str(exc), 2) from exc
        client.register(manifest, f"--served-model {self.served_model}")
        pinned = f"=={manifest.version}"
        served = dataclasses.replace(options, framework=SERVED_BY, version=pinned)
        return manifest.name, served
