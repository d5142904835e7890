"""The model manifest schema: a complete, code-free description of one model version."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from shared.inputs import MAX_DESCRIPTION, MAX_ITEMS
from shared.manifests.fields import (
    ElementType,
    FrameworkName,
    ModelFrameworkName,
    Strict,
    Versioned,
    check_dims,
)
from shared.manifests.pipeline import check_input_steps, check_output_steps
from shared.manifests.sources import ModelSource
from shared.manifests.steps import (
    ChatTemplateStep,
    InputStep,
    OutputStep,
    TokenizeStep,
    text_steps,
)
from shared.manifests.versions import parse_constraint

__all__ = [
    "SERVED_BY",
    "Accuracy",
    "CacheLink",
    "ElementType",
    "FrameworkRequirement",
    "Generation",
    "HardwareHints",
    "InputSpec",
    "ModelManifest",
    "OutputSpec",
    "TensorSpec",
]


class FrameworkRequirement(Strict):
    name: ModelFrameworkName
    version: str = Field(default="*", description="version constraint, PEP 440 syntax")

    @field_validator("version")
    @classmethod
    def _constraint(cls, value: str) -> str:
        parse_constraint(value)
        return value


class TensorSpec(Strict):
    name: str = Field(min_length=1)
    element_type: ElementType = "float32"
    # -1 marks a dimension chosen at run time (the batch dimension, usually the first).
    shape: list[int] = Field(min_length=1, max_length=MAX_ITEMS)
    layout: str | None = None

    _dims = field_validator("shape")(check_dims)


class InputSpec(TensorSpec):
    """A model input and the steps that make it from one raw sample (an image file, say)."""

    steps: list[InputStep] = Field(default_factory=list, max_length=MAX_ITEMS)

    @model_validator(mode="after")
    def _steps_give_this_tensor(self) -> InputSpec:
        check_input_steps(
            self.steps, element_type=self.element_type, shape=self.shape, layout=self.layout
        )
        return self


class OutputSpec(TensorSpec):
    """A model output and the steps that make an answer of it (probabilities, top-5, ...)."""

    steps: list[OutputStep] = Field(default_factory=list, max_length=MAX_ITEMS)

    @model_validator(mode="after")
    def _topk_last(self) -> OutputSpec:
        check_output_steps(self.steps)
        return self


class HardwareHints(Strict):
    """What a model needs to run well; the scheduler may use it, a user reads it."""

    min_memory_bytes: PositiveInt | None = None
    accelerators: list[Literal["gpu", "fpga"]] = Field(default_factory=list, max_length=2)
    notes: str = Field(default="", max_length=MAX_DESCRIPTION)


class Accuracy(Strict):
    """The conventional ``attributes.accuracy``: expected quality, as fractions in [0, 1]."""

    top1: float | None = Field(default=None, ge=0, le=1)
    top5: float | None = Field(default=None, ge=0, le=1)
    dataset: str | None = None


class CacheLink(Strict):
    """One tensor of the key-value cache: the input that takes it (``past``) and the output
    that gives it back grown by the step's tokens (``present``)."""

    past: str = Field(min_length=1)
    present: str = Field(min_length=1)


class Generation(Strict):
    """How a generative model's graph is driven: one call is one step (the prompt at prefill,
    then one token at a time), the cache passed in and out as tensors.

    - ``input_ids``: the input that takes the step's tokens ([batch, new]);
    - ``attention_mask``: where the graph has one, the input that says which positions so far
      are tokens (1) and which padding (0) ([batch, past + new]); with it, several prompts of
      different lengths run as one batch, each padded on the left. Without it the graph runs
      one sequence a call;
    - ``logits``: the output with the next token's scores ([batch, vocabulary]);
    - ``cache``: each cache tensor's input and output; ``cache_axis``, the axis of positions
      in them (empty, length 0, at the first step);
    - ``context_length``: the most positions the model attends to (prompt and output);
    - ``eos_token_ids``: the tokens that end a natural generation;
    - ``chat_template``: the model's Jinja chat template, for chat-formatted prompts.
    """

    input_ids: str = Field(min_length=1)
    attention_mask: str | None = Field(default=None, min_length=1)
    logits: str = Field(min_length=1)
    cache: list[CacheLink] = Field(default_factory=list, max_length=64)
    cache_axis: NonNegativeInt = 0
    context_length: PositiveInt
    eos_token_ids: list[NonNegativeInt] = Field(default_factory=list, max_length=16)
    chat_template: str | None = Field(default=None, max_length=MAX_DESCRIPTION)


# Frameworks that run another framework's format: the ONNX graph of an onnxruntime model is
# what TensorRT builds its engine from and what the OpenCL engine executes.
ALSO_RUN_BY: dict[str, tuple[FrameworkName, ...]] = {"onnxruntime": ("tensorrt", "opencl")}
# The framework of a served model: a generative model with a tokenizer is also what a server
# behind an endpoint worker serves under the manifest's name (the same weights, elsewhere).
SERVED_BY: FrameworkName = "endpoint"


class ModelManifest(Versioned):
    """One immutable model version: what it computes, what it needs, where its files are.

    ``attributes`` is free-form, with conventional keys: ``training_dataset`` (a name),
    ``accuracy`` (``{top1, top5, dataset}``, checked when present) and ``weights`` (e.g.
    ``untrained-placeholder`` for a graph whose weights are not trained).
    """

    kind: Literal["model"] = "model"
    framework: FrameworkRequirement
    inputs: list[InputSpec] = Field(min_length=1, max_length=MAX_ITEMS)
    outputs: list[OutputSpec] = Field(min_length=1, max_length=MAX_ITEMS)
    # The graph (or the whole model, when it is one file); none for a served model, whose
    # weights are its server's (framework ``endpoint``).
    source: ModelSource | None = None
    # The name its server serves it under, where that is not the manifest's own (a served
    # model's: ``meta-llama/Llama-3.1-8B-Instruct`` is no manifest name).
    served_as: str | None = Field(
        default=None, min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$"
    )
    # Weights kept in a file of their own, for formats that split them from the graph.
    weights: ModelSource | None = None
    # A text model's tokenizer (a Hugging Face tokenizer.json), which its tokenize steps use.
    tokenizer: ModelSource | None = None
    # A generative model's step: which tensors carry the tokens, the scores and the cache.
    generation: Generation | None = None
    hardware: HardwareHints | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("inputs", "outputs")
    @classmethod
    def _unique_names(cls, value: list[TensorSpec]) -> list[TensorSpec]:
        names = [spec.name for spec in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tensor names must be unique, repeated: {', '.join(twice)}")
        return value

    @model_validator(mode="after")
    def _source_given(self) -> ModelManifest:
        endpoint = self.framework.name == SERVED_BY
        if self.source is None and not endpoint:
            raise ValueError(
                f"source: a model {self.framework.name} runs needs its file: add "
                "source: {uri: <path>, sha256: <its digest>} (only a served model, framework "
                f"{SERVED_BY}, has none)"
            )
        if endpoint and self.source is not None:
            raise ValueError(
                f"source: a served model (framework {SERVED_BY}) has no file of its own: its "
                "server holds the weights"
            )
        if endpoint and not self.served:
            raise ValueError(
                f"framework {SERVED_BY}: a served model generates text and names the "
                "tokenizer that counts its tokens: give it generation and tokenizer"
            )
        return self

    @model_validator(mode="after")
    def _tokenizer_given(self) -> ModelManifest:
        if self.task == "text-generation" and self.generation is None:
            raise ValueError(
                "task text-generation needs generation: {input_ids, logits, cache, "
                "context_length, ...}, which says how the model's steps are driven"
            )
        for i, spec in enumerate(self.inputs):
            if self.tokenizer is None and any(isinstance(s, TokenizeStep) for s in spec.steps):
                raise ValueError(
                    f"inputs.{i}.steps: tokenize needs the model's tokenizer: add "
                    "tokenizer: {uri: <tokenizer.json>, sha256: <its digest>}"
                )
        if self.tokenized:
            # One text makes every input (ids, mask, types): an input without a tokenize
            # step would get the text itself. A generative model's cache is made by the model.
            cache = {link.past for link in self.generation.cache} if self.generation else set()
            for i, spec in enumerate(self.inputs):
                if spec.name in cache:
                    continue
                if text_steps(spec.steps) is None:
                    raise ValueError(
                        f"inputs.{i}.steps: a text model makes every input from its texts: "
                        "start these steps with tokenize too"
                    )
        for i, spec in enumerate(self.inputs):
            chat = spec.steps and isinstance(spec.steps[0], ChatTemplateStep)
            if chat and (self.generation is None or self.generation.chat_template is None):
                raise ValueError(
                    f"inputs.{i}.steps.0: chat_template formats a prompt with the model's "
                    "generation.chat_template, and this model has none"
                )
        return self

    @model_validator(mode="after")
    def _generation_names_its_tensors(self) -> ModelManifest:
        generation = self.generation
        if generation is None:
            return self
        inputs = {spec.name: spec for spec in self.inputs}
        outputs = {spec.name: spec for spec in self.outputs}
        named: list[tuple[str, str, dict[str, InputSpec] | dict[str, OutputSpec]]] = [
            ("generation.input_ids", generation.input_ids, inputs)
        ]
        if generation.attention_mask is not None:
            named.append(("generation.attention_mask", generation.attention_mask, inputs))
        named.append(("generation.logits", generation.logits, outputs))
        for i, link in enumerate(generation.cache):
            named.append((f"generation.cache.{i}.past", link.past, inputs))
            named.append((f"generation.cache.{i}.present", link.present, outputs))
        for where, name, tensors in named:
            if name not in tensors:
                kind = "inputs" if tensors is inputs else "outputs"
                raise ValueError(f"{where}: {name!r} is not one of the model's {kind}")
        ids = inputs[generation.input_ids]
        if text_steps(ids.steps) is None:
            raise ValueError(
                f"generation.input_ids: input {ids.name!r} must start with a tokenize step"
            )
        for i, link in enumerate(generation.cache):
            shape = inputs[link.past].shape
            if generation.cache_axis >= len(shape) or shape[generation.cache_axis] != -1:
                raise ValueError(
                    f"generation.cache.{i}.past: {link.past!r} has shape {shape}, whose axis "
                    f"{generation.cache_axis} (cache_axis) must be -1: the cache grows"
                )
        return self

    @property
    def tokenized(self) -> bool:
        """Whether the model takes text: its inputs are made by tokenize steps."""
        return any(text_steps(spec.steps) is not None for spec in self.inputs)

    @field_validator("attributes")
    @classmethod
    def _conventional_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "accuracy" in value:
            try:
                Accuracy.model_validate(value["accuracy"])
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in ("accuracy", *err["loc"]))
                raise ValueError(f"{where}: {err['msg']}") from None
        return value

    @property
    def frameworks(self) -> tuple[FrameworkName, ...]:
        """The frameworks that run this model's files: its own, and those that take the same
        format (an ONNX graph is also what TensorRT and dlscope's OpenCL engine run)."""
        own = self.framework.name
        served = (SERVED_BY,) if self.served and own != SERVED_BY else ()
        return (own, *ALSO_RUN_BY.get(own, ()), *served)

    @property
    def served_name(self) -> str:
        """The name its server serves it under."""
        return self.served_as or self.name

    @property
    def served(self) -> bool:
        """Whether an endpoint worker can measure this model as a server serves it: it
        generates text and has the tokenizer that counts the tokens."""
        return self.generation is not None and self.tokenizer is not None

    def runs_on(self, framework: str) -> bool:
        return framework in self.frameworks

    def version_needed_by(self, framework: str) -> str:
        """The version constraint ``framework`` must meet: the manifest's for its own
        framework; any version of another that reads the format."""
        return self.framework.version if framework == self.framework.name else "*"

    @property
    def sources(self) -> dict[str, ModelSource]:
        """Every file to fetch, by role: ``graph`` (but for a served model), and ``weights``
        and ``tokenizer`` when there are."""
        files = {} if self.source is None else {"graph": self.source}
        if self.weights is not None:
            files["weights"] = self.weights
        if self.tokenizer is not None:
            files["tokenizer"] = self.tokenizer
        return files

    @property
    def accuracy(self) -> Accuracy | None:
        value = self.attributes.get("accuracy")
        return None if value is None else Accuracy.model_validate(value)
