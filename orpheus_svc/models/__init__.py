"""Checkpoints in the Hugging Face layout: Llama spec, loader/writer, tokenizer, demo checkpoint.

Import the submodules directly (llama_config, loader, tokenizer, demo); this package imports
nothing itself. Resolving a local directory or hub id is orpheus_svc/hub.py, one layer below
both models/ and audio/ (SNAC loading uses it too), so audio never imports models.
"""
