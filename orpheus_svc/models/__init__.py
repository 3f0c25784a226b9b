"""Checkpoints in the Hugging Face layout: Llama spec, loader/writer, tokenizer, demo checkpoint.

Import the submodules directly (llama_config, loader, tokenizer, demo, hub); this package
imports nothing itself so that `hub` stays usable without torch.
"""
