"""The core packer, ``q25deploy build`` and the exports: the pipeline of named stages from a model to a build
directory (payload copy, tensor export, atomic outputs, the BitBake layer, the C runtime build).

Exports (by module): ``pipeline.build``, ``outputs.OutputDir``, ``tensors.export_tensors``, ``runtime.build_runtime``."""
