"""The SmolLM2 tokenizer, rebuilt from the GGUF's own vocabulary and merges.

The GGUF says `tokenizer.ggml.model = "gpt2"` (byte-level BPE) and
`tokenizer.ggml.pre = "smollm"`. For that pre-tokenizer llama.cpp first splits
every digit on its own (`\\p{N}`), then applies the GPT-2 split regex; the HF
tokenizer of the same model does the same with `Digits(individual_digits=True)`
followed by `ByteLevel`. We build exactly that with the `tokenizers` package, so
encoding is fast (Rust) and needs no file beyond the GGUF.

Control tokens (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`, ...) are added as
special tokens, so the chat template's markers become single ids, as they do in
llama.cpp when it tokenizes with special-token parsing on.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# GGUF token types (gguf.TokenType): 1 normal, 3 control, 4 user-defined.
_CONTROL, _USER_DEFINED = 3, 4
SUPPORTED_PRE = ("smollm",)


def build_tokenizer(fields: dict) -> Tokenizer:
    """Build a `tokenizers.Tokenizer` from GGUF metadata (`tokenizer.ggml.*`)."""
    model = fields.get("tokenizer.ggml.model")
    pre = fields.get("tokenizer.ggml.pre")
    if model != "gpt2" or pre not in SUPPORTED_PRE:
        raise ValueError(f"unsupported tokenizer: model={model!r}, pre={pre!r}")
    tokens = list(fields["tokenizer.ggml.tokens"])
    types = list(fields["tokenizer.ggml.token_type"])
    vocab = {tok: i for i, tok in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            # use_regex=True applies the GPT-2 split pattern; no prefix space,
            # matching `tokenizer.ggml.add_space_prefix = False`.
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types, strict=True)
        if ty in (_CONTROL, _USER_DEFINED)
    ]
    tok.add_special_tokens(specials)
    return tok


def chatml(system: str, user: str) -> str:
    """Render one system + one user message with the assistant turn opened.

    This is what the GGUF's `tokenizer.chat_template` (ChatML) produces with
    `add_generation_prompt=True`; `is_chatml_template` checks that it still is.
    """
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def chatml_prefix(system: str) -> str:
    """The part of `chatml(system, user)` that does not depend on `user`."""
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"


def is_chatml_template(template: str | None) -> bool:
    """True when a Jinja chat template has the ChatML markers `chatml` renders."""
    if not template:
        return False
    # Templates spell the newline either as a real newline or as "\\n".
    text = template.replace("\\n", "\n")
    return all(
        part in text
        for part in ("'<|im_start|>' + message['role'] + '\n'", "'<|im_end|>' + '\n'", "'<|im_start|>assistant\n'")
    )


class ChatTokenizer:
    """Tokenizer plus the chat template and stop tokens of one GGUF model."""

    def __init__(self, fields: dict):
        self.tokenizer = build_tokenizer(fields)
        template = fields.get("tokenizer.chat_template")
        if template is not None and not is_chatml_template(template):
            raise ValueError("the GGUF chat template is not ChatML; chatml() would be wrong")
        self.eos_id = int(fields.get("tokenizer.ggml.eos_token_id", 2))
        # Generation ends at the end-of-turn marker or end-of-text, as llama.cpp's
        # end-of-generation set does for this vocabulary.
        stops = {self.eos_id}
        for name in ("<|im_end|>", "<|endoftext|>"):
            tid = self.tokenizer.token_to_id(name)
            if tid is not None:
                stops.add(tid)
        self.stop_ids = frozenset(stops)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, with special markers parsed and no BOS added."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` for many texts at once (parallel in Rust)."""
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids; special tokens are dropped."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)
