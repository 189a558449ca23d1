"""Combination C: an RL policy that picks among the LLM's candidate tags, after
"Language Agents with Reinforcement Learning for Strategic Play in the Werewolf Game" (Xu et al.).

Every 5 s the LLM deduces the opponent (`llm.deduction`) and proposes three
candidate tags (`llm.candidates`); a small attention policy trained with PPO
against a population of opponents picks one, and the frozen squad policy (B)
plays it. See docs/selector.md.
"""
