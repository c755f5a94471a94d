"""A plugin that fails to load, as a third-party plugin with a missing dependency would."""

import q25deploy_this_dependency_is_missing  # noqa: F401
