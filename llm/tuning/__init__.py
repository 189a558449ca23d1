"""Fine-tuning the tag model on the arena's own feedback: LoRA adapters trained by SFT, DPO or GRPO.

- `losses`: the three objectives over the model's 4-way tag choice.
- `data`: decision states visited by a squad, priced by the oracle (Q with CIs).
- `train`: one trainer for the three methods, resumable, with held-out metrics.
"""
