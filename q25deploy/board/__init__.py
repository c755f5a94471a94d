"""A board and the memory plan for it: board files, partitions and reserved regions, and what the
plan becomes for other tools (device-tree fragment, C header, SVG picture). Pure, no I/O but reading board files.

Exports (by module): ``boardfile.load_board``/``Board``, ``plan.plan_memory``/``MemoryPlan``,
``dtsi.reserved_memory_dtsi``, ``header.memory_header``, ``svg.memory_svg``."""
