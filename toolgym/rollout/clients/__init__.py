"""LLM clients behind one protocol: in-process vLLM, an OpenAI-compatible HTTP server, HF transformers."""

from toolgym.rollout.clients.base import Generation, LLMClient, Sampling

__all__ = ["Generation", "LLMClient", "Sampling"]
