"""The naive baseline: transformers generate(), one request at a time, as in the second
reference lab. No batching, no paged KV cache: what serving with vLLM is compared against.

Run as a subprocess by scenarios/naive.py in an environment that has torch and transformers
(for example the vLLM venv), because the runner's own environment does not:

    python -m vllm_bench.naive --model-dir DIR --max-new-tokens N < prompts.json

stdin: a JSON list of prompt strings; stdout: one JSON document (the last line) with the
load time, the device and one sample per prompt. Every prompt generates exactly N new tokens
(min_new_tokens = max_new_tokens, greedy), like the runner's ignore_eos requests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def generate_all(
    model_dir: str, prompts: list[str], max_new_tokens: int, device: str, dtype: str = "float16"
) -> dict[str, Any]:
    import torch  # noqa: PLC0415 - only the naive subprocess has torch
    import transformers  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # the lab loads the checkpoint in fp16 (torch_dtype=torch.float16); "auto" keeps the
    # checkpoint's own dtype, "float32" what transformers loaded by default before v5
    torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).to(device).eval()
    load_seconds = time.perf_counter() - t0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    samples = []
    with torch.inference_mode():
        for prompt in prompts:
            inputs = tokenizer(prompt, return_tensors="pt").to(device)
            started = time.perf_counter()
            out = model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
            if device == "cuda":
                torch.cuda.synchronize()
            latency = time.perf_counter() - started
            prompt_tokens = int(inputs["input_ids"].shape[1])
            samples.append(
                {
                    "latencySeconds": round(latency, 6),
                    "promptTokens": prompt_tokens,
                    "outputTokens": int(out.shape[1]) - prompt_tokens,
                }
            )
    return {
        "loadSeconds": round(load_seconds, 3),
        "device": device,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "torchVersion": torch.__version__,
        "transformersVersion": transformers.__version__,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_bench.naive", description=__doc__)
    parser.add_argument("--model-dir", required=True, help="the model's weights on local disk")
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    parser.add_argument(
        "--dtype",
        default="float16",
        choices=("float16", "bfloat16", "float32", "auto"),
        help="the weights' dtype on the device (default float16, as the lab loads them)",
    )
    args = parser.parse_args(argv)
    prompts = json.load(sys.stdin)
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        parser.error("stdin must be a JSON list of prompt strings")
    result = generate_all(args.model_dir, prompts, args.max_new_tokens, args.device, args.dtype)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
