"""Where a model comes from and what is in it: the strict GGUF reader, model sources (files and
Ollama's store), the catalog ``inspect`` shows, and synthetic Qwen2.5-shaped models.

Exports (by module): ``gguf.GGUFFile``, ``source.resolve``/``ModelSource``, ``catalog.build_catalog``,
``synthetic.write_model``, ``demo.default_model``."""
