"""textproc in front of vLLM's own engine processes (``textproc serve --engine vllm
--data-parallel-size N``): vLLM's engine-core wire spoken from outside vLLM (:mod:`.wire`), the
per-request choice of engine (:mod:`.routing`), vLLM's headless command (:mod:`.launch`) and the
process between textproc's detokenizer and the engines (:mod:`.front`). Imports nothing of vLLM.
"""
