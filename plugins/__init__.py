"""q25deploy's built-in board plugins (installed as ``q25deploy_plugins``), registered
through the ``q25deploy`` entry-point group exactly like third-party plugins."""
