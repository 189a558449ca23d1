"""Fine-tuning the coder's LLM on the squad-policy language: SFT on baselines and variants, then GRPO."""
