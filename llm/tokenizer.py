"""A GGUF model's tokenizer, rebuilt from the file's own vocabulary, plus its chat template.

Three tokenizers, chosen by `tokenizer.ggml.model` and `tokenizer.ggml.pre`:

* gpt2 / smollm (SmolLM2): llama.cpp first splits every digit on its own
  (`\\p{N}`), then applies the GPT-2 split regex; the HF tokenizer of the same
  model does the same with `Digits(individual_digits=True)` then `ByteLevel`.
* gpt2 / qwen2 (Qwen2, Qwen2.5): byte-level BPE after the Qwen2 split regex
  (`QWEN2_SPLIT`: single digits, letters with one leading non-letter, ...).
* llama (SentencePiece BPE: Llama 2, Mistral): `▁` for spaces, one `▁` in
  front of every piece of text that starts the prompt or follows a special
  token (llama.cpp's `add_space_prefix`), merges recovered from the token
  scores (a higher score merges first), and `<0xXX>` byte tokens for any
  character the vocabulary lacks.

We build each with the `tokenizers` package, so encoding is fast (Rust) and
needs no file beyond the GGUF. Control tokens (`<|im_start|>`, `<s>`, ...) are
added as special tokens, so the chat template's markers become single ids, as
they do in llama.cpp when it tokenizes with special-token parsing on.
"""

from __future__ import annotations

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from .chat_template import ChatTemplate

# GGUF token types (gguf.TokenType): 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte.
_NORMAL, _CONTROL, _USER_DEFINED = 1, 3, 4
SUPPORTED_PRE = ("smollm", "qwen2")
#: (tokenizer.ggml.model, tokenizer.ggml.pre) pairs we can build; pre is ignored for "llama".
SUPPORTED_TOKENIZERS = ("gpt2/smollm", "gpt2/qwen2", "llama (SentencePiece BPE)")
# Qwen2's pre-tokenizer split (as in its tokenizer.json and llama.cpp's "qwen2" pre).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPACE = "\u2581"  # SentencePiece's visible space, "▁"


def _spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary: every split of a normal token into two
    normal tokens, best score first (SentencePiece merges the highest-scoring pair first)."""
    normal = {t: i for i, (t, ty) in enumerate(zip(tokens, types, strict=True)) if ty == _NORMAL}
    found = []
    for tok, i in normal.items():
        for cut in range(1, len(tok)):
            left, right = tok[:cut], tok[cut:]
            if left in normal and right in normal:
                found.append((-scores[i], i, cut, left, right))
    found.sort()
    return [(left, right) for *_, left, right in found]


def _build_spm(fields: dict, tokens: list[str], types: list[int]) -> Tokenizer:
    scores = [float(x) for x in fields["tokenizer.ggml.scores"]]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    unk_id = fields.get("tokenizer.ggml.unknown_token_id", 0)
    tok = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=_spm_merges(tokens, scores, types),
            unk_token=tokens[int(unk_id)],
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))
    steps = [normalizers.Prepend(_SPACE)] if prefix else []
    # A normalizer runs on each piece of text between special tokens, which is
    # where llama.cpp adds its space prefix too.
    tok.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", _SPACE)])
    tok.pre_tokenizer = None
    dec = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        dec.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(dec)
    return tok


def _build_byte_level(pre: str, tokens: list[str], merges: list[str]) -> Tokenizer:
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                # use_regex=True applies the GPT-2 split pattern; no prefix space,
                # matching `tokenizer.ggml.add_space_prefix = False`.
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    else:  # qwen2
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()
    return tok


def build_tokenizer(fields: dict) -> Tokenizer:
    """Build a `tokenizers.Tokenizer` from GGUF metadata (`tokenizer.ggml.*`)."""
    model = fields.get("tokenizer.ggml.model")
    pre = fields.get("tokenizer.ggml.pre")
    tokens = list(fields["tokenizer.ggml.tokens"])
    types = list(fields["tokenizer.ggml.token_type"])
    if model == "llama":
        tok = _build_spm(fields, tokens, types)
    elif model == "gpt2" and pre in SUPPORTED_PRE:
        tok = _build_byte_level(pre, tokens, list(fields["tokenizer.ggml.merges"]))
    else:
        raise ValueError(
            f"unsupported tokenizer: model={model!r}, pre={pre!r}; supported: {', '.join(SUPPORTED_TOKENIZERS)}"
        )
    specials = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types, strict=True)
        if ty in (_CONTROL, _USER_DEFINED)
    ]
    tok.add_special_tokens(specials)
    return tok


def chatml(system: str, user: str) -> str:
    """Render one system + one user message with the assistant turn opened.

    This is what SmolLM2's `tokenizer.chat_template` (ChatML) produces with
    `add_generation_prompt=True` (a test checks `ChatTokenizer.render` against
    it); `is_chatml_template` checks that a template has the ChatML markers.
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
    """Tokenizer plus the chat template and stop tokens of one GGUF model.

    `render(system, user)` is the prompt text from the file's own chat template
    (for SmolLM2 it is byte-identical to `chatml`); `prefix(system)` is its part
    that does not depend on `user`. When the file asks for a BOS token
    (`tokenizer.ggml.add_bos_token`, llama.cpp's default for SentencePiece) and
    the template does not write one, it is put in front, as llama.cpp does.
    """

    def __init__(self, fields: dict):
        self.tokenizer = build_tokenizer(fields)
        tokens = fields["tokenizer.ggml.tokens"]

        def token_text(key: str) -> str:
            tid = fields.get(key)
            return tokens[int(tid)] if tid is not None and 0 <= int(tid) < len(tokens) else ""

        self.bos_token, self.eos_token = (
            token_text("tokenizer.ggml.bos_token_id"),
            token_text("tokenizer.ggml.eos_token_id"),
        )
        self.template = ChatTemplate(fields.get("tokenizer.chat_template") or "", self.bos_token, self.eos_token)
        default_bos = fields.get("tokenizer.ggml.model") == "llama"
        self.add_bos = bool(fields.get("tokenizer.ggml.add_bos_token", default_bos)) and bool(self.bos_token)
        self.eos_id = int(fields.get("tokenizer.ggml.eos_token_id", 2))
        # Generation ends at the end-of-turn marker or end-of-text, as llama.cpp's
        # end-of-generation set does for these vocabularies.
        stops = {self.eos_id}
        if fields.get("tokenizer.ggml.eot_token_id") is not None:
            stops.add(int(fields["tokenizer.ggml.eot_token_id"]))
        for name in ("<|im_end|>", "<|endoftext|>"):
            tid = self.tokenizer.token_to_id(name)
            if tid is not None:
                stops.add(tid)
        self.stop_ids = frozenset(stops)
        # The token a reply ends with, as a training target: the template's end-of-turn marker, else EOS.
        eot = fields.get("tokenizer.ggml.eot_token_id")
        im_end = self.tokenizer.token_to_id("<|im_end|>")
        self.end_of_turn_id = int(eot) if eot is not None else (im_end if im_end is not None else self.eos_id)

    def _with_bos(self, text: str) -> str:
        if self.add_bos and not text.startswith(self.bos_token):
            return self.bos_token + text
        return text

    def render(self, system: str, user: str) -> str:
        """The prompt text of one system + user turn with the assistant turn opened."""
        return self._with_bos(self.template.render(system, user))

    def prefix(self, system: str) -> str:
        """The part of `render(system, user)` that is the same for every `user`."""
        return self._with_bos(self.template.prefix(system))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, with special markers parsed and no BOS added."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` for many texts at once (parallel in Rust)."""
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids; special tokens are dropped."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)
