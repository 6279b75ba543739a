"""Random-weight TinyLlama-1.1B and Llama-3-8B checkpoints with the real configs, for a GPU
host with no hub access (issue 13). Run on the GPU host with its torch + transformers:

    /opt/torch/.venv/bin/python3 benchmarks/gpu/build_models.py /root/gpu-work/models

Writes MODELS/tokenizer (a 32k ByteLevel BPE trained on the Python standard library's source,
as vllm_localenv.tiny_model does), MODELS/tinyllama and MODELS/llama3-8b (fp16 safetensors,
seeded random weights, built on the GPU). Decode throughput does not depend on weight values:
the runner sends fixed output lengths (ignore_eos). A model whose config.json exists is kept.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TOKENIZER_VOCAB = 32000
DEVICE = os.environ.get("BUILD_DEVICE", "cuda")  # cpu: a local smoke test of small shapes
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# the published configs' shapes (TinyLlama/TinyLlama-1.1B-Chat-v1.0, meta-llama/Meta-Llama-3-8B)
SHAPES = {
    "tinyllama": {
        "vocab_size": 32000,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
    },
    "llama3-8b": {
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
    },
}


def build_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    if (out / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(out)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(errors="replace") for p in sorted(stdlib.rglob("*.py"))[:3000]]
    special = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        model_max_length=8192,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(name: str, out: Path, tokenizer: PreTrainedTokenizerFast) -> dict[str, object]:
    if (out / "build.json").exists():
        built: dict[str, object] = json.loads((out / "build.json").read_text())
        return built
    t0 = time.perf_counter()
    config = LlamaConfig(
        **SHAPES[name],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float16",
    )
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float16)
    with torch.device(DEVICE):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out, safe_serialization=True)
    # Random logits pick ids across the whole vocabulary: every id must decode to text, or
    # the server streams empty chunks and TTFT/ITL measure nothing. Pad the 32k tokenizer with
    # plain added tokens up to the model's vocabulary (Llama-3: 128,256).
    padded = PreTrainedTokenizerFast.from_pretrained(tokenizer.name_or_path)  # a fresh copy
    missing = config.vocab_size - len(padded)
    if missing > 0:
        padded.add_tokens([f"<x{i}>" for i in range(missing)])
    padded.save_pretrained(out)
    info: dict[str, object] = {
        "model": name,
        "parameters": params,
        "weightBytes": params * 2,
        "dtype": "float16",
        "config": SHAPES[name],
        "buildSeconds": round(time.perf_counter() - t0, 1),
        "tokenizerSize": len(padded),
        "torch": torch.__version__,
    }
    (out / "build.json").write_text(json.dumps(info, indent=2))
    del model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return info


def main() -> None:
    root = Path(sys.argv[1])
    build_tokenizer(root / "tokenizer")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(root / "tokenizer")  # name_or_path set
    for name in sys.argv[2:] or SHAPES:
        info = build_model(name, root / name, tokenizer)
        print(json.dumps(info))


if __name__ == "__main__":
    main()
