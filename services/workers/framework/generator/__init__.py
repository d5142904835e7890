"""The model in this process as a generation backend: the token loop over a predictor
(``loop``) and its adapter to the generation port (``backend``)."""

from services.workers.framework.generator.backend import InProcessBackend, generation_pass
from services.workers.framework.generator.loop import PERPLEXITY_TOKENS, Generator, perplexity

__all__ = ["PERPLEXITY_TOKENS", "Generator", "InProcessBackend", "generation_pass", "perplexity"]
