"""Update artifacts for OTA engines (Mender, SWUpdate) from a `q25deploy build` directory.

``plan`` turns a build into what travels (pure, validated); ``archive`` writes reproducible
tar/gzip/cpio; ``mender`` and ``swupdate`` lay out each engine's container; ``signing``
signs them; ``scripts/q25-ota.sh`` is the board side (BusyBox sh) both engines run;
``settings`` reads the board file's ``[ota]``; ``layer_files`` adds the engines' board parts to
the BitBake layer on request (through the core's ``q25deploy_layer_files``). The command is
``q25deploy.cli.package``.
"""
