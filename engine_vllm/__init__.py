"""vLLM's v1 engine core behind textproc: ``python -m engine_vllm`` (``textproc serve --engine vllm``).

Runs in the engine's own Python environment (vLLM, torch) and imports from textproc only
``textproc.engine`` (EngineLink) and, through it, the table-only constraint guide: what any
engine would import. textproc never imports this package.
"""
