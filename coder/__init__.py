"""LLM-written white-box squad policies (issue #13, seed 002): language, sandbox, scoring, loop."""
