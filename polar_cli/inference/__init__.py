"""Inference engines: SGLang launched from a recipe, a running SGLang/vLLM by URL, the scripted gold/noop policies."""
