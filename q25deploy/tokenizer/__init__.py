"""The model's tokenizer, exactly as llama.cpp runs it: vocabulary, byte-level BPE, the Qwen2
pre-tokenizer, the host codec, the exported assets and the Q25TOKRT runtime image (``image/``).

Exports (by module): ``vocab.vocab_from_gguf``, ``codec.Codec``, ``assets.tokenizer_assets``,
``cache`` (assets by content key), ``prompts.SMOKE_PROMPTS``, ``image.format``/``image.reader``."""
