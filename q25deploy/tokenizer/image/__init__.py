"""The Q25TOKRT runtime image the board maps in place: its format and builder (``format``) and
the reader that checks it as the C runtime does (``reader``).

Exports (by module): ``format.build_image``, ``reader.open_image``/``read_image_file``."""
