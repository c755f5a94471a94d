"""The board-side script (``q25-ota.sh``), shipped as package data: read through
:func:`q25deploy.resources.ota_script`."""
