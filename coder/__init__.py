"""LLM-written white-box squad policies (after SMAC-R1): language, sandbox, scoring, loop."""
