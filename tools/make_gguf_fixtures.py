"""Make the synthetic GGUF fixtures of the `gguf` backend, and their independent reference numbers.

This script is a one-off tool, not a dependency of jaxarena. No Mistral or
Qwen2 weights can be had offline, so it writes two tiny, *synthetic* models
(random weights, 2 layers, d_model 64, 4 query heads and 2 KV heads of 16
dims, d_ff 256, a few hundred tokens) with the `gguf` package's writer:

* `llm/fixtures/tiny_llama.gguf`: architecture "llama" as GGUF stores
  Mistral: a SentencePiece-style vocabulary (`tokenizer.ggml.model = "llama"`,
  scores, `<0xXX>` byte tokens, `▁` spaces, BOS `<s>`), Mistral's original
  `[INST]` chat template (no system role), Q/K in llama.cpp's permuted row
  order, an untied `output.weight`;
* `llm/fixtures/tiny_qwen2.gguf`: architecture "qwen2": q/k/v biases,
  unpermuted (NEOX) Q/K, an untied `output.weight`, a byte-level BPE vocabulary
  trained here with the `tokenizers` package on the prompt's words under the
  Qwen2 split regex (`tokenizer.ggml.pre = "qwen2"`), and Qwen2's ChatML chat
  template.

Tensor types, spread over the tensors of both files (see `LLAMA_TYPES`,
`QWEN2_TYPES`): F32, F16, BF16, Q8_0, Q4_0, Q4_1 and Q5_0 are real
quantizations of random float weights by `gguf.quants.quantize`. The python
`gguf` package cannot quantize K-quants, so the Q4_K, Q5_K and Q6_K tensors
(`ffn_down`, whose rows of 256 fit one super-block) are random *blocks*:
random quant bits and sub-block scales, with the f16 block scales set so the
values have the intended spread. Any bytes are a valid K-quant block, so these
exercise the real layout, but both our loader and transformers dequantize with
`gguf.quants.dequantize`: for K-quants only llama.cpp (the `llamacpp` step) is
an independent check of the dequantization itself. No other tensor type is
covered.

Steps (run from the repository root):

    # 1. write the two GGUFs (any environment with gguf, numpy and tokenizers, e.g. .venv)
    .venv/bin/python tools/make_gguf_fixtures.py write

    # 2. reference numbers from HF transformers (scratch venv outside the repo)
    python3 -m venv /tmp/refenv
    /tmp/refenv/bin/pip install torch==2.13.0 transformers gguf jinja2
    /tmp/refenv/bin/python tools/make_gguf_fixtures.py reference

    # 3. optional: llama.cpp's numbers too (llama-cpp-python builds in ~8 min on 2 cores)
    python3 -m venv /tmp/llamaref
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" /tmp/llamaref/bin/pip install llama-cpp-python
    /tmp/llamaref/bin/python tools/make_gguf_fixtures.py llamacpp

Step 2 writes `llm/fixtures/tiny_<arch>_reference.json`: for each chat case
the prompt text rendered by transformers' `apply_chat_template` (the llama
template has no system role, so the system text opens the user message), its
token ids, the float32 next-token logits over the whole vocabulary, and a
greedy 3-token continuation; and token ids for a list of raw strings. For the
llama vocabulary the ids follow llama.cpp's SentencePiece rule (`spm_encode`:
transformers' own GGUF llama tokenizer drops the "▁" after `<s>` and never
doubles a leading space); the text of each piece is still transformers'. Step 3
adds llama.cpp's token ids and logits for the same texts under the key
`llama_cpp`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "llm" / "fixtures"
SEED = 20260601

D_MODEL, D_FF, N_HEADS, N_KV, N_LAYERS, CONTEXT = 64, 256, 4, 2, 2, 512

# jaxarena.llm.prompt.SYSTEM, quoted so that this tool needs no jaxarena install
# (a test checks that the fixtures still use it).
SYSTEM = (
    "You control a squad of NPC soldiers fighting an enemy bot. Choose the best squad "
    "tactic for the current situation.\n"
    "Reply with exactly one digit: 0 = Surround, 1 = Aggressive, 2 = Flank, 3 = Retreat."
)
USERS = [
    "Enemy bot HP: 245/300. Average NPC HP: 41/60. NPCs alive: 4/5. Bot moving: yes. Nearest NPC distance: 6.3 units.",
    "Enemy bot HP: 12/300. Average NPC HP: 59/60. NPCs alive: 5/5. Bot moving: no. Nearest NPC distance: 0.7 units.",
    "Enemy bot HP: 300/300. Average NPC HP: 3/60. NPCs alive: 1/5. Bot moving: yes. Nearest NPC distance: 31.9 units.",
    "Bot moving: yes.",
    "Café naïve: ünïcödé needs byte fallback 🙂",
]
RAW_STRINGS = [
    "",
    " ",
    "Enemy bot HP: 245/300.",
    "  two leading spaces",
    "tabs\tand\nnewlines\n\n",
    "don't you'll",
    "Ünïcödé ΑΒΓ 日本 🙂",
    "0",
    "1",
    " 2",
    "[INST] hi [/INST]",
    "<|im_start|>user\nhi<|im_end|>",
]

# Mistral-7B-Instruct-v0.1's template in substance: no system role (it raises).
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
# Qwen2-Instruct's ChatML template (a default system turn when none is given).
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Tensor type per (layer or None, tensor); every supported type appears at least once.
LLAMA_TYPES = {
    (None, "token_embd"): "F16",
    (None, "output"): "Q8_0",
    (0, "attn_q"): "Q8_0",
    (0, "attn_k"): "Q4_0",
    (0, "attn_v"): "Q4_1",
    (0, "attn_output"): "Q5_0",
    (0, "ffn_gate"): "BF16",
    (0, "ffn_up"): "F16",
    (0, "ffn_down"): "Q4_K",
    (1, "attn_q"): "F16",
    (1, "attn_k"): "BF16",
    (1, "attn_v"): "Q8_0",
    (1, "attn_output"): "F32",
    (1, "ffn_gate"): "Q4_0",
    (1, "ffn_up"): "Q5_0",
    (1, "ffn_down"): "Q6_K",
}
QWEN2_TYPES = {
    (None, "token_embd"): "Q8_0",
    (None, "output"): "F16",
    (0, "attn_q"): "BF16",
    (0, "attn_k"): "Q5_0",
    (0, "attn_v"): "Q4_1",
    (0, "attn_output"): "Q8_0",
    (0, "ffn_gate"): "Q4_1",
    (0, "ffn_up"): "Q4_0",
    (0, "ffn_down"): "Q5_K",
    (1, "attn_q"): "Q4_0",
    (1, "attn_k"): "F16",
    (1, "attn_v"): "F32",
    (1, "attn_output"): "BF16",
    (1, "ffn_gate"): "Q8_0",
    (1, "ffn_up"): "BF16",
    (1, "ffn_down"): "Q4_K",
}


def corpus_words() -> list[str]:
    text = " ".join([SYSTEM, *USERS[:4], "Surround Aggressive Flank Retreat INST"])
    words = []
    for w in text.replace("\n", " ").split(" "):
        w = "".join(c for c in w if c.isalpha())
        if len(w) > 1 and w not in words:
            words.append(w)
    return words


# ----------------------------------------------------------------- vocabularies
def spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-style BPE vocabulary: specials, 256 byte tokens, characters, merged pieces.

    Pieces are the left-to-right prefixes of "▁word" for the prompt's words,
    scored so that shorter pieces merge first (as a trained vocabulary would).
    There is no "▁0".."▁9" piece and no newline piece, as in Mistral's vocabulary:
    a reply " 2" is "▁", "2", and a newline is the byte token <0x0A>.
    """
    import gguf

    T = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [T.BYTE] * 256
    chars = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;/=[]?!'-()"))
    pieces = ["\u2581"] + chars
    by_len: dict[int, list[str]] = {}
    for w in corpus_words():
        full = "\u2581" + w
        for n in range(2, len(full) + 1):
            by_len.setdefault(n, []).append(full[:n])
    for extra in ("NP", "NPC", "NPCs", "HP", "ing", "ed", "[/", "INST", "]."):
        by_len.setdefault(len(extra), []).append(extra)
    for n in sorted(by_len):
        for p in by_len[n]:
            if p not in pieces:
                pieces.append(p)
    tokens += pieces
    types += [T.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, [int(t) for t in types]


QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def byte_level_vocab() -> tuple[list[str], list[int], list[str]]:
    """A byte-level BPE vocabulary trained on the prompts with the Qwen2 split: (tokens, types, merges)."""
    import gguf
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    corpus = [SYSTEM, *USERS, "system user assistant You are a helpful assistant."] * 3
    tok.train_from_iterator(corpus, trainer)
    state = json.loads(tok.to_str())["model"]
    vocab = sorted(state["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [int(gguf.TokenType.NORMAL)] * len(tokens) + [int(gguf.TokenType.CONTROL)] * len(specials)
    return tokens + specials, types, merges


# ----------------------------------------------------------------- tensors
def _k_quant_blocks(rng, qtype, rows: int, cols: int, std: float) -> np.ndarray:
    """Random K-quant blocks whose dequantized values have roughly `std` spread (see the docstring)."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    f16 = raw.view(np.uint8)

    def set_scales(d: float):
        if qtype == gguf.GGMLQuantizationType.Q6_K:
            f16[:, size - 2 : size] = np.full((n_blocks, 1), d, np.float16).view(np.uint8)
        else:
            # d, then dmin ~ the mean of d * scale * q, so the values centre near zero.
            zero = 7.5 if qtype == gguf.GGMLQuantizationType.Q4_K else 15.5
            f16[:, 0:2] = np.full((n_blocks, 1), d, np.float16).view(np.uint8)
            f16[:, 2:4] = np.full((n_blocks, 1), d * zero, np.float16).view(np.uint8)

    set_scales(1e-3)
    values = gguf.quants.dequantize(raw, qtype)
    set_scales(1e-3 * std / float(np.std(values)))
    return raw.reshape(rows, -1)


def add_matrix(writer, rng, name: str, qtype_name: str, w: np.ndarray) -> None:
    """Add a float matrix (out, in) as `qtype_name`, quantized (or for K-quants, replaced by random blocks)."""
    import gguf

    qt = gguf.GGMLQuantizationType[qtype_name]
    if qtype_name == "F32":
        writer.add_tensor(name, w.astype(np.float32))
    elif qtype_name == "F16":
        writer.add_tensor(name, w.astype(np.float16))
    elif qtype_name.endswith("_K"):
        writer.add_tensor(name, _k_quant_blocks(rng, qt, *w.shape, float(np.std(w))), raw_dtype=qt)
    else:
        writer.add_tensor(name, gguf.quants.quantize(w.astype(np.float32), qt), raw_dtype=qt)


def write_model(path: Path, arch: str, types: dict, vocab_size: int, add_metadata, bias: bool) -> None:
    import gguf

    rng = np.random.default_rng(SEED + len(arch))
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"jaxarena synthetic tiny {arch} fixture")
    w.add_uint32(f"{arch}.block_count", N_LAYERS)
    w.add_uint32(f"{arch}.context_length", CONTEXT)
    w.add_uint32(f"{arch}.embedding_length", D_MODEL)
    w.add_uint32(f"{arch}.feed_forward_length", D_FF)
    w.add_uint32(f"{arch}.attention.head_count", N_HEADS)
    w.add_uint32(f"{arch}.attention.head_count_kv", N_KV)
    w.add_uint32(f"{arch}.rope.dimension_count", D_MODEL // N_HEADS)
    add_metadata(w)

    hd = D_MODEL // N_HEADS
    shapes = {
        "attn_q": (N_HEADS * hd, D_MODEL),
        "attn_k": (N_KV * hd, D_MODEL),
        "attn_v": (N_KV * hd, D_MODEL),
        "attn_output": (D_MODEL, N_HEADS * hd),
        "ffn_gate": (D_FF, D_MODEL),
        "ffn_up": (D_FF, D_MODEL),
        "ffn_down": (D_MODEL, D_FF),
    }
    # Q/K a little larger than 1/sqrt(d) so that attention is far from uniform:
    # a position or masking bug then moves the logits well past the tolerance.
    gain = {"attn_q": 2.0, "attn_k": 2.0}
    add_matrix(w, rng, "token_embd.weight", types[(None, "token_embd")], rng.normal(size=(vocab_size, D_MODEL)))
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.normal(size=D_MODEL)).astype(np.float32))
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.normal(size=D_MODEL)).astype(np.float32))
        for t, shape in shapes.items():
            m = rng.normal(size=shape) * gain.get(t, 1.0) / np.sqrt(shape[1])
            add_matrix(w, rng, p + t + ".weight", types[(i, t)], m)
        if bias:
            for t in ("attn_q", "attn_k", "attn_v"):
                w.add_tensor(p + t + ".bias", (0.5 * rng.normal(size=shapes[t][0])).astype(np.float32))
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.normal(size=D_MODEL)).astype(np.float32))
    add_matrix(w, rng, "output.weight", types[(None, "output")], rng.normal(size=(vocab_size, D_MODEL)) * 0.3)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_write(_args) -> None:
    tokens, scores, types = spm_vocab()

    def llama_meta(w):
        w.add_float32("llama.rope.freq_base", 10000.0)
        w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        w.add_uint32("llama.vocab_size", len(tokens))
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(True)
        w.add_chat_template(LLAMA_TEMPLATE)

    write_model(FIXTURES / "tiny_llama.gguf", "llama", LLAMA_TYPES, len(tokens), llama_meta, bias=False)

    btokens, btypes, merges = byte_level_vocab()

    def qwen2_meta(w):
        w.add_float32("qwen2.rope.freq_base", 1000000.0)
        w.add_float32("qwen2.attention.layer_norm_rms_epsilon", 1e-6)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(btokens)
        w.add_token_types(btypes)
        w.add_token_merges(merges)
        w.add_bos_token_id(btokens.index("<|endoftext|>"))
        w.add_eos_token_id(btokens.index("<|im_end|>"))
        w.add_pad_token_id(btokens.index("<|endoftext|>"))
        w.add_add_bos_token(False)
        w.add_chat_template(QWEN2_TEMPLATE)

    write_model(FIXTURES / "tiny_qwen2.gguf", "qwen2", QWEN2_TYPES, len(btokens), qwen2_meta, bias=True)
    for name in ("tiny_llama.gguf", "tiny_qwen2.gguf"):
        print(f"wrote {FIXTURES / name}: {(FIXTURES / name).stat().st_size} bytes")


# ----------------------------------------------------------------- references
def messages(arch: str, user: str) -> list[dict]:
    if arch == "llama":  # no system role: the system text opens the user message
        return [{"role": "user", "content": f"{SYSTEM}\n\n{user}"}]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ref_path(arch: str) -> Path:
    return FIXTURES / f"tiny_{arch}_reference.json"


def plain_encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def spm_encode(tok, text: str) -> list[int]:
    """Token ids with llama.cpp's SentencePiece rule: a space in front of every piece of text that
    starts the string or follows a special token (as SentencePiece's dummy prefix does per call).

    transformers' GGUF llama tokenizer puts "▁" only at the very start of the string and never
    doubles a leading space (Metaspace, prepend_scheme "first"), so it disagrees with llama.cpp after
    `<s>` and on text that starts with a space. Here each piece of text goes to it with one space
    in front, which its Metaspace turns into exactly that "▁", and special tokens are mapped alone.
    """
    specials = sorted(tok.all_special_tokens, key=len, reverse=True)
    pattern = "(" + "|".join(re.escape(t) for t in specials) + ")"
    ids: list[int] = []
    for piece in re.split(pattern, text):
        if not piece:
            continue
        if piece in specials:
            ids.append(tok.convert_tokens_to_ids(piece))
        else:
            ids += tok(" " + piece, add_special_tokens=False)["input_ids"]
    return ids


def cmd_reference(_args) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    for arch in ("llama", "qwen2"):
        name = f"tiny_{arch}.gguf"
        tok = AutoTokenizer.from_pretrained(str(FIXTURES), gguf_file=name)
        encode = partial(spm_encode, tok) if arch == "llama" else partial(plain_encode, tok)
        model = AutoModelForCausalLM.from_pretrained(str(FIXTURES), gguf_file=name, dtype=torch.float32)
        model.eval()
        chat = []
        for user in USERS:
            text = tok.apply_chat_template(messages(arch, user), tokenize=False, add_generation_prompt=True)
            ids = encode(text)
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0, -1].float().numpy()
                greedy = model.generate(
                    torch.tensor([ids]), max_new_tokens=3, do_sample=False, attention_mask=torch.ones(1, len(ids))
                )[0, len(ids) :].tolist()
            chat.append(
                {
                    "system": SYSTEM,
                    "user": user,
                    "text": text,
                    "ids": ids,
                    "logits": [round(float(x), 5) for x in logits],
                    "greedy_ids": greedy,
                }
            )
        raw = [{"text": s, "ids": encode(s)} for s in RAW_STRINGS]
        out = {
            "about": f"HF transformers reference for jaxarena's synthetic {name}; made by tools/make_gguf_fixtures.py",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "platform": platform.platform(),
            "gguf": name,
            "gguf_sha256": _sha256(FIXTURES / name),
            "chat": chat,
            "raw": raw,
        }
        _ref_path(arch).write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
        print(f"wrote {_ref_path(arch)}")


def cmd_llamacpp(_args) -> None:
    import llama_cpp

    for arch in ("llama", "qwen2"):
        name = f"tiny_{arch}.gguf"
        ref = json.loads(_ref_path(arch).read_text())
        if ref["gguf_sha256"] != _sha256(FIXTURES / name):
            raise SystemExit(f"{name} changed since the transformers reference; rerun `reference` first")
        llm = llama_cpp.Llama(
            model_path=str(FIXTURES / name), n_ctx=CONTEXT, n_threads=2, logits_all=True, verbose=False, seed=0
        )
        cases = []
        for case in ref["chat"]:
            ids = llm.tokenize(case["text"].encode("utf-8"), add_bos=False, special=True)
            llm.reset()
            llm.eval(ids)
            row = np.asarray(llm.scores[len(ids) - 1], np.float32)
            cases.append({"ids": ids, "logits": [round(float(x), 5) for x in row]})
        raw = [llm.tokenize(r["text"].encode("utf-8"), add_bos=False, special=True) for r in ref["raw"]]
        ref["llama_cpp"] = {"version": llama_cpp.__version__, "chat": cases, "raw_ids": raw}
        _ref_path(arch).write_text(json.dumps(ref, ensure_ascii=False, separators=(",", ":")))
        print(f"added llama.cpp numbers to {_ref_path(arch)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=("write", "reference", "llamacpp"))
    args = ap.parse_args()
    {"write": cmd_write, "reference": cmd_reference, "llamacpp": cmd_llamacpp}[args.step](args)


if __name__ == "__main__":
    main()
