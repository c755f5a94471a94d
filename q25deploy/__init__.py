"""q25deploy: take a Qwen2.5 GGUF (a file or an Ollama model) onto Zynq UltraScale+ boards."""

__version__ = "0.1.0"
